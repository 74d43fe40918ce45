"""Small inline SVG charts for the report's overview, drawn from numbers only (no text from dialogues)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

__all__ = ["COLORS", "histogram_svg", "weights_bar_svg", "weights_by_turn_svg"]

COLORS = {"cognitive": "#3867d6", "affective": "#d64571", "proactive": "#20a070"}
"""One colour per dimension, shared by the charts and the page's stylesheet."""
POOL_FROM = 12
"""Turn numbers from this one on are pooled into one point (as in ``care plot``)."""
_AXIS = "#8a94a6"
_TEXT = "#4a5568"


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
        f'role="img" aria-label="{escape(label)}" class="chart">' + "".join(body) + "</svg>"
    )


def _text(x: float, y: float, text: str, anchor: str = "middle", size: int = 11) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="{_TEXT}">{escape(text)}</text>'
    )


def histogram_svg(counts: Sequence[int]) -> str:
    """Bars of the reward distribution over [0, 1] (one bar per bin).

    Examples:
        >>> histogram_svg([1, 0, 3]).count("<rect")
        3
    """
    width, height, left, bottom, top = 380, 170, 34, 26, 12
    if not counts or not any(counts):
        return _svg(width, height, [_text(width / 2, height / 2, "no scored turns")], "reward distribution")
    peak = max(counts)
    inner_w, inner_h = width - left - 8, height - bottom - top
    step = inner_w / len(counts)
    body = [
        f'<line x1="{left}" y1="{top + inner_h}" x2="{width - 8}" y2="{top + inner_h}" stroke="{_AXIS}"/>',
        _text(left - 6, top + 4, str(peak), "end"),
        _text(left - 6, top + inner_h, "0", "end"),
    ]
    for i, count in enumerate(counts):
        h = inner_h * count / peak
        lo, hi = i / len(counts), (i + 1) / len(counts)
        body.append(
            f'<rect x="{left + i * step + 1:.1f}" y="{top + inner_h - h:.1f}" width="{step - 2:.1f}" '
            f'height="{h:.1f}" rx="2" fill="#5a67d8"><title>{lo:.1f}–{hi:.1f}: {count} turns</title></rect>'
        )
    for value in (0.0, 0.5, 1.0):
        body.append(_text(left + value * inner_w, height - 8, f"{value:g}"))
    return _svg(width, height, body, "reward distribution")


def weights_bar_svg(weights: Sequence[float] | None, dims: Sequence[str] = tuple(COLORS)) -> str:
    """One stacked bar of the mean weight of each dimension, labelled with percentages.

    Examples:
        >>> "50%" in weights_bar_svg([0.5, 0.25, 0.25])
        True
    """
    width, height = 380, 34
    if not weights:
        return _svg(width, height, [_text(width / 2, 20, "no rubrics")], "mean weights")
    total = sum(weights) or 1.0
    body, x = [], 0.0
    for dim, weight in zip(dims, weights, strict=True):
        w = width * weight / total
        body.append(
            f'<rect x="{x:.1f}" y="2" width="{w:.1f}" height="30" fill="{COLORS[dim]}">'
            f"<title>{escape(dim)}: {weight:.3f}</title></rect>"
        )
        if w > 34:
            body.append(
                f'<text x="{x + w / 2:.1f}" y="22" text-anchor="middle" font-size="12" fill="#fff" '
                f'font-weight="600">{weight / total:.0%}</text>'
            )
        x += w
    return _svg(width, height, body, "mean weights")


def weights_by_turn_svg(rows: Sequence[Sequence[object]], dims: Sequence[str] = tuple(COLORS)) -> str:
    """Lines of the mean weight of each dimension by supporter turn number.

    ``rows`` are ``[turn number, [mean weight per dimension], n]`` (the report's ``weights_by_turn``);
    the last turn number pools every later turn.

    Examples:
        >>> weights_by_turn_svg([[1, [0.5, 0.3, 0.2], 4], [2, [0.2, 0.3, 0.5], 4]]).count("<polyline")
        3
    """
    width, height, left, bottom, top, right = 380, 190, 34, 28, 10, 10
    if not rows:
        return _svg(width, height, [_text(width / 2, height / 2, "no rubrics")], "weights by turn")
    inner_w, inner_h = width - left - right, height - bottom - top
    numbers = [int(str(r[0])) for r in rows]
    span = max(1, len(rows) - 1)

    def xy(i: int, value: float) -> tuple[float, float]:
        return left + inner_w * i / span, top + inner_h * (1 - value)

    body = []
    for value in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = top + inner_h * (1 - value)
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#e2e8f0"/>')
        body.append(_text(left - 6, y + 4, f"{value:g}", "end"))
    for k, dim in enumerate(dims):
        points = [xy(i, float(r[1][k])) for i, r in enumerate(rows)]  # type: ignore[index]
        body.append(
            f'<polyline fill="none" stroke="{COLORS[dim]}" stroke-width="2.2" '
            f'points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in points)}"/>'
        )
        for (x, y), row in zip(points, rows, strict=True):
            body.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{COLORS[dim]}">'
                f"<title>turn {row[0]}: {escape(dim)} {float(row[1][k]):.3f} (n={row[2]})</title></circle>"  # type: ignore[index]
            )
    label_every = max(1, len(rows) // 12)
    for i, number in enumerate(numbers):
        if i % label_every == 0 or i == len(rows) - 1:
            pooled = i == len(rows) - 1 and number >= POOL_FROM
            body.append(_text(xy(i, 0)[0], height - 10, f"{number}+" if pooled else str(number)))
    return _svg(width, height, body, "weights by turn")
