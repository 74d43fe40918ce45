"""What the strategy labels say about which dimension comes first: r_align's rule and the turn-position prior.

The reference replies' strategies map to dimensions (:class:`~care_lab.data.StrategyMap`), and
their counts n_d say which dimension the reply put first. Two things are read from them, by the
generator's training (preference GRPO's ``r_align`` term, the template targets) and by the quality
benchmark (priority alignment) alike:

- :func:`align_violations` and :func:`r_align`: whether a rubric's weights put the dimensions in
  the order the counts give;
- :func:`fit_top_priors` and :func:`position_prior`: the baselines a generator's top dimension must
  beat, fitted on a training split: the majority top dimension and the one most often on top at
  each supporter-turn number (:func:`turn_number`).

Examples:
    >>> r_align({"cognitive": 0.5, "affective": 0.3, "proactive": 0.2}, {"cognitive": 2, "affective": 1})
    1.0
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from care_lab.data.records import SupportTurn
from care_sdk.prompts import generator_position
from care_sdk.types import DIMENSIONS, Dimension, Rubric

__all__ = [
    "POSITION_CAP",
    "Counts",
    "TopPriors",
    "Weights",
    "align_violations",
    "fit_top_priors",
    "position_prior",
    "r_align",
    "turn_number",
]

_EPS = 1e-9

Weights = Rubric | Mapping[Dimension, float] | Mapping[str, float]
"""A rubric, or its weight per dimension (keys: :class:`Dimension` or its value)."""
Counts = Mapping[Dimension, int] | Mapping[str, int]
"""Strategy counts n_d per dimension (missing dimensions count 0)."""


def _as_weights(weights: Weights) -> dict[Dimension, float]:
    raw = weights.weights if isinstance(weights, Rubric) else weights
    out = {Dimension(k): float(v) for k, v in raw.items()}
    missing = [d.value for d in DIMENSIONS if d not in out]
    if missing:
        raise ValueError(f"weights: missing {', '.join(missing)}")
    return out


def _as_counts(counts: Counts) -> dict[Dimension, int]:
    out = dict.fromkeys(DIMENSIONS, 0)
    for key, value in counts.items():
        if value < 0:
            raise ValueError(f"strategy count of {key} is negative: {value}")
        out[Dimension(key)] = int(value)
    return out


def align_violations(weights: Weights, strategy_counts: Counts) -> list[str]:
    """The violations of the alignment rule, one sentence each (empty: the weights are aligned).

    The rule, with n_d the strategy counts and w_d the weights, and the *top-count set* the
    dimensions with the largest n_d:

    1. one violation if a dimension outside the top-count set has the largest weight, alone or
       tied (strict: uniform weights violate it unless every dimension is in the top-count set);
    2. one more violation for every pair (z, p) with n_z = 0 < n_p and w_z > w_p.

    When every n_d is 0 all dimensions are in the top-count set and nothing can be violated.

    Examples:
        >>> for v in align_violations({"cognitive": 0.3, "affective": 0.5, "proactive": 0.2},
        ...                           {"cognitive": 2, "affective": 0, "proactive": 0}):
        ...     print(v)
        top: affective has the largest weight without the most strategies (cognitive)
        affective (n=0) outweighs cognitive (n=2)
        >>> align_violations({"cognitive": 1, "affective": 1, "proactive": 1}, {"cognitive": 3})
        ['top: affective, proactive share the largest weight without the most strategies (cognitive)']
    """
    w = _as_weights(weights)
    n = _as_counts(strategy_counts)
    out = []
    top_n = max(n.values())
    top_w = max(w.values())
    top_dims = [d for d in DIMENSIONS if n[d] == top_n]
    intruders = [d for d in DIMENSIONS if d not in top_dims and w[d] >= top_w - _EPS]
    if intruders:
        tied = sum(w[d] >= top_w - _EPS for d in DIMENSIONS) > 1
        how = ("shares" if tied else "has") if len(intruders) == 1 else "share"
        names = ", ".join(d.value for d in intruders)
        top = ", ".join(d.value for d in top_dims)
        out.append(f"top: {names} {how} the largest weight without the most strategies ({top})")
    for z in DIMENSIONS:
        for p in DIMENSIONS:
            if n[z] == 0 < n[p] and w[z] > w[p] + _EPS:
                out.append(f"{z.value} (n=0) outweighs {p.value} (n={n[p]})")
    return out


def r_align(weights: Weights, strategy_counts: Counts) -> float:
    """The alignment reward: ``max(0, 1 - 0.5 * violations)`` (see :func:`align_violations`).

    When every count is 0 both conditions hold trivially and the reward is 1. Uniform weights
    score 0.5 against counts with a single top dimension: a tie for the largest weight is not a
    priority order.

    Args:
        weights: the rubric (or its weights per dimension).
        strategy_counts: n_d, the per-dimension strategy counts of the preferred reply.

    Examples:
        >>> r_align({"cognitive": 0.5, "affective": 0.3, "proactive": 0.2}, {"cognitive": 2, "affective": 1})
        1.0
        >>> r_align({"cognitive": 0.2, "affective": 0.3, "proactive": 0.5}, {"cognitive": 2, "affective": 1})
        0.0
        >>> uniform = {"cognitive": 1, "affective": 1, "proactive": 1}
        >>> r_align(uniform, {"cognitive": 3}), r_align(uniform, {})
        (0.5, 1.0)
    """
    return max(0.0, 1.0 - 0.5 * len(align_violations(weights, strategy_counts)))


POSITION_CAP = 15
"""Supporter-turn numbers from this one on share one position prior (few conversations are longer)."""


def turn_number(turn: SupportTurn) -> int:
    """The supporter-turn number of a reply (1 for the first), as the generator prompt states it.

    Examples:
        >>> from care_lab.data import SupportDialogue
        >>> d = SupportDialogue(id="d", source="demo", messages=[
        ...     {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        ...     {"role": "user", "content": "I failed."}, {"role": "assistant", "content": "Oh no."}])
        >>> [turn_number(t) for t in d.supporter_turns()]
        [1, 2]
    """
    return generator_position(list(turn.context))[1]


def position_prior(turns: Iterable[SupportTurn]) -> dict[int, dict[Dimension, float]]:
    """How often each dimension is the reference's top dimension, per supporter-turn number.

    Ties in the strategy counts are split evenly; turn numbers from :data:`POSITION_CAP` on are
    pooled; turns without a mapped strategy are left out. Fit it on a training split only.

    Examples:
        >>> from care_lab.data import SupportDialogue
        >>> d = SupportDialogue(id="d", source="demo", messages=[
        ...     {"role": "user", "content": "hi"}, {"role": "assistant", "content": "What happened?"},
        ...     {"role": "user", "content": "I failed."}, {"role": "assistant", "content": "That hurts."}],
        ...     strategies=[None, ("Question",), None, ("Reflection of feelings", "Question")])
        >>> prior = position_prior(d.supporter_turns())
        >>> {n: {x.value: v for x, v in p.items() if v} for n, p in prior.items()}
        {1: {'cognitive': 1.0}, 2: {'cognitive': 0.5, 'affective': 0.5}}
    """
    tally: dict[int, dict[Dimension, float]] = defaultdict(lambda: dict.fromkeys(DIMENSIONS, 0.0))
    for turn in turns:
        tops = turn.top_dimensions
        for d in tops:
            tally[min(turn_number(turn), POSITION_CAP)][d] += 1 / len(tops)
    return {n: {d: c[d] / sum(c.values()) for d in DIMENSIONS} for n, c in sorted(tally.items())}


@dataclass(frozen=True)
class TopPriors:
    """The baselines a generator's top dimension must beat, fitted on a training split: the
    majority top dimension, and the one most often on top at each supporter-turn number (the
    turn-position prior; numbers from :data:`POSITION_CAP` on pooled). Made by :func:`fit_top_priors`.

    Examples:
        >>> priors = TopPriors(Dimension.AFFECTIVE, {1: Dimension.COGNITIVE})
        >>> priors.top(1).value, priors.top(7).value
        ('cognitive', 'affective')
    """

    majority: Dimension
    """The dimension most often on top over all turns."""
    by_turn: dict[int, Dimension]
    """The dimension most often on top at each supporter-turn number (capped at :data:`POSITION_CAP`)."""

    def top(self, number: int) -> Dimension:
        """The turn-position prior's top dimension at supporter turn ``number`` (the majority where no turn had it)."""
        return self.by_turn.get(min(number, POSITION_CAP), self.majority)


def fit_top_priors(turns: Iterable[SupportTurn]) -> TopPriors:
    """The majority top dimension and the turn-position prior of ``turns`` (a training split's supporter
    turns; ties in a turn's strategy counts split evenly, turns without a mapped strategy left out).

    Examples:
        >>> from care_lab.data import SupportDialogue
        >>> d = SupportDialogue(id="d", source="demo", messages=[
        ...     {"role": "user", "content": "hi"}, {"role": "assistant", "content": "What happened?"},
        ...     {"role": "user", "content": "I failed."}, {"role": "assistant", "content": "That hurts."},
        ...     {"role": "user", "content": "Yes."}, {"role": "assistant", "content": "So hard."}],
        ...     strategies=[None, ("Question",), None, ("Reflection of feelings",), None, ("Reflection of feelings",)])
        >>> priors = fit_top_priors(d.supporter_turns())
        >>> priors.majority.value, {n: t.value for n, t in priors.by_turn.items()}
        ('affective', {1: 'cognitive', 2: 'affective', 3: 'affective'})
    """
    turns = list(turns)
    overall = dict.fromkeys(DIMENSIONS, 0.0)
    for turn in turns:
        tops = turn.top_dimensions
        for d in tops:
            overall[d] += 1 / len(tops)
    by_turn = {n: max(DIMENSIONS, key=lambda d: shares[d]) for n, shares in position_prior(turns).items()}
    return TopPriors(max(DIMENSIONS, key=lambda d: overall[d]), by_turn)
