"""``care plot``: figures from ``care score`` or benchmark output.

Importing this module is light; matplotlib is imported when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_plot_commands"]


def _cmd_plot(args: argparse.Namespace) -> int:
    from care_lab.plots.plots import make_plots

    summary = make_plots(
        args.input,
        args.out,
        meta=args.meta,
        variant=args.variant,
        task=args.task,
        dialogue=args.dialogue,
        max_turn=args.max_turn,
    )
    for issue in summary.issues[:10]:
        print(f"care plot: skipped {issue}", file=sys.stderr)
    if len(summary.issues) > 10:
        print(f"care plot: ... and {len(summary.issues) - 10} more unusable lines", file=sys.stderr)
    for name, path in summary.figures.items():
        print(f"{name:<20} {path}")
    for name, reason in summary.skipped.items():
        print(f"{name:<20} not drawn: {reason}")
    print(f"{'index':<20} {summary.index}")
    return 0 if summary.figures and not summary.issues else 1


def add_plot_commands(subparsers: Any) -> None:
    """Register ``care plot`` on the ``care`` command's subparsers.

    Examples:
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> add_plot_commands(parser.add_subparsers(dest="command"))
        >>> parser.parse_args(["plot", "scores.jsonl", "--out", "figs"]).variant
        'care'
    """
    plot = subparsers.add_parser(
        "plot",
        help="draw figures (PNG) from care score or benchmark output",
        description=(
            "Draw the mean weight of each dimension by turn, the dominant dimension by user emotion "
            "(records with an 'emotion' field, or --meta), reward distributions per variant and one "
            "dialogue's per-criterion heatmap, plus an index.md linking them. Needs matplotlib "
            '(pip install "care-sdk[plot]").'
        ),
    )
    plot.add_argument("input", help="care score output or a benchmark records.jsonl")
    plot.add_argument("--out", required=True, help="output directory for the PNGs and index.md")
    plot.add_argument("--meta", help='JSONL of {"id": ..., "emotion": ...} per dialogue, for records without emotion')
    plot.add_argument(
        "--variant", default="care", help="benchmark records: variant of the weight figures (default: care)"
    )
    plot.add_argument("--task", help="benchmark records: keep only this task")
    plot.add_argument("--dialogue", help="dialogue id of the heatmap (default: the one with the most evaluated turns)")
    plot.add_argument("--max-turn", type=int, default=12, help="pool turns from this number on (default: %(default)s)")
    plot.set_defaults(func=_cmd_plot)
