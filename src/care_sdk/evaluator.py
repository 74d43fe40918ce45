"""RubricEvaluator: scores a candidate reply against every criterion of a rubric in one call."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from care_sdk._core import SCORES
from care_sdk.backends import Backend, GenerationRequest, TrainedAdapter, resolve_backend
from care_sdk.backends.base import EVALUATION, Completion, ForcedReplies, ForcedReply, ForcedRequest
from care_sdk.errors import CareError, ConfigError
from care_sdk.plans import Plan, adrive, drive, fewer_messages, parse_plan, unwrap
from care_sdk.profiles import ProfileLike, ProfileReader, UserProfile, as_profile, as_profiles
from care_sdk.prompts import (
    EVALUATOR_PROMPT_VERSION,
    EVALUATOR_PROMPT_VERSIONS,
    evaluation_schema,
    evaluator_messages,
    parse_evaluation,
    shown_messages,
)
from care_sdk.provenance import active_ledger
from care_sdk.types import Context, CriterionScore, Evaluation, Messages, Rubric, as_messages

__all__ = ["EVALUATOR_MODES", "RubricEvaluator", "expected_scores", "forced_evaluation"]

EvalItem = tuple[Context, Rubric, str]
"""One evaluation: the context, the rubric, the candidate reply."""
_Item = tuple[Messages, Rubric, str]
"""An :data:`EvalItem` whose context is normalised (what the layers beneath the public methods take)."""

TOP_LOGPROBS = 5
EVALUATOR_MODES = ("auto", "forced", "decoded")
"""How an evaluator gets its scores: ``forced`` builds the reply itself and reads each score from
the model's distribution over ``1``-``5`` at its position (backends that implement
:class:`~care_sdk.backends.base.ForcedReplies`); ``decoded`` decodes the whole reply
under the JSON schema; ``auto`` is ``forced`` where the backend supports it, else ``decoded``."""


class RubricEvaluator(ProfileReader):
    """Scores a reply from 1 to 5 on every criterion of a rubric, all criteria in one call.

    Args:
        backend: a spec string, a :class:`~care_sdk.backends.Backend`, or a model object.
        temperature: sampling temperature (0 is greedy).
        seed: sampling seed, for backends that support one.
        max_tokens: upper bound on the evaluation reply length.
        max_attempts: replies tried per item before giving up with :class:`OutputError`.
        use_logprobs: where the backend returns logprobs, score each criterion by the
            probability-weighted mean over the score tokens 1-5 instead of the sampled token,
            which gives continuous rewards. ``None`` (the default): on when the backend's adapter
            was trained to be read that way (:attr:`~care_sdk.backends.lora.AdapterInfo.expected_scores`,
            the bundled evaluator's), off otherwise.
        prompt_version: the evaluator prompt (``"v2"``, the default, fences the dialogue and the reply
            as quoted data; ``"v1"`` pastes the reply in as plain text).
        max_context_messages: show the model only the last this many context messages (``None``:
            all; with a bundled or exported adapter, the cut it was trained with). A prompt that
            does not fit the model's context window (:class:`~care_sdk.errors.ContextOverflowError`)
            is sent again with fewer messages, the oldest dropped first, down to the last one.
        mode: one of :data:`EVALUATOR_MODES`. ``"forced"`` (what ``"auto"`` picks on llama.cpp and
            transformers) scores only the free positions of the reply: the prompt and the fixed
            JSON are prefilled, each score is the most likely of ``1``-``5`` at its position (its
            expectation with ``use_logprobs``, which then needs no logits for every position),
            several times faster than decoding. ``"decoded"`` decodes the reply under the schema.

    A reply may be judged for the user a profile describes (``profile=``; ``profiles=`` in batch
    calls, one per item): the prompt is then the profile version
    (:data:`~care_sdk.prompts.PROFILE_PROMPT_VERSION`), which quotes the profile as fenced data before
    the dialogue, whatever ``prompt_version`` says. A backend that carries a trained adapter (the
    bundled ``default`` evaluator) drops the profile (:attr:`reads_profiles` is ``False``): it was
    trained on the prompt without one. The first dropped profile is logged as a warning.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json
        >>> evaluator = RubricEvaluator(ScriptedBackend([evaluation_json([5, 5, 3, 3, 1, 1])]))
        >>> ev = evaluator.evaluate("I lost my job.", Rubric.uniform_fixed(), "That must be a shock.")
        >>> [s.score for s in ev.scores]
        [5.0, 5.0, 3.0, 3.0, 1.0, 1.0]
        >>> evaluator.forced  # a scripted backend decodes; llama.cpp and transformers score in place
        False
        >>> RubricEvaluator("default", mode="forced").forced  # doctest: +SKIP
        True
        >>> request = evaluator.request("I lost my job.", Rubric.uniform_fixed(), "Oh no.", profile="A single father.")
        >>> "A single father." in request.messages[1].content
        True
    """

    def __init__(
        self,
        backend: str | Backend | Any = "default",
        *,
        temperature: float = 0.0,
        seed: int | None = 0,
        max_tokens: int = 160,
        max_attempts: int = 3,
        use_logprobs: bool | None = None,
        prompt_version: str = EVALUATOR_PROMPT_VERSION,
        max_context_messages: int | None = None,
        mode: str = "auto",
    ) -> None:
        if mode not in EVALUATOR_MODES:
            raise ConfigError(f"mode must be one of {EVALUATOR_MODES}, got {mode!r}")
        if max_attempts < 1:
            raise ConfigError("max_attempts must be at least 1")
        if prompt_version not in EVALUATOR_PROMPT_VERSIONS:
            raise ConfigError(f"prompt_version must be one of {EVALUATOR_PROMPT_VERSIONS}, got {prompt_version!r}")
        self.prompt_version = prompt_version
        self.backend = resolve_backend(backend, role="evaluator")
        adapter = self.backend.adapter if isinstance(self.backend, TrainedAdapter) else None
        if adapter is not None:  # e.g. a backend built with the generator's adapter
            adapter.require(role="evaluator", prompt_version=prompt_version)
            if max_context_messages is None:
                max_context_messages = adapter.max_context_messages
        if max_context_messages is not None and max_context_messages < 1:
            raise ConfigError("max_context_messages must be at least 1")
        self.max_context_messages = max_context_messages
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.max_attempts = max_attempts
        self.use_logprobs = use_logprobs if use_logprobs is not None else bool(adapter and adapter.expected_scores)
        supported = isinstance(self.backend, ForcedReplies)
        if mode == "forced" and not supported:
            raise ConfigError(f"mode='forced' needs a backend that builds forced replies; {self.backend!r} does not")
        self.mode = mode
        self.forced = supported and mode != "decoded"
        """Whether scores are read at their positions (``True``) or decoded (``False``)."""
        self.reads_profiles = adapter is None

    @property
    def identity(self) -> str:
        """Backend identity, sampling settings and prompt version: everything that shapes a score.

        Examples:
            >>> from care_sdk.testing import ScriptedBackend
            >>> RubricEvaluator(ScriptedBackend([])).identity
            'scripted:scripted|t=0.0|seed=0|max_tokens=160|logprobs=False|prompt=v2'
        """
        return (
            f"{self.backend.identity}|t={self.temperature}|seed={self.seed}|max_tokens={self.max_tokens}"
            f"|logprobs={self.use_logprobs}|prompt={self.prompt_version}"
        )

    def request(
        self, context: Context, rubric: Rubric, reply: str, profile: ProfileLike = None
    ) -> GenerationRequest | ForcedRequest:
        """The backend request that scores ``reply`` (useful to inspect the exact prompt): a
        :class:`~care_sdk.backends.base.ForcedRequest` when :attr:`forced`."""
        read = self.read_profile(as_profile(profile))
        return self._request(as_messages(context), rubric, reply, self.max_context_messages, read)

    def _request(
        self, context: Messages, rubric: Rubric, reply: str, keep: int | None, profile: UserProfile | None = None
    ) -> GenerationRequest | ForcedRequest:
        messages = tuple(
            evaluator_messages(context, rubric, reply, self.prompt_version, max_context_messages=keep, profile=profile)
        )
        if self.forced:
            return ForcedRequest(
                messages=messages,
                reply=forced_evaluation(len(rubric.criteria)),
                temperature=self.temperature,
                seed=self.seed,
                purpose=EVALUATION,
            )
        return GenerationRequest(
            messages=messages,
            json_schema=evaluation_schema(len(rubric.criteria)),
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=self.seed,
            top_logprobs=TOP_LOGPROBS if self.use_logprobs else None,
            purpose=EVALUATION,
        )

    def _plan(self, items: Sequence[_Item], profiles: Sequence[UserProfile | None]) -> Plan[Evaluation]:
        """The evaluations of normalised items, as a plan; inside a reward (a
        :class:`~care_sdk.provenance.Ledger` open), it counts what each item cost into the ledger."""
        ledger = active_ledger()
        tallies = ledger.open_evaluations(len(items)) if ledger is not None else None
        read = [self.read_profile(p) for p in profiles]
        rubrics = [rubric for _, rubric, _ in items]

        def parse(i: int, completion: Completion) -> Evaluation:
            evaluation = parse_evaluation(completion.text, rubrics[i])
            if self.use_logprobs and completion.logprobs:
                evaluation = expected_scores(evaluation, completion)
            return evaluation

        shorter = fewer_messages(  # a context that does not fit the window: its oldest messages dropped
            lambda i: shown_messages(items[i][0], self.max_context_messages),
            lambda i, keep: self._request(*items[i], keep, read[i]),
        )
        requests = [
            self._request(c, r, reply, self.max_context_messages, p)
            for (c, r, reply), p in zip(items, read, strict=True)
        ]
        return (
            yield from parse_plan(
                requests, parse, what="evaluation", max_attempts=self.max_attempts, shorter=shorter, tallies=tallies
            )
        )

    def evaluate(self, context: Context, rubric: Rubric, reply: str, profile: ProfileLike = None) -> Evaluation:
        """Score ``reply`` (the answer to ``context``, said to the user ``profile`` describes) on every
        criterion of ``rubric``.

        Raises:
            InputError: ``profile`` is not a profile (see :func:`~care_sdk.profiles.as_profile`).
            OutputError: no reply parsed as a valid evaluation within ``max_attempts``.
            BackendError: the backend failed.
        """
        return unwrap(self.evaluate_batch([(context, rubric, reply)], [profile])[0])

    def evaluate_batch(
        self, items: Sequence[EvalItem], profiles: Sequence[ProfileLike] | None = None
    ) -> list[Evaluation | CareError]:
        """Score many ``(context, rubric, reply)`` items; a failed item is its :class:`CareError`.

        ``profiles``, when given, holds one user profile (or ``None``) per item. Each context is
        normalised here (:func:`~care_sdk.types.as_messages`; :data:`~care_sdk.types.Messages` pass
        as they are).

        Raises:
            InputError: ``profiles`` has another length than ``items``, or an entry is not a profile.
        """
        return drive(self._plan(_normalised(items), as_profiles(profiles, len(items))), self.backend)

    async def aevaluate(self, context: Context, rubric: Rubric, reply: str, profile: ProfileLike = None) -> Evaluation:
        """Async form of :meth:`evaluate`."""
        return unwrap((await self.aevaluate_batch([(context, rubric, reply)], [profile]))[0])

    async def aevaluate_batch(
        self, items: Sequence[EvalItem], profiles: Sequence[ProfileLike] | None = None
    ) -> list[Evaluation | CareError]:
        """Async form of :meth:`evaluate_batch`."""
        return await adrive(self._plan(_normalised(items), as_profiles(profiles, len(items))), self.backend)

    def __repr__(self) -> str:
        options = f"use_logprobs={self.use_logprobs}, prompt_version={self.prompt_version!r}, mode={self.mode!r}"
        if self.max_context_messages is not None:
            options += f", max_context_messages={self.max_context_messages}"
        return f"RubricEvaluator({self.backend!r}, {options})"


def _normalised(items: Sequence[EvalItem]) -> list[_Item]:
    """Each item with its context as messages (:func:`~care_sdk.types.as_messages`; messages pass as they are)."""
    return [(as_messages(c), rubric, reply) for c, rubric, reply in items]


def forced_evaluation(n_criteria: int) -> ForcedReply:
    """The evaluator reply for ``n_criteria`` criteria as a template whose only free positions are the scores.

    The fixed text is the reply :func:`evaluation_schema` asks for, laid out as ``json.dumps``
    writes it; a backend that builds forced replies fills each slot with one of ``"1"``-``"5"``.

    Examples:
        >>> forced = forced_evaluation(2)
        >>> forced.text(["4", "3"]), forced.choices
        ('{"scores": {"c1": 4, "c2": 3}}', ('1', '2', '3', '4', '5'))
    """
    if n_criteria < 1:
        raise ValueError("n_criteria must be at least 1")
    keys = [f'"c{i + 1}": ' for i in range(n_criteria)]
    segments = ['{"scores": {' + keys[0], *(", " + key for key in keys[1:]), "}}"]
    return ForcedReply(segments=tuple(segments), choices=tuple(str(s) for s in SCORES))


_SCORE_RE = re.compile(r'"c(\d+)"\s*:\s*([1-5])')


def expected_scores(evaluation: Evaluation, completion: Completion) -> Evaluation:
    """Replace each sampled score by its expectation under the score tokens' probabilities.

    For criterion ``cN`` the token that wrote its digit is located in the completion's logprobs;
    the probabilities of the alternatives ``1``-``5`` at that position are renormalised and the
    score becomes ``sum(p_s * s)``. A criterion whose token cannot be located keeps its sampled
    score (and no distribution).

    Examples:
        >>> from care_sdk.testing import score_logprobs
        >>> from care_sdk.backends.base import TokenLogprob
        >>> text = '{"scores": {"c1": 4}}'
        >>> tokens = (TokenLogprob(token='{"scores": {"c1": ', logprob=0.0), score_logprobs({4: 0.5, 5: 0.5}),
        ...           TokenLogprob(token="}}", logprob=0.0))
        >>> ev = Evaluation(scores=[CriterionScore(dimension="cognitive", criterion="x", score=4)])
        >>> expected_scores(ev, Completion(text=text, logprobs=tokens)).scores[0].score
        4.5
    """
    assert completion.logprobs is not None
    starts = []
    offset = 0
    for token in completion.logprobs:
        starts.append(offset)
        offset += len(token.token)
    if offset != len(completion.text):
        return evaluation  # tokens do not spell the text: cannot align safely
    new_scores = list(evaluation.scores)
    for match in _SCORE_RE.finditer(completion.text):
        index = int(match.group(1)) - 1
        if not 0 <= index < len(new_scores):
            continue
        pos = match.start(2)
        token_index = max(i for i, start in enumerate(starts) if start <= pos)
        token = completion.logprobs[token_index]
        if token.token.strip() != match.group(2):
            continue  # the digit shares a token with other text: keep the sampled score
        probs = {int(t.strip()): math.exp(lp) for t, lp in token.top if t.strip() in {str(s) for s in SCORES}}
        total = sum(probs.values())
        if total <= 0:
            continue
        distribution = tuple(probs.get(s, 0.0) / total for s in SCORES)
        expected = sum(p * s for p, s in zip(distribution, SCORES, strict=True))
        old = new_scores[index]
        new_scores[index] = CriterionScore(
            dimension=old.dimension, criterion=old.criterion, score=expected, distribution=distribution
        )
    return Evaluation(scores=tuple(new_scores))
