"""Figures from scored records: weights by turn, dominant dimension by emotion, rewards per variant,
and one dialogue's per-criterion scores. PNG via matplotlib (the ``plot`` extra).

Examples:
    >>> import tempfile, os, json
    >>> d = tempfile.mkdtemp()
    >>> w = {"cognitive": 0.5, "affective": 0.3, "proactive": 0.2}
    >>> recs = [{"id": "a", "turn": t, "reward": 0.5, "emotion": "fear", "rubric": {"weights": w}} for t in (1, 3)]
    >>> _ = open(os.path.join(d, "s.jsonl"), "w").write("\\n".join(json.dumps(r) for r in recs))
    >>> summary = make_plots(os.path.join(d, "s.jsonl"), os.path.join(d, "figs"))
    >>> sorted(summary.figures)
    ['dominant_by_emotion', 'reward_by_variant', 'weights_by_turn']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from care_sdk.errors import InputError, MissingDependencyError
from care_sdk.report.records import (
    DIMS,
    HeatmapData,
    Record,
    dominant_by_emotion,
    heatmap_data,
    read_meta,
    read_records,
    rewards_by_variant,
    weights_by_turn,
    with_meta,
)
from care_sdk.variants import VARIANT_LABELS

__all__ = ["COLORS", "PlotSummary", "make_plots"]

COLORS = {"cognitive": "#1f77b4", "affective": "#d62728", "proactive": "#2ca02c"}
"""One color per dimension, used by every figure."""
VARIANT_TITLES = {**VARIANT_LABELS, "reward": "reward"}
TASK_ORDER = ("", "alignment", "pairwise", "experts", "success", "simulated")
DESCRIPTIONS = {
    "weights_by_turn": "Mean weight of each dimension by supporter turn (shaded: ±1 standard error).",
    "dominant_by_emotion": "Share of turns whose top-weighted dimension is each dimension, per user emotion.",
    "reward_by_variant": "Reward distribution of each variant (box: quartiles; diamond: mean).",
    "criteria_heatmap": "Per-criterion scores (1-5) of one dialogue, turn by turn.",
}


@dataclass
class PlotSummary:
    """What :func:`make_plots` wrote.

    Examples:
        >>> PlotSummary().figures
        {}
    """

    figures: dict[str, Path] = field(default_factory=dict)
    """Figure name -> PNG path."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Figure name -> why it was not drawn."""
    index: Path | None = None
    """The markdown index."""
    issues: list[InputError] = field(default_factory=list)
    """Input lines that could not be used."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise MissingDependencyError("matplotlib", extra="plot") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


def plot_weights_by_turn(records: Sequence[Record], path: Path, *, max_turn: int = 12, title: str = "") -> Path | None:
    """Mean dimension weight by supporter turn (the paper's figure 3); ``None`` without rubrics.

    Examples:
        >>> plot_weights_by_turn([], Path("w.png")) is None
        True
    """
    data = weights_by_turn(records, max_turn=max_turn)
    if not data:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    turns = list(data)
    for dim in DIMS:
        means = [data[t][dim][0] for t in turns]
        errors = [data[t][dim][1] for t in turns]
        ax.plot(turns, means, marker="o", color=COLORS[dim], label=dim)
        ax.fill_between(
            turns,
            [m - e for m, e in zip(means, errors, strict=True)],
            [m + e for m, e in zip(means, errors, strict=True)],
            color=COLORS[dim],
            alpha=0.15,
        )
    labels = [f"{t}{'+' if t == max_turn and t == turns[-1] else ''}\nn={data[t][DIMS[0]][2]}" for t in turns]
    ax.set_xticks(turns, labels, fontsize=8)
    ax.axhline(1 / 3, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("supporter turn")
    ax.set_ylabel("mean weight")
    ax.set_ylim(0, max(0.7, max(data[t][d][0] + data[t][d][1] for t in turns for d in DIMS) + 0.05))
    ax.set_title(title or "Dimension weights by turn")
    ax.legend(loc="upper right", frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def plot_dominant_by_emotion(records: Sequence[Record], path: Path, *, title: str = "") -> Path | None:
    """Dominant dimension by user emotion (the paper's figure 4); ``None`` without emotion labels.

    Examples:
        >>> plot_dominant_by_emotion([{"id": "a", "turn": 1}], Path("d.png")) is None
        True
    """
    data = dominant_by_emotion(records)
    if not data:
        return None
    plt = _pyplot()
    emotions = list(data)[::-1]  # largest group on top
    fig, ax = plt.subplots(figsize=(8.5, max(3.2, 0.45 * len(emotions) + 1.8)))
    left = [0.0] * len(emotions)
    for dim in DIMS:
        shares = [data[e][0][dim] for e in emotions]
        bars = ax.barh(range(len(emotions)), shares, left=left, color=COLORS[dim], label=dim)
        for bar, share in zip(bars, shares, strict=True):
            if share >= 0.08:
                ax.text(
                    bar.get_x() + bar.get_width() / 2,
                    bar.get_y() + bar.get_height() / 2,
                    f"{share:.0%}",
                    ha="center",
                    va="center",
                    color="white",
                    fontsize=8,
                )
        left = [a + b for a, b in zip(left, shares, strict=True)]
    ax.set_yticks(range(len(emotions)), [f"{e} (n={data[e][1]})" for e in emotions])
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of turns where the dimension has the largest weight")
    ax.set_title(title or "Dominant dimension by user emotion")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return _save(fig, path)


def plot_reward_by_variant(records: Sequence[Record], path: Path, *, title: str = "") -> Path | None:
    """Reward distribution per variant, one panel per task; ``None`` without rewards.

    Examples:
        >>> plot_reward_by_variant([{"id": "a", "turn": 1, "reward": None}], Path("r.png")) is None
        True
    """
    grouped = rewards_by_variant(records)
    order = sorted(grouped, key=lambda t: (TASK_ORDER.index(t) if t in TASK_ORDER else len(TASK_ORDER), t))
    data = {t: grouped[t] for t in order if grouped[t]}
    if not data:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(data), figsize=(max(5.0, 3.6 * len(data)), 4.2), sharey=True, squeeze=False)
    for ax, (task, by_variant) in zip(axes[0], data.items(), strict=True):
        order = [v for v in VARIANT_TITLES if v in by_variant] + sorted(
            v for v in by_variant if v not in VARIANT_TITLES
        )
        values = [by_variant[v] for v in order]
        ax.boxplot(
            values, showmeans=True, meanprops={"marker": "D", "markerfacecolor": "black", "markeredgecolor": "black"}
        )
        ax.set_xticks(
            range(1, len(order) + 1),
            [f"{VARIANT_TITLES.get(v, v)}\nn={len(by_variant[v])}" for v in order],
            fontsize=8,
            rotation=0,
        )
        ax.set_title(task or "all turns", fontsize=10)
        ax.set_ylim(-0.03, 1.03)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("reward")
    fig.suptitle(title or "Reward distribution by variant")
    return _save(fig, path)


def plot_criteria_heatmap(data: HeatmapData, path: Path, *, title: str = "") -> Path:
    """One dialogue's per-criterion scores as a heatmap (rows: criteria, columns: turns).

    Examples:
        >>> import tempfile
        >>> data = HeatmapData("d", [1], ["cognitive 1"], [[4.0]], [dict.fromkeys(DIMS, 1 / 3)], [[]], [0.75])
        >>> plot_criteria_heatmap(data, Path(tempfile.mkdtemp()) / "h.png").name
        'h.png'
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.0 * len(data.turns) + 2.8), 0.45 * len(data.rows) + 2.2))
    nan = float("nan")
    grid = [[nan if s is None else s for s in row] for row in data.scores]
    image = ax.imshow(grid, cmap="RdYlGn", vmin=1, vmax=5, aspect="auto")
    for r, row in enumerate(data.scores):
        for c, score in enumerate(row):
            if score is not None:
                ax.text(c, r, f"{score:g}", ha="center", va="center", fontsize=9)
    columns = []
    for turn, weights, reward in zip(data.turns, data.weights, data.rewards, strict=True):
        w = "/".join(f"{weights[d]:.2f}" for d in DIMS)
        columns.append(f"turn {turn}\nw {w}\nr {'-' if reward is None else f'{reward:.2f}'}")
    ax.set_xticks(range(len(data.turns)), columns, fontsize=7)
    ax.set_yticks(range(len(data.rows)), data.rows)
    for label in ax.get_yticklabels():
        label.set_color(COLORS[label.get_text().split()[0]])
    fig.colorbar(image, ax=ax, label="score (1-5)", fraction=0.04)
    name = data.dialogue if len(data.dialogue) <= 32 else data.dialogue[:29] + "..."
    ax.set_title(
        title or f"Criterion scores, dialogue {name}\n(w = cognitive/affective/proactive weights)", fontsize=10
    )
    return _save(fig, path)


def _filter(records: Sequence[Record], variant: str | None, task: str | None) -> list[Record]:
    out = list(records)
    if task is not None:
        out = [r for r in out if r.get("task") == task]
    if variant is not None and any("variant" in r for r in out):
        out = [r for r in out if r.get("variant") == variant]
    return out


def make_plots(
    records_path: str | Path,
    out_dir: str | Path,
    *,
    meta: str | Path | None = None,
    variant: str = "care",
    task: str | None = None,
    dialogue: str | None = None,
    max_turn: int = 12,
) -> PlotSummary:
    """Draw every figure the records support and write ``index.md`` linking them.

    Args:
        records_path: ``care score`` output or a benchmark's ``records.jsonl``.
        out_dir: where the PNGs and the index go (created).
        meta: optional JSONL of ``{"id", "emotion"}`` per dialogue, for records without ``emotion``.
        variant: for benchmark records, the variant whose rubrics the weight figures and heatmap show.
        task: keep only records of this benchmark task.
        dialogue: the dialogue of the heatmap (default: the one with the most evaluated turns).
        max_turn: pool turns from this number on in the weights-by-turn figure.

    Raises:
        InputError: the records file cannot be read or has no usable record; a bad meta line.
        MissingDependencyError: matplotlib is not installed.

    Examples:
        >>> import tempfile, os, json
        >>> d = tempfile.mkdtemp()
        >>> record = {"id": "a", "turn": 1, "reward": 0.5, "rubric": {"weights": {"cognitive": 1, "affective": 0,
        ...           "proactive": 0}}}
        >>> _ = open(os.path.join(d, "s.jsonl"), "w").write(json.dumps(record) + "\\n")
        >>> summary = make_plots(os.path.join(d, "s.jsonl"), os.path.join(d, "figs"))
        >>> summary.skipped["dominant_by_emotion"]
        'no record with a rubric has an emotion label (use --meta)'
    """
    _pyplot()  # fail early with the install hint
    loaded = read_records(records_path)
    records = loaded.records
    if meta is not None:
        records = with_meta(records, read_meta(meta))
    if task is not None and not any(r.get("task") == task for r in records):
        raise InputError(f"no record of task {task!r}", location=str(records_path))
    if not records:
        raise InputError("no usable record", location=str(records_path))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = PlotSummary(issues=loaded.issues)
    chosen = _filter(records, variant, task)
    label = VARIANT_TITLES.get(variant, variant) if any("variant" in r for r in records) else ""
    suffix = f" ({label})" if label else ""

    drawn = plot_weights_by_turn(
        chosen, out / "weights_by_turn.png", max_turn=max_turn, title=f"Dimension weights by turn{suffix}"
    )
    _note(summary, "weights_by_turn", drawn, "no record has a rubric")
    drawn = plot_dominant_by_emotion(
        chosen, out / "dominant_by_emotion.png", title=f"Dominant dimension by user emotion{suffix}"
    )
    _note(summary, "dominant_by_emotion", drawn, "no record with a rubric has an emotion label (use --meta)")
    all_variants = [r for r in records if task is None or r.get("task") == task]
    drawn = plot_reward_by_variant(all_variants, out / "reward_by_variant.png")
    _note(summary, "reward_by_variant", drawn, "no record has a reward")
    heat = heatmap_data(chosen, dialogue)
    if heat is None:
        reason = f"dialogue {dialogue!r} has no evaluated turn" if dialogue else "no record has an evaluation"
        _note(summary, "criteria_heatmap", None, reason)
    else:
        _note(summary, "criteria_heatmap", plot_criteria_heatmap(heat, out / "criteria_heatmap.png"), "")
    summary.index = _write_index(out, Path(records_path), summary, heat, label)
    return summary


def _note(summary: PlotSummary, name: str, path: Path | None, reason: str) -> None:
    if path is None:
        summary.skipped[name] = reason
    else:
        summary.figures[name] = path


def _write_index(out: Path, source: Path, summary: PlotSummary, heat: HeatmapData | None, label: str) -> Path:
    lines = [f"# Figures from `{source.name}`", ""]
    if label:
        lines += [f"Weight figures and heatmap: variant **{label}**.", ""]
    for name, path in summary.figures.items():
        lines += [f"## {name.replace('_', ' ')}", "", DESCRIPTIONS[name], "", f"![{name}]({path.name})", ""]
        if name == "criteria_heatmap" and heat is not None:
            lines += _criteria_table(heat)
    if summary.skipped:
        lines += ["## Not drawn", ""]
        lines += [f"- {name.replace('_', ' ')}: {reason}" for name, reason in summary.skipped.items()]
        lines.append("")
    if summary.issues:
        lines += ["## Input lines not used", ""]
        lines += [f"- {issue}" for issue in summary.issues[:20]]
        if len(summary.issues) > 20:
            lines.append(f"- ... and {len(summary.issues) - 20} more")
        lines.append("")
    path = out / "index.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _criteria_table(heat: HeatmapData) -> list[str]:
    lines = [f"Criteria of dialogue `{heat.dialogue}`:", "", "| turn | criterion | text |", "|---|---|---|"]
    for turn, texts in zip(heat.turns, heat.criteria, strict=True):
        for row, text in texts:
            lines.append(f"| {turn} | {row} | {text.replace('|', '/')} |")
    return [*lines, ""]


def summary_counts(summary: PlotSummary) -> Mapping[str, int]:
    """Counts for a one-line report.

    Examples:
        >>> summary_counts(PlotSummary())
        {'figures': 0, 'skipped': 0, 'issues': 0}
    """
    return {"figures": len(summary.figures), "skipped": len(summary.skipped), "issues": len(summary.issues)}
