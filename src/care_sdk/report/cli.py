"""``care report``: a self-contained HTML report of ``care score`` output.

Importing this module is light; the report code is imported when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_report_commands", "print_report_summary"]


def print_report_summary(summary: Any, *, prog: str = "care report", issues: bool = True) -> None:
    """Print where a report went, its size and counts, and (``issues``) the first unreadable lines to stderr.

    Examples:
        >>> from pathlib import Path
        >>> from care_sdk.report import ReportSummary
        >>> print_report_summary(ReportSummary(Path("r.html"), dialogues=2, turns=5, failed=1, size=250_000))
        report: r.html (244 KiB; 2 dialogues, 5 turns, 1 failed)
    """
    for issue in summary.issues[:10] if issues else []:
        print(f"{prog}: skipped {issue}", file=sys.stderr)
    if issues and len(summary.issues) > 10:
        print(f"{prog}: ... and {len(summary.issues) - 10} more unusable lines", file=sys.stderr)
    print(
        f"report: {summary.path} ({summary.size / 1024:.0f} KiB; {summary.dialogues} dialogues, "
        f"{summary.turns} turns, {summary.failed} failed)"
    )


def _cmd_report(args: argparse.Namespace) -> int:
    from care_sdk.report import write_report

    if args.input is None and args.audit is None:
        print("care report: give a scores file, an --audit log, or both", file=sys.stderr)
        return 2
    scores = args.input if args.input is not None else []
    summary = write_report(scores, args.out, dialogues=args.dialogues, title=args.title, audit=args.audit)
    print_report_summary(summary)
    return 0 if summary.ok else 1


def add_report_commands(subparsers: Any) -> None:
    """Register ``care report`` on the ``care`` command's subparsers.

    Examples:
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> add_report_commands(parser.add_subparsers(dest="command"))
        >>> parser.parse_args(["report", "scores.jsonl", "--out", "r.html"]).dialogues is None
        True
    """
    report = subparsers.add_parser(
        "report",
        help="write a self-contained HTML report of care score output",
        description=(
            "Write one HTML file (no network needed to open it) with an overview of the scored turns "
            "and every dialogue with each assistant turn annotated by its rubric, criterion scores and "
            "reward, filtered and sorted in the page. Pass the scored dialogue file to show the replies, "
            "and a training run's audit log (--audit) to chart proxy against reference reward, canary "
            "rate and length correlation over the steps."
        ),
    )
    report.add_argument("input", nargs="?", help="care score output (JSONL, one record per assistant turn)")
    report.add_argument("--dialogues", help="the dialogue JSONL that was scored, to show the conversations")
    report.add_argument("--out", required=True, help="the HTML file to write")
    report.add_argument("--title", help="page title (default: from the input file name)")
    report.add_argument(
        "--audit", help="a training run's audit log (JSONL written by care_sdk.audit.Audit), drawn as charts"
    )
    report.set_defaults(func=_cmd_report)
