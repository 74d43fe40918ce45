"""Metric code of the quality benchmark against values computed by hand (or by scipy, quoted)."""

from __future__ import annotations

import math

import pytest

from care_lab.bench.metrics import (
    PairOutcome,
    auc,
    bootstrap,
    mean,
    pairwise_accuracy,
    pearson,
    preference_pairs,
    rank,
    score_pairs,
    spearman,
)


def test_rank_averages_ties() -> None:
    assert rank([3, 1, 4, 1, 5]) == [3.0, 1.5, 4.0, 1.5, 5.0]
    assert rank([]) == []
    assert rank([2, 2, 2]) == [2.0, 2.0, 2.0]


def test_spearman_known_values() -> None:
    # One swapped neighbour pair among 4: rho = 1 - 6 * 2 / (4 * 15) = 0.8.
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    # scipy.stats.spearmanr([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]).statistic == 0.8207826816681233 (ties in y)
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(0.8207826816681233)
    # Monotone but not linear: Spearman 1, Pearson below 1.
    x = [1, 2, 3, 4, 5]
    y = [1, 4, 9, 16, 100]
    assert spearman(x, y) == pytest.approx(1.0)
    assert pearson(x, y) < 0.9


def test_correlations_undefined_cases() -> None:
    assert spearman([1], [2]) is None
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert pearson([1, 2], [3, 3]) is None
    with pytest.raises(ValueError, match="x has 2 values but y has 3"):
        spearman([1, 2], [1, 2, 3])


def test_pearson_known_value() -> None:
    # r = cov / (sx * sy) with x = [1, 2, 3], y = [1, 2, 4]: sxy = 3, sxx = 2, syy = 14/3.
    assert pearson([1, 2, 3], [1, 2, 4]) == pytest.approx(3 / math.sqrt(2 * 14 / 3))


def test_auc_counts_ties_as_half() -> None:
    # Pairs (pos, neg): (0.9 > 0.5), (0.9 > 0.1), (0.8 > 0.5), (0.8 > 0.1), (0.4 < 0.5), (0.4 > 0.1) -> 5/6.
    assert auc([0.9, 0.8, 0.4], [0.5, 0.1]) == pytest.approx(5 / 6)
    assert auc([0.5, 0.7], [0.5]) == pytest.approx(0.75)
    assert auc([1.0], [2.0]) == 0.0
    assert auc([], [1.0]) is None


def test_mean() -> None:
    assert mean([]) is None
    assert mean(x for x in (1.0, 2.0)) == 1.5


def test_bootstrap_interval_is_deterministic_and_brackets_the_value() -> None:
    data = [0.1 * i for i in range(30)]
    first = bootstrap(data, lambda xs: sum(xs) / len(xs), resamples=500, seed=7)
    again = bootstrap(data, lambda xs: sum(xs) / len(xs), resamples=500, seed=7)
    assert first == again
    assert first.value == pytest.approx(1.45)
    assert first.low is not None and first.high is not None
    assert first.low < first.value < first.high
    # The sample mean's standard error is about 0.16 here; a 95% interval spans roughly +-0.3.
    assert 0.4 < first.high - first.low < 0.8
    assert first.n == 30


def test_bootstrap_constant_data_has_a_zero_width_interval() -> None:
    est = bootstrap([1.0] * 5, lambda xs: sum(xs) / len(xs), resamples=50)
    assert (est.value, est.low, est.high) == (1.0, 1.0, 1.0)


def test_bootstrap_without_enough_units_has_no_interval() -> None:
    assert bootstrap([], lambda xs: 1.0).value is None
    one = bootstrap([3.0], lambda xs: xs[0])
    assert (one.value, one.low, one.high) == (3.0, None, None)
    assert one.format() == "3.000"


def test_stratified_bootstrap_keeps_both_classes() -> None:
    units = [("pos", 0.9), ("pos", 0.8), ("neg", 0.1), ("neg", 0.7), ("neg", 0.2)]

    def stat(sample: list[tuple[str, float]]) -> float | None:
        return auc([s for c, s in sample if c == "pos"], [s for c, s in sample if c == "neg"])

    plain = bootstrap(units, stat, resamples=300, seed=1)
    stratified = bootstrap(units, stat, resamples=300, seed=1, strata=lambda u: u[0])
    assert plain.value == stratified.value == pytest.approx(1.0)
    assert stratified.low is not None and stratified.low >= 0.5  # every resample has both classes


def test_preference_pairs_respect_the_margin() -> None:
    groups = {"t1": {"gold": 4.5, "a": 3.0, "b": 4.0}, "t2": {"gold": 2.0, "a": 2.0}}
    pairs = preference_pairs(groups, margin=1.0)
    assert [(p.group, p.better, p.worse, p.gap) for p in pairs] == [("t1", "gold", "a", 1.5), ("t1", "b", "a", 1.0)]
    assert len(preference_pairs(groups, margin=0.0)) == 3  # equal scores never make a pair
    assert preference_pairs(groups, margin=2.0) == []
    with pytest.raises(ValueError):
        preference_pairs(groups, margin=-1)


def test_score_pairs_and_accuracy_by_hand() -> None:
    groups = {"t1": {"x1": 5.0, "x2": 3.0}, "t2": {"y1": 5.0, "y2": 3.0, "y3": 1.0}}
    pairs = preference_pairs(groups, margin=1.0)
    rewards = {"x1": 0.9, "x2": 0.1, "y1": 0.2, "y2": 0.2, "y3": 0.5}
    outcomes, missing = score_pairs(pairs, rewards)
    # t1: x1 > x2 agrees (1). t2: y1 vs y2 tie (0.5), y1 vs y3 reversed (0), y2 vs y3 reversed (0).
    assert [o.value for o in outcomes] == [1.0, 0.5, 0.0, 0.0]
    assert missing == 0
    result = pairwise_accuracy(outcomes, resamples=200)
    assert result["accuracy"].value == pytest.approx(1.5 / 4)
    assert result["strict"].value == pytest.approx(1 / 3)
    assert result["strict"].n == 3
    assert result["ties"].value == pytest.approx(0.25)


def test_score_pairs_counts_missing_rewards() -> None:
    pairs = preference_pairs({"t": {"a": 5.0, "b": 1.0}}, margin=1.0)
    outcomes, missing = score_pairs(pairs, {"a": 0.5, "b": None})
    assert outcomes == [] and missing == 1


def test_pairwise_accuracy_resamples_contexts_not_pairs() -> None:
    # Every pair of one context agrees and every pair of the other disagrees: resampling contexts gives
    # resamples of all-agree, all-disagree or half, so the interval is wide; resampling pairs would be narrow.
    outcomes = [PairOutcome("a", 1.0)] * 10 + [PairOutcome("b", 0.0)] * 10
    result = pairwise_accuracy(outcomes, resamples=400, seed=3)
    assert result["accuracy"].value == 0.5
    assert result["accuracy"].low == 0.0 and result["accuracy"].high == 1.0
