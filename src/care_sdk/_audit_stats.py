"""The statistics of :mod:`care_sdk.audit`: groups, correlations, the gap's slope, rank agreement.

Examples:
    >>> round(_slope([(1, 0.1), (2, 0.2), (3, 0.3)]), 6)
    0.1
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Hashable, Sequence

from care_sdk.types import DIMENSIONS, Messages, RewardResult

__all__ = ["context_key", "length_correlation", "share_correlations"]


def context_key(context: Messages) -> str:
    """A hashable key of a context, equal for replies to the same context (one group).

    Examples:
        >>> from care_sdk.types import as_messages
        >>> same = [{"role": "user", "content": "hi"}]
        >>> context_key(tuple(as_messages("hi"))) == context_key(tuple(as_messages(same)))
        True
    """
    return json.dumps([[m.role, m.content] for m in context], ensure_ascii=False)


def _pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    if len(xs) < 3:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx <= 1e-12 or syy <= 1e-12:
        return None
    return sxy / math.sqrt(sxx * syy)


def _slope(points: Sequence[tuple[float, float]]) -> float | None:
    if len(points) < 2:
        return None
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 1e-12:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def length_correlation(replies: Sequence[str], results: Sequence[RewardResult]) -> float | None:
    """Pearson correlation of reward and reply length (characters) over the scored replies.

    ``None`` below three scored replies or when either side is constant.

    Examples:
        >>> results = [RewardResult(reward=r) for r in (0.1, 0.5, 0.9)]
        >>> round(length_correlation(["a", "abc", "abcdef"], results), 3)
        0.993
    """
    pairs = [(float(len(t)), r.reward) for t, r in zip(replies, results, strict=True) if r.reward is not None]
    return _pearson([p[0] for p in pairs], [p[1] for p in pairs])


def share_correlations(results: Sequence[RewardResult]) -> dict[str, float]:
    """Per dimension, the correlation of reward and that dimension's share of the reward.

    The share of dimension d is ``w_d * s_d / sum_e w_e * s_e`` over the replies the evaluator scored
    (a dimension without a defined correlation is left out). A reward that follows one dimension's
    criteria more than the reply's quality shows a high correlation there.

    Examples:
        >>> from care_sdk import Rubric
        >>> rubric = Rubric.uniform_fixed()
        >>> rs = [RewardResult(reward=(a + 0.2) / 3, rubric=rubric,
        ...                    dimension_scores={"cognitive": 0.1, "affective": a, "proactive": 0.1})
        ...       for a in (0.0, 0.5, 1.0)]
        >>> round(share_correlations(rs)["affective"], 2)
        0.92
    """
    rows = []
    for r in results:
        if r.reward is None or r.rubric is None or not r.dimension_scores:
            continue
        parts = {d: r.rubric.weights[d] * r.dimension_scores.get(d, 0.0) for d in DIMENSIONS}
        total = sum(parts.values())
        if total > 1e-12:
            rows.append((r.reward, {d: v / total for d, v in parts.items()}))
    out: dict[str, float] = {}
    for d in DIMENSIONS:
        corr = _pearson([row[0] for row in rows], [row[1][d] for row in rows])
        if corr is not None:
            out[d.value] = corr
    return out


def _groups(keys: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    out: dict[Hashable, list[int]] = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return out


def _rank_agreement(
    groups: Sequence[Sequence[int]], proxy: Sequence[float | None], ref: Sequence[float | None]
) -> float | None:
    agree = total = 0
    for members in groups:
        for a in range(len(members)):
            for b in range(a + 1, len(members)):
                i, j = members[a], members[b]
                pi, pj, ri, rj = proxy[i], proxy[j], ref[i], ref[j]
                if pi is None or pj is None or ri is None or rj is None or pi == pj or ri == rj:
                    continue
                total += 1
                agree += (pi > pj) == (ri > rj)
    return agree / total if total else None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
