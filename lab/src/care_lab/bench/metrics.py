"""Agreement metrics in plain Python: ranks, Spearman, AUC, preference pairs and bootstrap intervals.

Every function takes plain sequences of numbers and needs no numpy; the sizes in a quality run
(hundreds to a few thousand values) make that cheap.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = [
    "SIMILAR_LENGTH",
    "Estimate",
    "PairOutcome",
    "PreferencePair",
    "auc",
    "bootstrap",
    "mean",
    "pairwise_accuracy",
    "pearson",
    "preference_pairs",
    "rank",
    "score_pairs",
    "similar_length",
    "spearman",
]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def mean(values: Iterable[float]) -> float | None:
    """The arithmetic mean, ``None`` for no values.

    Examples:
        >>> mean([1, 2, 6]), mean([])
        (3.0, None)
    """
    items = list(values)
    return sum(items) / len(items) if items else None


def rank(values: Sequence[float]) -> list[float]:
    """Ranks from 1, ties sharing their average rank (as ``scipy.stats.rankdata``).

    Examples:
        >>> rank([10, 30, 20, 20])
        [1.0, 4.0, 2.5, 2.5]
    """
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        average = (start + end) / 2 + 1
        for k in range(start, end + 1):
            ranks[order[k]] = average
        start = end + 1
    return ranks


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's correlation; ``None`` when undefined (fewer than 2 points, or a constant side).

    Examples:
        >>> pearson([1, 2, 3], [2, 4, 7])
        0.9933992677987828
        >>> pearson([1, 1, 1], [1, 2, 3]) is None
        True
    """
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} values but y has {len(y)}")
    n = len(x)
    if n < 2:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx <= 0 or syy <= 0:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson over average ranks); ``None`` when undefined.

    Examples:
        >>> spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7])
        0.8207826816681233
        >>> spearman([1, 2, 3], [3, 2, 1])
        -1.0
    """
    if len(x) != len(y):
        raise ValueError(f"x has {len(x)} values but y has {len(y)}")
    return pearson(rank(x), rank(y))


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float | None:
    """Area under the ROC curve: the chance a random positive scores above a random negative.

    Ties count one half (the Mann-Whitney U statistic over ``len(pos) * len(neg)``).
    ``None`` when either side is empty.

    Examples:
        >>> auc([0.9, 0.8, 0.4], [0.5, 0.1])
        0.8333333333333334
        >>> auc([1, 1], [1])
        0.5
    """
    if not positives or not negatives:
        return None
    ranks = rank([*positives, *negatives])
    n_pos, n_neg = len(positives), len(negatives)
    u = sum(ranks[:n_pos]) - n_pos * (n_pos + 1) / 2
    return u / (n_pos * n_neg)


@dataclass(frozen=True)
class Estimate:
    """A statistic with its bootstrap confidence interval.

    Examples:
        >>> Estimate(value=0.5, low=0.4, high=0.61, n=120).format()
        '0.500 [0.400, 0.610]'
        >>> Estimate(value=None, n=0).format()
        'n/a'
    """

    value: float | None
    """The statistic on the full sample (``None`` when undefined)."""
    low: float | None = None
    """Lower end of the interval."""
    high: float | None = None
    """Upper end of the interval."""
    n: int = 0
    """How many units (items, pairs, dialogues) the statistic is over."""
    level: float = 0.95
    """The interval's coverage."""

    def format(self, digits: int = 3) -> str:
        """``value [low, high]``, or ``n/a``."""
        if self.value is None:
            return "n/a"
        text = f"{self.value:.{digits}f}"
        if self.low is not None and self.high is not None:
            text += f" [{self.low:.{digits}f}, {self.high:.{digits}f}]"
        return text

    def to_json(self) -> dict[str, Any]:
        """The estimate as a JSON-ready dict."""
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n, "level": self.level}


def bootstrap(
    units: Sequence[T],
    statistic: Callable[[Sequence[T]], float | None],
    *,
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    strata: Callable[[T], Hashable] | None = None,
) -> Estimate:
    """The statistic over ``units`` with a percentile bootstrap interval.

    Units are resampled with replacement (within each stratum when ``strata`` is given, e.g. the
    class label for an AUC, so every resample keeps both classes). Put everything that must move
    together into one unit: for pairwise accuracy, the unit is a context with all its pairs.
    Resamples where the statistic is undefined are left out; with fewer than 2 units there is no
    interval.

    Examples:
        >>> est = bootstrap([0, 1, 1, 1], lambda xs: sum(xs) / len(xs), resamples=200)
        >>> est.value, est.n, 0 <= est.low <= est.value <= est.high <= 1
        (0.75, 4, True)
    """
    value = statistic(units) if units else None
    if value is None or len(units) < 2 or resamples < 1:
        return Estimate(value=value, n=len(units), level=level)
    rng = random.Random(seed)
    groups: list[list[T]]
    if strata is None:
        groups = [list(units)]
    else:
        by: dict[Hashable, list[T]] = {}
        for unit in units:
            by.setdefault(strata(unit), []).append(unit)
        groups = list(by.values())
    stats = []
    for _ in range(resamples):
        sample = [group[rng.randrange(len(group))] for group in groups for _ in group]
        result = statistic(sample)
        if result is not None and not math.isnan(result):
            stats.append(result)
    if not stats:
        return Estimate(value=value, n=len(units), level=level)
    stats.sort()
    alpha = (1 - level) / 2
    low = stats[min(len(stats) - 1, max(0, math.floor(alpha * len(stats))))]
    high = stats[min(len(stats) - 1, max(0, math.ceil((1 - alpha) * len(stats)) - 1))]
    return Estimate(value=value, low=low, high=high, n=len(units), level=level)


@dataclass(frozen=True)
class PreferencePair(Generic[K]):
    """Two items answering the same context whose reference scores differ by at least a margin.

    Examples:
        >>> PreferencePair(group="t1", better="a", worse="b", gap=1.5).better
        'a'
    """

    group: Hashable
    """The shared context (e.g. the judged turn)."""
    better: K
    """The item with the higher reference score."""
    worse: K
    """The item with the lower reference score."""
    gap: float
    """The reference score difference (>= the margin)."""


def preference_pairs(groups: Mapping[Any, Mapping[K, float]], *, margin: float = 1.0) -> list[PreferencePair[K]]:
    """Every pair of items in the same group whose reference scores differ by at least ``margin``.

    ``groups`` maps a context to ``{item: reference score}``. Pairs are listed in a stable order:
    by group insertion order, then by the order of the items.

    Examples:
        >>> pairs = preference_pairs({"t1": {"gold": 4.5, "sys1": 3.0, "sys2": 4.0}}, margin=1.0)
        >>> [(p.better, p.worse, p.gap) for p in pairs]
        [('gold', 'sys1', 1.5), ('sys2', 'sys1', 1.0)]
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    pairs = []
    for group, scores in groups.items():
        items = list(scores.items())
        for i, (a, sa) in enumerate(items):
            for b, sb in items[i + 1 :]:
                gap = abs(sa - sb)
                if gap < margin - 1e-12 or gap == 0:
                    continue
                better, worse = (a, b) if sa > sb else (b, a)
                pairs.append(PreferencePair(group=group, better=better, worse=worse, gap=gap))
    return pairs


@dataclass(frozen=True)
class PairOutcome:
    """How a reward ranked one preference pair: ``1`` agrees, ``0`` disagrees, ``0.5`` tie.

    Examples:
        >>> PairOutcome(group="t1", value=0.5).tie
        True
    """

    group: Hashable
    """The pair's context."""
    value: float
    """1 (same order as the reference), 0 (reversed) or 0.5 (the reward ties)."""

    @property
    def tie(self) -> bool:
        """Whether the reward gave both items the same value."""
        return self.value == 0.5


SIMILAR_LENGTH = 1.5
"""Two replies are of similar length when the longer has at most this many times the other's words
(:func:`similar_length`).

Examples:
    >>> similar_length("one two", "one two three"), SIMILAR_LENGTH * 2 >= 3
    (True, True)
"""


def similar_length(a: str, b: str, *, ratio: float = SIMILAR_LENGTH) -> bool:
    """Whether replies ``a`` and ``b`` are of similar length: the longer has at most ``ratio``
    times the other's words. Over such pairs reply length cannot be what orders them, so a reward
    that orders them as the judge does has learned more than "longer is better".

    Examples:
        >>> similar_length("I hear you, that sounds hard.", "That sounds so hard, I hear you.")
        True
        >>> similar_length("Sorry.", "I'm so sorry, that sounds like a hard week.")
        False
    """
    shorter, longer = sorted((len(a.split()), len(b.split())))
    return longer <= ratio * max(shorter, 1)


def score_pairs(
    pairs: Sequence[PreferencePair[K]], rewards: Mapping[K, float | None], *, tol: float = 1e-9
) -> tuple[list[PairOutcome], int]:
    """Compare the reward of each pair's items; returns the outcomes and how many pairs lacked a reward.

    Examples:
        >>> pairs = preference_pairs({"t": {"a": 5, "b": 3, "c": 1}}, margin=1)
        >>> outcomes, missing = score_pairs(pairs, {"a": 0.9, "b": 0.9, "c": 0.1})
        >>> [o.value for o in outcomes], missing
        ([0.5, 1.0, 1.0], 0)
    """
    outcomes = []
    missing = 0
    for pair in pairs:
        better, worse = rewards.get(pair.better), rewards.get(pair.worse)
        if better is None or worse is None:
            missing += 1
            continue
        value = 0.5 if abs(better - worse) <= tol else float(better > worse)
        outcomes.append(PairOutcome(group=pair.group, value=value))
    return outcomes, missing


def pairwise_accuracy(outcomes: Sequence[PairOutcome], *, resamples: int = 1000, seed: int = 0) -> dict[str, Estimate]:
    """Agreement over preference pairs, with intervals from resampling contexts (not pairs).

    Returns ``accuracy`` (ties count one half), ``strict`` (accuracy over the pairs the reward
    does not tie) and ``ties`` (the share of tied pairs). Resampling whole contexts keeps the
    pairs that share a context together, so the interval is not too narrow.

    Examples:
        >>> out = [PairOutcome("t1", 1.0), PairOutcome("t1", 0.5), PairOutcome("t2", 0.0), PairOutcome("t2", 1.0)]
        >>> result = pairwise_accuracy(out, resamples=100)
        >>> result["accuracy"].value, result["strict"].value, result["ties"].value
        (0.625, 0.6666666666666666, 0.25)
    """
    by_group: dict[Hashable, list[PairOutcome]] = {}
    for outcome in outcomes:
        by_group.setdefault(outcome.group, []).append(outcome)
    clusters = list(by_group.values())

    def flat(sample: Sequence[list[PairOutcome]]) -> list[PairOutcome]:
        return [o for cluster in sample for o in cluster]

    def accuracy(sample: Sequence[list[PairOutcome]]) -> float | None:
        return mean(o.value for o in flat(sample))

    def strict(sample: Sequence[list[PairOutcome]]) -> float | None:
        return mean(o.value for o in flat(sample) if not o.tie)

    def ties(sample: Sequence[list[PairOutcome]]) -> float | None:
        return mean(float(o.tie) for o in flat(sample))

    result = {}
    for name, fn in (("accuracy", accuracy), ("strict", strict), ("ties", ties)):
        est = bootstrap(clusters, fn, resamples=resamples, seed=seed)
        n = len(outcomes) if name != "strict" else sum(1 for o in outcomes if not o.tie)
        result[name] = Estimate(value=est.value, low=est.low, high=est.high, n=n, level=est.level)
    return result
