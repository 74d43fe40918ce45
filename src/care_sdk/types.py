"""Typed data: messages and dialogues, rubrics, evaluations and rewards.

All models are frozen pydantic v2 models that round-trip through JSON exactly.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from enum import Enum
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from care_sdk._core import (
    CRITERION_TEXT_LIMIT,
    MAX_CRITERIA,
    MAX_SCORE,
    MIN_SCORE,
    fixed_criteria_texts,
    persona_criteria_texts,
)
from care_sdk.profiles import ProfileField
from care_sdk.provenance import Cost, Provenance

__all__ = [
    "DIMENSIONS",
    "JUDGED_ROLES",
    "Context",
    "Cost",
    "Criterion",
    "CriterionRepair",
    "CriterionScore",
    "Dialogue",
    "Dimension",
    "Evaluation",
    "Failure",
    "FailureStage",
    "Message",
    "Messages",
    "Provenance",
    "RewardResult",
    "Role",
    "Rubric",
    "Turn",
    "as_messages",
    "dialogue_turns",
    "fixed_criteria",
    "persona_criteria",
]

Role = Literal["system", "user", "assistant"]


class Dimension(str, Enum):
    """The three empathy dimensions a rubric weighs.

    Examples:
        >>> Dimension("affective") is Dimension.AFFECTIVE
        True
    """

    COGNITIVE = "cognitive"
    """Understand and structure the user's view; clarify or reframe, not just restate."""
    AFFECTIVE = "affective"
    """Recognise and validate the user's feelings; no formulaic sympathy."""
    PROACTIVE = "proactive"
    """Build the user's agency and ability to move forward; not generic advice."""

    def __str__(self) -> str:
        return self.value


DIMENSIONS: tuple[Dimension, ...] = tuple(Dimension)
"""The dimensions in their canonical order: cognitive, affective, proactive."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Message(BaseModel):
    """One OpenAI-style chat message.

    Extra keys such as ``name`` are accepted and dropped.

    Examples:
        >>> Message(role="user", content="I failed my exam.").role
        'user'
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    role: Role
    """Who wrote the message: ``system``, ``user`` or ``assistant``."""
    content: str
    """The message text."""


Context = str | Sequence[Message | Mapping[str, Any] | str]
"""A dialogue context as a caller gives it: OpenAI chat messages, or a string taken as one user
message (a string among messages is a user message too)."""

Messages = tuple[Message, ...]
"""A context normalised once, where it enters the SDK (:func:`as_messages`); what every layer
beneath the public entry points passes on."""


def as_messages(value: Context) -> Messages:
    """A context as :data:`Messages`: the one place the SDK turns what a caller gives into messages.

    A plain string becomes a single user message; so does a string among messages (a message
    without a role is read as the user's); a mapping is validated as a :class:`Message` (extra keys
    dropped). Idempotent: :data:`Messages` come back as they are, so the public entry points
    (``AdaptiveReward.score``, ``RubricGenerator.generate_batch``, ...) call it on whatever they are
    given and code beneath them passes the result on.

    Raises:
        ValueError: a message is not a string, a :class:`Message` or a mapping with ``role``
            (``system``, ``user`` or ``assistant``) and ``content`` (pydantic's ``ValidationError``,
            which names its position and field, e.g. ``1.role``).

    Examples:
        >>> as_messages("I can't sleep.")
        (Message(role='user', content="I can't sleep."),)
        >>> as_messages([{"role": "assistant", "content": "Since when?", "name": "bot"}, "Since May."])
        (Message(role='assistant', content='Since when?'), Message(role='user', content='Since May.'))
        >>> messages = as_messages("I can't sleep.")
        >>> as_messages(messages) is messages
        True
    """
    if isinstance(value, str):
        return (Message(role="user", content=value),)
    if isinstance(value, tuple) and all(isinstance(m, Message) for m in value):
        return value
    return _MESSAGES.validate_python([Message(role="user", content=m) if isinstance(m, str) else m for m in value])


_MESSAGES: TypeAdapter[Messages] = TypeAdapter(Messages)
"""Validates a list of messages, naming the position of a bad one (``1.role``)."""

JUDGED_ROLES = ("user", "assistant")
"""The roles of the turns a reply is judged against (a system prompt, a tool's output belong to the policy)."""


def dialogue_turns(value: Context) -> Messages:
    """The turns of a context a reply is judged against, as :data:`Messages`: its user and assistant
    messages with text (a plain string, or a string among messages, is the user's). What a trainer's seam
    (verl, slime, SkyRL, ART, verifiers, NeMo-Gym) hands the reward; other roles (``system``, ``tool``,
    ``developer``) are left out before a message is validated.

    Raises:
        ValueError: a user or assistant message is not a valid :class:`Message` (see :func:`as_messages`).

    Examples:
        >>> dialogue_turns([{"role": "system", "content": "Be kind."}, {"role": "tool", "content": "{}"},
        ...                 {"role": "user", "content": "I can't sleep."}, {"role": "assistant", "content": " "}])
        (Message(role='user', content="I can't sleep."),)
        >>> dialogue_turns("Since May.")
        (Message(role='user', content='Since May.'),)
    """
    if isinstance(value, str):
        value = [value]

    def role(m: Any) -> Any:
        return "user" if isinstance(m, str) else m.get("role") if isinstance(m, Mapping) else getattr(m, "role", None)

    return tuple(m for m in as_messages([m for m in value if role(m) in JUDGED_ROLES]) if m.content.strip())


class Turn(_Frozen):
    """One assistant turn of a dialogue with the context that precedes it.

    Examples:
        >>> d = Dialogue(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
        >>> t = next(d.turns())
        >>> (t.index, t.reply)
        (1, 'hello')
    """

    index: int
    """Position of the assistant message in ``Dialogue.messages``."""
    context: Messages
    """Every message before the reply."""
    reply: str
    """The assistant reply being judged."""


class Dialogue(_Frozen):
    """A dialogue: an optional id, its messages and the user's profile, as in one line of a JSONL file.

    Examples:
        >>> d = Dialogue(id="d1", messages=[
        ...     {"role": "user", "content": "My dog died."},
        ...     {"role": "assistant", "content": "I'm so sorry. How long was he with you?"},
        ... ], profile="Lives alone; the dog was her only company.")
        >>> len(list(d.turns())), d.profile.text
        (1, 'Lives alone; the dog was her only company.')
    """

    id: str | None = None
    """The dialogue id, echoed into every output record."""
    messages: Messages = Field(min_length=1)
    """The messages in order."""
    profile: ProfileField = Field(default=None, exclude_if=lambda profile: profile is None)
    """Who the user is (see :mod:`care_sdk.profiles`): free text or ``{"text", "traits", "history"}``;
    ``None`` (and left out of the dialogue's JSON) when not given."""

    def turns(self) -> Iterator[Turn]:
        """Yield each assistant turn that has at least one message before it."""
        for i, message in enumerate(self.messages):
            if message.role == "assistant" and i > 0:
                yield Turn(index=i, context=self.messages[:i], reply=message.content)


class Criterion(_Frozen):
    """One concrete criterion of a rubric, belonging to one dimension.

    Examples:
        >>> Criterion(dimension="affective", text="Names the frustration the user describes.").dimension
        <Dimension.AFFECTIVE: 'affective'>
    """

    dimension: Dimension
    """The dimension this criterion belongs to."""
    text: str = Field(min_length=1, max_length=CRITERION_TEXT_LIMIT)
    """What a good reply does, in one sentence."""

    @field_validator("text")
    @classmethod
    def _strip(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("criterion text is empty")
        return value


class CriterionRepair(_Frozen):
    """A criterion the generator wrote that a person could not read, and what stands in its place.

    :class:`~care_sdk.RubricGenerator` checks every criterion it decodes
    (:func:`care_sdk.rubric_checks.criteria_defects`); a defective one is taken from a retry of
    the rubric when a retry writes a readable one, else replaced by the fixed criterion of its
    dimension. The rubric lists each repair in :attr:`Rubric.repairs`.

    Examples:
        >>> repair = CriterionRepair(dimension="affective", original="Shows warmth about the same same.",
        ...                          defect="repeated_word", replacement="Names the hurt.", source="retry")
        >>> repair.source, repair.defect
        ('retry', 'repeated_word')
    """

    dimension: Dimension
    """The dimension of the criterion."""
    original: str
    """The criterion as the model wrote it."""
    defect: str
    """What was wrong with it: ``unfilled_slot``, ``repeated_word``, ``garbled_slot`` or ``copy``."""
    replacement: str | None
    """The criterion in its place; ``None`` when it was dropped (its dimension had no readable one left)."""
    source: Literal["retry", "fixed", "dropped"]
    """Where the replacement came from: a retry of the rubric, the fixed criteria, or nowhere."""


class Rubric(_Frozen):
    """A turn-level rubric: a weight per dimension and criteria for each dimension.

    Weights must be non-negative, finite and not all zero; they are normalised to sum to 1.
    Every dimension needs a weight and at least one criterion.

    Examples:
        >>> r = Rubric(
        ...     weights={"cognitive": 2, "affective": 1, "proactive": 1},
        ...     criteria=[
        ...         {"dimension": "cognitive", "text": "Reflects the core problem back."},
        ...         {"dimension": "affective", "text": "Validates the fear."},
        ...         {"dimension": "proactive", "text": "Offers one small next step."},
        ...     ],
        ... )
        >>> r.weights[Dimension.COGNITIVE]
        0.5
    """

    weights: dict[Dimension, float]
    """Normalised weight of each dimension (sums to 1)."""
    criteria: tuple[Criterion, ...] = Field(min_length=len(DIMENSIONS), max_length=MAX_CRITERIA)
    """The criteria, grouped by dimension in canonical order."""
    repairs: tuple[CriterionRepair, ...] = Field(default=(), exclude_if=lambda repairs: not repairs)
    """The criteria the generator replaced because a person could not read them (empty for most
    rubrics, and then left out of the rubric's JSON)."""

    @field_validator("weights")
    @classmethod
    def _normalise(cls, weights: dict[Dimension, float]) -> dict[Dimension, float]:
        missing = [d.value for d in DIMENSIONS if d not in weights]
        if missing:
            raise ValueError(f"missing weight for {', '.join(missing)}")
        for dim, w in weights.items():
            if not math.isfinite(w) or w < 0:
                raise ValueError(f"weight of {dim.value} must be a finite number >= 0, got {w}")
        total = sum(weights.values())
        if total <= 0:
            raise ValueError("all weights are zero")
        if abs(total - 1.0) > 1e-9:
            return {d: weights[d] / total for d in DIMENSIONS}
        return {d: weights[d] for d in DIMENSIONS}

    @field_validator("criteria")
    @classmethod
    def _order(cls, criteria: tuple[Criterion, ...]) -> tuple[Criterion, ...]:
        missing = [d.value for d in DIMENSIONS if not any(c.dimension is d for c in criteria)]
        if missing:
            raise ValueError(f"no criterion for {', '.join(missing)}")
        return tuple(c for d in DIMENSIONS for c in criteria if c.dimension is d)

    def criteria_for(self, dimension: Dimension | str) -> list[Criterion]:
        """Return the criteria of one dimension.

        Examples:
            >>> Rubric.uniform_fixed().criteria_for("proactive")[0].dimension.value
            'proactive'
        """
        dim = Dimension(dimension)
        return [c for c in self.criteria if c.dimension is dim]

    @property
    def content_hash(self) -> str:
        """The first 16 hex digits of the SHA-256 of the rubric's weights and criteria as JSON: equal
        for equal rubrics, in any process (what :attr:`Provenance.rubric_hash` records).

        Examples:
            >>> Rubric.uniform_fixed().content_hash == Rubric.uniform_fixed().content_hash
            True
            >>> len(Rubric.uniform_fixed().content_hash)
            16
        """
        return hashlib.sha256(self.model_dump_json(exclude={"repairs"}).encode()).hexdigest()[:16]

    @property
    def top_dimension(self) -> Dimension:
        """The dimension with the largest weight (the first in canonical order on ties).

        Examples:
            >>> Rubric.uniform_fixed().top_dimension
            <Dimension.COGNITIVE: 'cognitive'>
        """
        return max(DIMENSIONS, key=lambda d: self.weights[d])

    def with_weights(self, weights: Mapping[Dimension, float] | Mapping[str, float]) -> Rubric:
        """Return a copy with other weights (normalised), keeping the criteria and their repairs.

        Examples:
            >>> rubric = Rubric.uniform_fixed().with_weights({"cognitive": 1, "affective": 0, "proactive": 0})
            >>> rubric.weights[Dimension.AFFECTIVE]
            0.0
        """
        return Rubric(
            weights={Dimension(k): v for k, v in weights.items()}, criteria=self.criteria, repairs=self.repairs
        )

    @classmethod
    def uniform_fixed(cls) -> Rubric:
        """The fixed six-criterion rubric with uniform weights (the paper's fixed-rubric ablation).

        Examples:
            >>> len(Rubric.uniform_fixed().criteria)
            6
        """
        return cls(weights={d: 1.0 for d in DIMENSIONS}, criteria=fixed_criteria())


@cache
def fixed_criteria() -> tuple[Criterion, ...]:
    """The fixed six-criterion set (two per dimension) used by the fixed-criteria ablations.

    Examples:
        >>> [c.dimension.value for c in fixed_criteria()][:2]
        ['cognitive', 'cognitive']
    """
    texts = fixed_criteria_texts()
    return tuple(Criterion(dimension=d, text=t) for d in DIMENSIONS for t in texts[d.value])


@cache
def persona_criteria() -> tuple[Criterion, ...]:
    """The persona-consistency criteria, one per dimension: does the reply fit who the user is?

    :class:`~care_sdk.RubricGenerator` adds them to the rubric of a context that comes with a
    profile when built with ``persona_criteria=True`` (off by default).

    Examples:
        >>> [c.dimension.value for c in persona_criteria()]
        ['cognitive', 'affective', 'proactive']
    """
    texts = persona_criteria_texts()
    return tuple(Criterion(dimension=d, text=t) for d in DIMENSIONS for t in texts[d.value])


class CriterionScore(_Frozen):
    """The evaluator's score of one criterion, from 1 (not met) to 5 (fully met).

    ``distribution`` holds the probability of each score 1-5 when the backend returned
    logprobs; ``score`` is then the expected score.

    Examples:
        >>> CriterionScore(dimension="affective", criterion="Validates the fear.", score=4).normalised
        0.75
    """

    dimension: Dimension
    """The criterion's dimension."""
    criterion: str
    """The criterion text."""
    score: float = Field(ge=MIN_SCORE, le=MAX_SCORE)
    """The score, 1-5 (fractional when expected over logprobs)."""
    distribution: tuple[float, ...] | None = None
    """Probabilities of the scores 1..5, when known."""

    @property
    def normalised(self) -> float:
        """The score mapped to [0, 1]: ``(score - 1) / 4``."""
        return (self.score - MIN_SCORE) / (MAX_SCORE - MIN_SCORE)


class Evaluation(_Frozen):
    """The evaluator's scores of one reply against every criterion of a rubric.

    Examples:
        >>> e = Evaluation(scores=[
        ...     {"dimension": "cognitive", "criterion": "a", "score": 5},
        ...     {"dimension": "affective", "criterion": "b", "score": 1},
        ...     {"dimension": "proactive", "criterion": "c", "score": 3},
        ... ])
        >>> e.dimension_scores()[Dimension.PROACTIVE]
        0.5
    """

    scores: tuple[CriterionScore, ...] = Field(min_length=1)
    """One score per rubric criterion, in the rubric's order."""

    def dimension_scores(self) -> dict[Dimension, float]:
        """Mean normalised score of each dimension present, in [0, 1]."""
        result: dict[Dimension, float] = {}
        for dim in DIMENSIONS:
            values = [s.normalised for s in self.scores if s.dimension is dim]
            if values:
                result[dim] = sum(values) / len(values)
        return result


FailureStage = Literal["input", "rubric", "evaluation", "context_fit"]
"""Where a reward failed: reading the input, generating the rubric, evaluating the reply, or
reading its fit to the context (see :mod:`care_sdk.addons`)."""


class Failure(_Frozen):
    """Why a reward could not be computed, in fields a program can branch on.

    Examples:
        >>> from care_sdk.errors import BackendError
        >>> Failure.of(BackendError("busy", retryable=True, status_code=503), stage="evaluation")
        Failure(kind='BackendError', stage='evaluation', retryable=True)
    """

    kind: str
    """The error's class name, e.g. ``OutputError`` (a reply that never validated) or ``BackendError``."""
    stage: FailureStage
    """Where it failed."""
    retryable: bool = False
    """Whether trying the same call again may succeed (a transient backend error)."""

    @classmethod
    def of(cls, error: BaseException, stage: FailureStage) -> Failure:
        """The failure an exception describes; ``retryable`` comes from the exception when it has one."""
        return cls(kind=type(error).__name__, stage=stage, retryable=bool(getattr(error, "retryable", False)))


class RewardResult(_Frozen):
    """One reward with everything that explains it.

    ``reward`` is ``None`` exactly when ``error`` says why no reward could be computed.

    Examples:
        >>> rubric = Rubric.uniform_fixed()
        >>> evaluation = Evaluation(scores=[
        ...     CriterionScore(dimension=c.dimension, criterion=c.text, score=5) for c in rubric.criteria
        ... ])
        >>> RewardResult.from_parts(rubric, evaluation).reward
        1.0
    """

    reward: float | None
    """r = sum_d w_d * mean_c (s_c - 1) / 4, in [0, 1]; ``None`` on failure."""
    rubric: Rubric | None = None
    """The rubric the reply was judged against."""
    evaluation: Evaluation | None = None
    """Per-criterion scores."""
    dimension_scores: dict[Dimension, float] | None = None
    """Mean normalised score per dimension, before weighting."""
    error: str | None = None
    """Why no reward was computed, when ``reward`` is ``None``."""
    failure: Failure | None = None
    """The same as ``error`` in fields (kind, stage, retryable), when the SDK knows them."""
    flags: tuple[str, ...] = ()
    """What the deterministic guards found in the reply (see :mod:`care_sdk.guards`), e.g. ``forged_turn``."""
    raw_reward: float | None = None
    """The evaluator's reward before a guard lowered it (set only when one did)."""
    note: str | None = None
    """What a guard did to the reward, in words (e.g. an empty reply scored 0 without a model call)."""
    context_fit: float | None = None
    """How likely the reply was written for its context, in (0, 1), when the reward reads it
    (see :mod:`care_sdk.addons`); the reward is then what the context fit pays for it (the bundled one:
    ``fit * (floor + (1 - floor) * rubric_reward)``)."""
    parts: tuple[str, ...] = ()
    """What produced the reward: the variant (``care``, ``uniform_weights``, ...), then any opt-in
    add-on outside the method (``weights_head``, ``expected_weights``, ``context_fit``), e.g.
    ``("care",)`` for the method's reward."""
    provenance: Provenance | None = None
    """What produced the reward (the rubric's content hash and source, the generator's and the
    evaluator's identity and prompt version) and what it cost (calls, tokens, seconds); see
    :mod:`care_sdk.provenance`. Set on every result :class:`~care_sdk.AdaptiveReward` returns;
    ``None`` in records written before it was recorded."""

    @property
    def rubric_reward(self) -> float | None:
        """The rubric's own reward, ``sum_d w_d * dimension_scores[d]``, before context fit and
        guards (``None`` without a rubric and its scores).

        Examples:
            >>> from care_sdk.types import fixed_criteria
            >>> rubric = Rubric(weights={"cognitive": 1, "affective": 1, "proactive": 2}, criteria=fixed_criteria())
            >>> result = RewardResult(reward=0.2, rubric=rubric,
            ...     dimension_scores={"cognitive": 1.0, "affective": 0.5, "proactive": 0.0})
            >>> result.rubric_reward
            0.375
        """
        if self.rubric is None or self.dimension_scores is None:
            return None
        return self._formula(self.rubric, self.dimension_scores)

    @staticmethod
    def _formula(rubric: Rubric, per_dim: Mapping[Dimension, float]) -> float:
        """The reward formula: the rubric's weights over the per-dimension scores, kept in [0, 1]."""
        return min(1.0, max(0.0, sum(rubric.weights[d] * per_dim[d] for d in DIMENSIONS)))

    @model_validator(mode="after")
    def _consistent(self) -> RewardResult:
        if (self.reward is None) == (self.error is None):
            raise ValueError("exactly one of reward and error must be set")
        if self.failure is not None and self.error is None:
            raise ValueError("failure is set without an error")
        return self

    @classmethod
    def from_parts(cls, rubric: Rubric, evaluation: Evaluation) -> RewardResult:
        """Apply the reward formula to a rubric and an evaluation of it.

        Raises:
            ValueError: the evaluation does not score every dimension of the rubric.
        """
        per_dim = evaluation.dimension_scores()
        missing = [d.value for d in DIMENSIONS if d not in per_dim]
        if missing:
            raise ValueError(f"evaluation has no score for {', '.join(missing)}")
        return cls(reward=cls._formula(rubric, per_dim), rubric=rubric, evaluation=evaluation, dimension_scores=per_dim)

    @classmethod
    def failed(
        cls, error: str | BaseException, rubric: Rubric | None = None, *, stage: FailureStage | None = None
    ) -> RewardResult:
        """A result that carries an error instead of a reward.

        With an exception and a ``stage``, ``failure`` describes it and ``error`` reads
        ``"rubric generation failed: ..."`` or ``"evaluation failed: ..."``.

        Examples:
            >>> RewardResult.failed("evaluator reply did not parse").reward is None
            True
            >>> from care_sdk.errors import OutputError
            >>> result = RewardResult.failed(OutputError("scores.c1: missing"), stage="evaluation")
            >>> result.error, result.failure.kind
            ('evaluation failed: scores.c1: missing (after 1 attempt)', 'OutputError')
        """
        if isinstance(error, str):
            return cls(reward=None, rubric=rubric, error=error)
        if stage is None:
            return cls(reward=None, rubric=rubric, error=f"{type(error).__name__}: {error}")
        prefix = {
            "input": "invalid input",
            "rubric": "rubric generation failed",
            "evaluation": "evaluation failed",
            "context_fit": "context fit failed",
        }
        return cls(reward=None, rubric=rubric, error=f"{prefix[stage]}: {error}", failure=Failure.of(error, stage))
