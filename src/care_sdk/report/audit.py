"""A training run's audit in the report: the JSONL log an :class:`~care_sdk.audit.Audit` writes, as charts.

Three charts over the steps: the training (proxy) reward against the reference judge's on the
sampled replies, the canary rate, and the reward's correlation with reply length; each alarm's
step is marked on all three. The charts are drawn from numbers only; the alarm names are inserted
as text.

Examples:
    >>> import json, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "audit.jsonl")
    >>> lines = [{"kind": "config", "fraction": 0.25, "window": 3, "thresholds": {"gap": 0.3}}]
    >>> lines += [{"kind": "step", "step": s, "proxy": 0.5 + s / 10, "reference": 0.4, "gap": 0.1 + s / 10,
    ...            "length_corr": 0.2, "canary_rate": 0.0, "alarms": ["gap"] if s > 2 else []} for s in (1, 2, 3)]
    >>> _ = open(path, "w").write("".join(json.dumps(line) + "\\n" for line in lines))
    >>> log = read_audit(path)
    >>> len(log.steps), log.first_alarms
    (3, {'gap': 3})
    >>> audit_html(log).count("<svg")
    3
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from care_sdk.errors import InputError
from care_sdk.report.svg import _svg, _text

__all__ = ["AuditLog", "audit_html", "audit_summary", "line_chart_svg", "read_audit"]

_AXIS = "#8a94a6"
_ALARM = "#e53e3e"
SERIES_COLORS = {
    "proxy": "#5a67d8",
    "reference": "#20a070",
    "gap": "#d69e2e",
    "canary_rate": "#d64571",
    "length_corr": "#3867d6",
}
"""The colour of each charted series."""


@dataclass
class AuditLog:
    """An audit's JSONL log: its settings and one record per folded batch.

    Examples:
        >>> AuditLog().first_alarms
        {}
    """

    config: dict[str, Any] = field(default_factory=dict)
    """The ``config`` line: ``fraction``, ``window``, ``max_wait_s`` and ``thresholds``."""
    steps: list[dict[str, Any]] = field(default_factory=list)
    """The ``step`` records, in the order they were folded."""
    source: str | None = None
    """The file's name."""

    @property
    def first_alarms(self) -> dict[str, int]:
        """Each alarm kind and the first step it held at."""
        out: dict[str, int] = {}
        for record in self.steps:
            for kind in record.get("alarms") or ():
                out.setdefault(str(kind), int(record["step"]))
        return out


def read_audit(path: str | Path) -> AuditLog:
    """Read an audit log (``Audit(log_path=...)``).

    Raises:
        InputError: the file cannot be read, or a line is not a JSON object with a ``step`` (named by line).

    Examples:
        >>> import os, tempfile
        >>> bad = os.path.join(tempfile.mkdtemp(), "a.jsonl")
        >>> _ = open(bad, "w").write('{"kind": "step"}\\n')
        >>> read_audit(bad)
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: ...a.jsonl:1: an audit step record needs a numeric 'step'
    """
    location = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the audit log: {exc.strerror}", location=location) from exc
    log = AuditLog(source=Path(path).name)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"not JSON ({exc.msg})", location=f"{location}:{number}") from None
        if not isinstance(record, dict):
            raise InputError("an audit line must be a JSON object", location=f"{location}:{number}")
        if record.get("kind") == "config":
            log.config = record
        elif not isinstance(record.get("step"), (int, float)):
            raise InputError("an audit step record needs a numeric 'step'", location=f"{location}:{number}")
        else:
            log.steps.append(record)
    return log


def line_chart_svg(
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    label: str,
    y_range: tuple[float, float] = (0.0, 1.0),
    marks: Sequence[float] = (),
    threshold: float | None = None,
) -> str:
    """Lines of ``(step, value)`` points, one per named series, with vertical marks (alarm steps) and an
    optional dashed threshold.

    Examples:
        >>> svg = line_chart_svg({"proxy": [(1, 0.2), (2, 0.4)]}, label="x", marks=[2], threshold=0.5)
        >>> svg.count("<polyline"), svg.count('stroke-dasharray')
        (1, 2)
    """
    width, height, left, bottom, top, right = 380, 190, 38, 28, 10, 10
    points = [p for values in series.values() for p in values]
    if not points:
        return _svg(width, height, [_text(width / 2, height / 2, "nothing logged")], label)
    inner_w, inner_h = width - left - right, height - bottom - top
    lo, hi = y_range
    lo, hi = min(lo, *(v for _, v in points)), max(hi, *(v for _, v in points))
    x0, x1 = min(x for x, _ in points), max(x for x, _ in points)
    span_x, span_y = max(x1 - x0, 1e-9), max(hi - lo, 1e-9)

    def xy(x: float, y: float) -> tuple[float, float]:
        return left + inner_w * (x - x0) / span_x if x1 > x0 else left + inner_w / 2, top + inner_h * (hi - y) / span_y

    body = []
    for k in range(5):
        value = lo + span_y * k / 4
        y = xy(x0, value)[1]
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#e2e8f0"/>')
        body.append(_text(left - 6, y + 4, f"{value:.2g}", "end"))
    if threshold is not None and lo <= threshold <= hi:
        y = xy(x0, threshold)[1]
        body.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="{_ALARM}" '
            f'stroke-dasharray="4 3"><title>threshold {threshold:g}</title></line>'
        )
    for step in marks:
        x = xy(step, lo)[0]
        body.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + inner_h}" stroke="{_ALARM}" '
            f'stroke-dasharray="2 2"><title>alarm at step {step:g}</title></line>'
        )
    for name, values in series.items():
        color = SERIES_COLORS.get(name, _AXIS)
        coords = [xy(x, y) for x, y in values]
        if len(coords) > 1:
            body.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="2" '
                f'points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in coords)}"/>'
            )
        for (x, y), (step, value) in zip(coords, values, strict=True):
            body.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}">'
                f"<title>step {step:g}: {escape(name)} {value:.3f}</title></circle>"
            )
    body.append(_text(left, height - 10, f"step {x0:g}", "start"))
    body.append(_text(width - right, height - 10, f"{x1:g}", "end"))
    return _svg(width, height, body, label)


def _series(log: AuditLog, key: str) -> list[tuple[float, float]]:
    return [(float(r["step"]), float(r[key])) for r in log.steps if isinstance(r.get(key), (int, float))]


def audit_summary(log: AuditLog) -> dict[str, Any]:
    """The numbers the report states beside the charts: steps, sampled replies, last gap, first alarms.

    Examples:
        >>> audit_summary(AuditLog(steps=[{"step": 1, "sampled": 2, "gap": 0.1}]))["last_gap"]
        0.1
    """
    gaps = _series(log, "gap")
    return {
        "steps": len(log.steps),
        "sampled": sum(int(r.get("sampled") or 0) for r in log.steps),
        "fraction": log.config.get("fraction"),
        "last_gap": gaps[-1][1] if gaps else None,
        "first_alarms": log.first_alarms,
    }


def audit_html(log: AuditLog) -> str:
    """The report's audit section: a line of numbers and the three charts.

    Examples:
        >>> "no alarm" in audit_html(AuditLog(steps=[{"step": 1, "length_corr": 0.1}]))
        True
    """
    thresholds = log.config.get("thresholds") or {}
    marks = sorted(set(log.first_alarms.values()))
    summary = audit_summary(log)
    alarms = ", ".join(f"{kind} at step {step}" for kind, step in summary["first_alarms"].items()) or "no alarm"
    gap = summary["last_gap"]
    facts = [
        f"{summary['steps']} steps audited",
        f"{summary['sampled']} replies judged by the reference"
        + (f" (fraction {summary['fraction']:g})" if isinstance(summary["fraction"], (int, float)) else ""),
        f"last gap {gap:+.3f}" if gap is not None else "no gap measured",
        alarms,
    ]
    charts = [
        (
            "Training reward against the reference (sampled replies)",
            line_chart_svg(
                {k: _series(log, k) for k in ("proxy", "reference", "gap")},
                label="proxy and reference by step",
                marks=marks,
                threshold=thresholds.get("gap"),
                y_range=(0.0, 1.0),
            ),
            "proxy, reference, gap",
        ),
        (
            "Canary rate (canaries at or above the group median)",
            line_chart_svg(
                {"canary_rate": _series(log, "canary_rate")},
                label="canary rate by step",
                marks=marks,
                threshold=thresholds.get("canary_rate"),
            ),
            "canary_rate",
        ),
        (
            "Reward's correlation with reply length",
            line_chart_svg(
                {"length_corr": _series(log, "length_corr")},
                label="length correlation by step",
                marks=marks,
                threshold=thresholds.get("length_corr"),
                y_range=(-1.0, 1.0),
            ),
            "length_corr",
        ),
    ]
    cards = "".join(
        f'<div class="card"><h3>{escape(title)}</h3>{svg}<div class="legend">'
        + " ".join(
            f'<span><i style="background:{SERIES_COLORS[name]}"></i>{escape(name)}</span>' for name in names.split(", ")
        )
        + "</div></div>"
        for title, svg, names in charts
    )
    source = f" ({escape(log.source)})" if log.source else ""
    return (
        f'<section id="audit"><h2>Training audit{source}</h2>'
        f'<div class="sub">{" · ".join(escape(f) for f in facts)}</div>'
        f'<div class="grid3">{cards}</div></section>'
    )
