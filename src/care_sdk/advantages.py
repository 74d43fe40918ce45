"""Per-dimension advantages: each dimension's score normalised within its group, then the rubric's weights.

CARE judges every reply to one context against one rubric, so the weights are the same across a
group of replies (the G rollouts of one prompt in GRPO). That makes a per-dimension baseline well
defined: for reply i of a group and dimension d,

    a_i = sum_d w_d * (s_id - mean_g s_d) / std_g s_d

(a dimension whose scores tie within the group contributes 0). Each dimension then moves the
policy by its own spread, instead of one dimension's large spread drowning the others in the
weighted sum. A reply whose reward came without per-dimension scores (a guard scored it 0 without
a model call) counts its reward for every dimension; a reply without a reward stays ``None``.

The TRL and verl integrations offer it as an option: :func:`care_sdk.integrations.trl.per_dimension`
and ``compute_score_batch(..., advantages="per_dimension")`` (:mod:`care_sdk.integrations.verl`).

Examples:
    >>> from care_sdk import Rubric
    >>> from care_sdk.types import RewardResult
    >>> rubric = Rubric.uniform_fixed()
    >>> def result(c, a, p):
    ...     return RewardResult(reward=(c + a + p) / 3, rubric=rubric,
    ...                         dimension_scores={"cognitive": c, "affective": a, "proactive": p})
    >>> group = [result(1.0, 0.0, 0.5), result(0.0, 1.0, 0.5)]     # the same weighted reward
    >>> [r.reward for r in group], per_dimension_advantages(group, ["ctx", "ctx"])
    ([0.5, 0.5], [0.0, 0.0])
    >>> per_dimension_advantages([result(1.0, 0.5, 0.5), result(0.0, 0.5, 0.5)], ["ctx", "ctx"])
    [0.333333, -0.333333]
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Sequence

from care_sdk.types import DIMENSIONS, RewardResult

__all__ = ["ADVANTAGES", "per_dimension_advantages", "zero_spread_share"]

ADVANTAGES = ("weighted", "per_dimension")
"""The integrations' ``advantages`` options: the plain weighted reward, or per-dimension advantages."""

_DIGITS = 6


def _scores(result: RewardResult) -> dict[str, float] | None:
    if result.reward is None:
        return None
    if result.dimension_scores:
        return {d.value: float(result.dimension_scores.get(d, 0.0)) for d in DIMENSIONS}
    return {d.value: float(result.reward) for d in DIMENSIONS}


def _weights(result: RewardResult) -> dict[str, float]:
    if result.rubric is None:
        return {d.value: 1.0 / len(DIMENSIONS) for d in DIMENSIONS}
    return {d.value: result.rubric.weights[d] for d in DIMENSIONS}


def per_dimension_advantages(results: Sequence[RewardResult], groups: Sequence[Hashable]) -> list[float | None]:
    """Per reply, ``sum_d w_d * z_d`` with ``z_d`` its dimension score standardised within its group.

    Args:
        results: the reward results of a batch.
        groups: per result, its group (e.g. its context); results of one group share one rubric.

    Returns:
        One value per result (rounded to 6 decimals; ``None`` where the result has no reward).
        A group of one reply gets 0.

    Examples:
        >>> per_dimension_advantages([RewardResult(reward=0.0), RewardResult(reward=1.0),
        ...                           RewardResult.failed("x")], ["a", "a", "a"])
        [-1.0, 1.0, None]
    """
    if len(results) != len(groups):
        raise ValueError(f"{len(results)} results but {len(groups)} group keys")
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(groups):
        members.setdefault(key, []).append(i)
    out: list[float | None] = [None] * len(results)
    for indices in members.values():
        scored = [(i, s) for i in indices if (s := _scores(results[i])) is not None]
        if not scored:
            continue
        stats = {}
        for d in DIMENSIONS:
            values = [s[d.value] for _, s in scored]
            stats[d.value] = (statistics.fmean(values), statistics.pstdev(values))
        for i, s in scored:
            w = _weights(results[i])
            value = sum(w[d] * (s[d] - mean) / std for d, (mean, std) in stats.items() if std > 1e-12)
            out[i] = round(value, _DIGITS) + 0.0
    return out


def zero_spread_share(values: Sequence[float | None], groups: Sequence[Hashable]) -> float | None:
    """The share of groups (of at least two scored values) whose values all tie: GRPO learns nothing there.

    Examples:
        >>> zero_spread_share([0.5, 0.5, 0.2, 0.9], ["a", "a", "b", "b"])
        0.5
    """
    members: dict[Hashable, list[float]] = {}
    for value, key in zip(values, groups, strict=True):
        if value is not None:
            members.setdefault(key, []).append(value)
    sized = [v for v in members.values() if len(v) >= 2]
    if not sized:
        return None
    return sum(max(v) - min(v) <= 1e-12 for v in sized) / len(sized)
