"""Provenance and cost of a reward: what produced it, and what producing it cost.

Every :class:`~care_sdk.RewardResult` that :class:`~care_sdk.AdaptiveReward` returns carries a
:class:`Provenance`: the content hash of the rubric the reply was judged against, where that rubric
came from (``generated``, ``cached`` or ``fixed``), the generator's and the evaluator's identity and
prompt version, and the :class:`Cost` of the rubric and of the evaluation.

How cost is counted when rewards are batched:

- ``calls``: requests sent to a backend, every attempt counted (a reply that did not parse and was
  asked again is two calls; a rubric whose criteria were asked again counts those requests too; a
  weight reader's read counts one per rubric). A transport's own retries of one request (an HTTP
  429 or 503 answered again by the retry layer) count once.
- ``prompt_tokens`` and ``completion_tokens``: the sums the backend reported for those requests
  (OpenAI-compatible servers' ``usage``, llama.cpp's and vLLM's token counts, the tokenizer's
  lengths under transformers); ``None`` when the backend reported none.
- ``seconds``: the wall time of the backend batches the requests went out in, each batch's time
  split evenly among its requests.
- ``rubric_cost`` is what writing the rubric cost, whole; the replies of one batch that share the
  rubric (same context) share that cost: ``rubric_shared_by`` says how many. A rubric read from the
  cache or a fixed rubric costs nothing.
- ``evaluation_cost`` is the reply's own evaluation.
- :attr:`Provenance.cost` is the reply's share: ``rubric_cost / rubric_shared_by +
  evaluation_cost`` (plus ``context_fit_seconds``), so the costs of a batch's results add up to
  what the batch cost.

Examples:
    >>> whole = Cost(calls=1, prompt_tokens=400, completion_tokens=120, seconds=2.0)
    >>> p = Provenance(rubric_hash="0f3a9c1b2d4e5f60", rubric_source="generated", rubric_shared_by=4,
    ...                generator="scripted:g", generator_prompt="v2", evaluator="scripted:e", evaluator_prompt="v2",
    ...                rubric_cost=whole, evaluation_cost=Cost(calls=1, prompt_tokens=500, seconds=0.5))
    >>> p.cost.calls, p.cost.prompt_tokens, p.cost.seconds
    (1.25, 600.0, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from care_sdk.errors import CareError
    from care_sdk.evaluator import RubricEvaluator
    from care_sdk.generator import RubricGenerator
    from care_sdk.profiles import UserProfile
    from care_sdk.types import RewardResult, Rubric

__all__ = [
    "COST_FIELDS",
    "Cost",
    "Provenance",
    "RubricSource",
    "cost_metrics",
    "mean_cost",
    "producers",
    "record_provenance",
    "traced",
]

RubricSource = Literal["generated", "cached", "fixed"]
"""Where the rubric of a reward came from: written by the generator in this call, read from the
generator's cache, or the reward's fixed rubric."""


def _plus(a: float | None, b: float | None) -> float | None:
    return b if a is None else (a if b is None else a + b)


class Cost(BaseModel):
    """Backend calls, tokens and seconds spent on one part of a reward (see :mod:`care_sdk.provenance`).

    Examples:
        >>> (Cost(calls=1, prompt_tokens=10) + Cost(calls=2, seconds=0.5)).calls
        3.0
        >>> Cost(calls=1, prompt_tokens=10, seconds=1.0).shared(4).prompt_tokens
        2.5
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    calls: float = Field(0.0, ge=0)
    """Requests sent to a backend, every attempt counted (a share when several rewards share them)."""
    prompt_tokens: float | None = Field(None, ge=0)
    """Prompt tokens the backend reported for them; ``None`` when it reported none."""
    completion_tokens: float | None = Field(None, ge=0)
    """Completion tokens the backend reported for them; ``None`` when it reported none."""
    seconds: float = Field(0.0, ge=0)
    """Wall time of the backend batches they went out in, each batch's time split evenly among its requests."""

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            calls=self.calls + other.calls,
            prompt_tokens=_plus(self.prompt_tokens, other.prompt_tokens),
            completion_tokens=_plus(self.completion_tokens, other.completion_tokens),
            seconds=self.seconds + other.seconds,
        )

    def shared(self, n: int) -> Cost:
        """This cost split evenly among ``n`` sharers (one sharer's part)."""
        if n <= 1:
            return self
        return Cost(
            calls=self.calls / n,
            prompt_tokens=None if self.prompt_tokens is None else self.prompt_tokens / n,
            completion_tokens=None if self.completion_tokens is None else self.completion_tokens / n,
            seconds=self.seconds / n,
        )


class Provenance(BaseModel):
    """What produced one reward and what it cost (see :mod:`care_sdk.provenance` for the counting).

    Examples:
        >>> p = Provenance(rubric_hash="0f3a9c1b2d4e5f60", rubric_source="cached", evaluator="scripted:e",
        ...                evaluator_prompt="v2", evaluation_cost=Cost(calls=1, seconds=0.2))
        >>> p.cost.calls, p.rubric_cost.calls
        (1.0, 0.0)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rubric_hash: str | None = None
    """The judged rubric's :attr:`~care_sdk.Rubric.content_hash`; ``None`` when there was none (its
    generation failed, or a guard settled the reply without a model call)."""
    rubric_source: RubricSource | None = None
    """``generated``, ``cached`` or ``fixed`` (see :data:`RubricSource`); ``None`` when no rubric was
    asked for (a guard settled the reply)."""
    rubric_shared_by: int = Field(1, ge=1)
    """How many replies of the batch shared the rubric's generation (and its cost)."""
    generator: str | None = None
    """The generator's identity (backend, prompt version, sampling settings); ``None`` with a fixed rubric."""
    generator_prompt: str | None = None
    """The generator prompt's version; ``None`` with a fixed rubric."""
    evaluator: str
    """The evaluator's identity (backend, sampling settings, prompt version)."""
    evaluator_prompt: str
    """The evaluator prompt's version."""
    rubric_cost: Cost = Cost()
    """What writing the rubric cost, whole (nothing when it was cached or fixed)."""
    evaluation_cost: Cost = Cost()
    """What evaluating this reply cost."""
    context_fit_seconds: float | None = Field(None, ge=0)
    """This reply's share of the context-fit add-on's time, when the reward reads it (its reads are
    timed, not counted as calls)."""

    @property
    def cost(self) -> Cost:
        """This reward's share: ``rubric_cost / rubric_shared_by + evaluation_cost`` (plus the
        context fit's seconds). Summed over a batch's results, it is what the batch cost."""
        total = self.rubric_cost.shared(self.rubric_shared_by) + self.evaluation_cost
        if self.context_fit_seconds:
            total = total + Cost(seconds=self.context_fit_seconds)
        return total


def record_provenance(record: Mapping[str, object]) -> Provenance | None:
    """The provenance of a scored record (a ``care score`` output line); ``None`` for a record written
    before records carried one, or one whose provenance does not read.

    Examples:
        >>> record_provenance({"id": "a", "turn": 1, "reward": 0.5}) is None
        True
        >>> record_provenance({"provenance": {"evaluator": "e", "evaluator_prompt": "v2"}}).evaluator
        'e'
    """
    made = record.get("provenance")
    if not isinstance(made, Mapping):
        return None
    try:
        return Provenance.model_validate(made)
    except ValueError:
        return None


def mean_cost(results: Sequence[RewardResult]) -> Cost | None:
    """The mean of :attr:`Provenance.cost` over the results that have a provenance (``None`` when
    none has one); times their number, what they cost together.

    Examples:
        >>> from care_sdk.types import RewardResult
        >>> made = Provenance(evaluator="e", evaluator_prompt="v2", evaluation_cost=Cost(calls=2, seconds=1.0))
        >>> mean_cost([RewardResult(reward=0.5, provenance=made), RewardResult(reward=0.0)]).calls
        2.0
    """
    summed, n = _summed_cost(results)
    return summed.shared(n) if n else None


def _summed_cost(results: Sequence[RewardResult]) -> tuple[Cost, int]:
    """What the results that have a provenance cost together, and how many they are."""
    costs = [r.provenance.cost for r in results if r.provenance is not None]
    return sum(costs, Cost()), len(costs)


COST_FIELDS = ("calls", "seconds", "prompt_tokens", "completion_tokens")
"""The fields of :class:`Cost`, in the order :func:`cost_metrics` writes them."""


def cost_metrics(results: Sequence[RewardResult], prefix: str, *, total: bool = False) -> dict[str, float]:
    """What ``results`` cost as metrics ``<prefix><field>`` for every field of :data:`COST_FIELDS`: their
    mean (:func:`mean_cost`), or with ``total`` their sum (an episode's cost over its turns); NaN where
    no result has a provenance, and for tokens the backend did not report (so every sample has the same keys).

    Examples:
        >>> from care_sdk.types import RewardResult
        >>> made = Provenance(evaluator="e", evaluator_prompt="v2", evaluation_cost=Cost(calls=2, seconds=1.0))
        >>> cost_metrics([RewardResult(reward=0.5, provenance=made)] * 2, "cost/", total=True)
        {'cost/calls': 4.0, 'cost/seconds': 2.0, 'cost/prompt_tokens': nan, 'cost/completion_tokens': nan}
        >>> cost_metrics([RewardResult(reward=0.0)], "care_cost_")["care_cost_calls"]
        nan
    """
    summed, n = _summed_cost(results)
    cost = None if not n else summed if total else summed.shared(n)
    values = {name: getattr(cost, name, None) for name in COST_FIELDS}
    return {f"{prefix}{name}": math.nan if v is None else float(v) for name, v in values.items()}


@dataclass
class Tally:
    """The running cost of one item of a plan (an internal accumulator: :func:`care_sdk.plans.parse_plan`
    adds every request sent for the item and its share of the batch's time).

    Examples:
        >>> tally = Tally()
        >>> tally.add({"prompt_tokens": 12, "completion_tokens": 3}, 0.5)
        >>> tally.add({}, 0.25)
        >>> tally.cost()
        Cost(calls=2.0, prompt_tokens=12.0, completion_tokens=3.0, seconds=0.75)
    """

    calls: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0

    def add(self, usage: Mapping[str, int], seconds: float, calls: int = 1) -> None:
        """Count ``calls`` requests whose backend reported ``usage``, sent in ``seconds`` of wall time."""
        self.calls += calls
        self.seconds += seconds
        if "prompt_tokens" in usage:
            self.prompt_tokens = (self.prompt_tokens or 0) + int(usage["prompt_tokens"])
        if "completion_tokens" in usage:
            self.completion_tokens = (self.completion_tokens or 0) + int(usage["completion_tokens"])

    def cost(self) -> Cost:
        """What has been counted, as a :class:`Cost`."""
        return Cost(
            calls=self.calls,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            seconds=round(self.seconds, 6),
        )


class RubricSpend(NamedTuple):
    """Where one input's rubric came from and what writing it cost (what the generator reports to
    the reward, one per input)."""

    source: RubricSource
    cost: Cost
    shared_by: int


@dataclass
class Ledger:
    """Where the generator and the evaluator report what their part of a reward's batch cost, while
    :class:`~care_sdk.AdaptiveReward` has it open (:func:`open_ledger`): one :class:`RubricSpend` per
    context of the rubric stage, one :class:`Tally` per item of the evaluation stage. Called outside a
    reward, they report nothing.

    Examples:
        >>> ledger = Ledger()
        >>> with open_ledger(ledger):
        ...     active_ledger() is ledger
        True
        >>> active_ledger() is None
        True
    """

    rubrics: list[RubricSpend] = field(default_factory=list)
    evaluations: list[Tally] = field(default_factory=list)

    def open_evaluations(self, n: int) -> list[Tally]:
        """A fresh tally for each of ``n`` evaluations (what the evaluator's plan counts into)."""
        self.evaluations = [Tally() for _ in range(n)]
        return self.evaluations


_LEDGER: ContextVar[Ledger | None] = ContextVar("care_sdk_ledger", default=None)


def active_ledger() -> Ledger | None:
    """The ledger of the reward scoring in this context, or ``None``."""
    return _LEDGER.get()


@contextmanager
def open_ledger(ledger: Ledger) -> Iterator[None]:
    """Open ``ledger`` in this context while the block runs: the reward's plan holds it open around
    the stages its driver runs (in the same thread or task), so the components they call report to it."""
    previous = _LEDGER.get()
    _LEDGER.set(ledger)
    try:
        yield
    finally:
        _LEDGER.set(previous)


def producers(
    generator: RubricGenerator | None, evaluator: RubricEvaluator, profile: UserProfile | None = None
) -> dict[str, str | None]:
    """The generator's (``None`` under a fixed rubric) and the evaluator's identity and prompt version, as
    :class:`Provenance` fields; with a ``profile``, a component that reads profiles wrote its prompt in
    the profile version.

    Examples:
        >>> from care_sdk import RubricEvaluator
        >>> from care_sdk.testing import ScriptedBackend
        >>> producers(None, RubricEvaluator(ScriptedBackend([])))["generator"] is None
        True
    """
    from care_sdk.prompts import PROFILE_PROMPT_VERSION

    def version(component: RubricGenerator | RubricEvaluator) -> str:
        reads = profile is not None and component.reads_profiles
        return PROFILE_PROMPT_VERSION if reads else component.prompt_version

    return {
        "generator": generator.identity if generator is not None else None,
        "generator_prompt": version(generator) if generator is not None else None,
        "evaluator": evaluator.identity,
        "evaluator_prompt": version(evaluator),
    }


def traced(
    outcomes: Sequence[tuple[RewardResult, CareError | None]],
    rubrics: Sequence[Rubric | CareError],
    profiles: Sequence[UserProfile | None],
    ledger: Ledger,
    fit_seconds: Mapping[int, float],
    *,
    generator: RubricGenerator | None,
    evaluator: RubricEvaluator,
) -> list[tuple[RewardResult, CareError | None]]:
    """Each evaluated outcome of a reward's batch with its :class:`Provenance`: the rubric's hash and source
    (``generator`` ``None``: the reward's fixed rubric), its cost shared by the replies of the batch that
    share it, the reply's own evaluation cost and context-fit time (``fit_seconds`` by item), and the prompt
    versions its profile (if any) was written in (:func:`producers`).

    Examples:
        >>> from care_sdk import RubricEvaluator
        >>> from care_sdk.testing import ScriptedBackend
        >>> traced([], [], [], Ledger(), {}, generator=None, evaluator=RubricEvaluator(ScriptedBackend([])))
        []
    """
    from care_sdk.types import Rubric

    spends = iter(ledger.rubrics)
    tallies = iter(ledger.evaluations)
    out: list[tuple[RewardResult, CareError | None]] = []
    for i, ((result, error), rubric, profile) in enumerate(zip(outcomes, rubrics, profiles, strict=True)):
        spend = next(spends) if generator is not None else RubricSpend("fixed", Cost(), 1)
        provenance = Provenance(
            **producers(generator, evaluator, profile),
            rubric_hash=result.rubric.content_hash if result.rubric is not None else None,
            rubric_source=spend.source,
            rubric_shared_by=spend.shared_by,
            rubric_cost=spend.cost,
            evaluation_cost=next(tallies).cost() if isinstance(rubric, Rubric) else Cost(),
            context_fit_seconds=fit_seconds.get(i),
        )
        out.append((result.model_copy(update={"provenance": provenance}), error))
    return out
