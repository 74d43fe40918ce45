"""A self-contained HTML report of scored dialogues (``care report``, ``care score --report``).

One file with its stylesheet, script, charts and data inline: it opens from disk with no network.
The overview shows counts, failures and their reasons, the reward distribution, mean weights, the
weights by turn and the lowest- and highest-scored turns; below it every dialogue, with each
assistant turn annotated by its rubric, criterion scores, reward and flags, filtered and sorted in
the page. With ``audit=`` (a training run's :class:`~care_sdk.audit.Audit` log), a section charts
the run's audit: proxy against reference reward over steps, canary rate, length correlation
(:mod:`care_sdk.report.audit`). Everything that came from a dialogue or a record is inserted as text.

Examples:
    >>> import tempfile, os, json
    >>> folder = tempfile.mkdtemp()
    >>> scores = os.path.join(folder, "scores.jsonl")
    >>> w = {"cognitive": 0.5, "affective": 0.25, "proactive": 0.25}
    >>> _ = open(scores, "w").write(json.dumps({"id": "a", "turn": 1, "reward": 0.5, "rubric": {"weights": w}}) + "\\n")
    >>> summary = write_report(scores, os.path.join(folder, "report.html"))
    >>> summary.turns, summary.failed
    (1, 0)
"""

from __future__ import annotations

import datetime as _dt
import gc
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from care_sdk.errors import InputError
from care_sdk.report.audit import audit_html, audit_summary, read_audit
from care_sdk.report.data import DialogueTexts, report_data, reward_histogram, turn_flags
from care_sdk.report.html import embed_json, render_html
from care_sdk.report.records import read_records

__all__ = [
    "DialogueTexts",
    "ReportSummary",
    "build_report",
    "embed_json",
    "render_html",
    "report_data",
    "reward_histogram",
    "turn_flags",
    "write_report",
]


@dataclass
class ReportSummary:
    """What :func:`write_report` wrote.

    Examples:
        >>> ReportSummary(path=Path("r.html"), dialogues=1, turns=2, failed=0, size=1000).ok
        True
    """

    path: Path
    """The HTML file."""
    dialogues: int
    """Dialogues in the report."""
    turns: int
    """Scored records (assistant turns) in the report."""
    failed: int
    """Turns without a reward."""
    size: int
    """File size in bytes."""
    issues: list[str] = field(default_factory=list)
    """Unreadable lines of the scores or dialogue file (skipped, listed in the report; the first 200)."""

    @property
    def ok(self) -> bool:
        """Whether every input line was usable."""
        return not self.issues


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: building millions of small acyclic objects otherwise
    triggers full collections again and again (a third of the time at 10,000 turns)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def build_report(
    scores: str | Path | Sequence[Mapping[str, Any]],
    *,
    dialogues: str | Path | None = None,
    title: str | None = None,
    audit: str | Path | None = None,
) -> tuple[str, dict[str, Any]]:
    """Build the report page in memory: ``(html, data)``.

    Args:
        scores: a ``care score`` output file, or its records.
        dialogues: the dialogue file that was scored, to show each reply in its conversation.
        title: the page title (default: from the scores file's name).
        audit: a training run's audit log (``Audit(log_path=...)``), drawn as charts; ``data["audit"]``
            then holds its summary.

    Raises:
        InputError: a file cannot be read.

    Examples:
        >>> page, data = build_report([{"id": "a", "turn": 1, "reward": None, "error": "evaluation failed: x"}])
        >>> data["overview"]["failed"], "<script" in page
        (1, True)
    """
    with _no_gc():
        return _build(scores, dialogues, title, audit)


def _build(
    scores: str | Path | Sequence[Mapping[str, Any]],
    dialogues: str | Path | None,
    title: str | None,
    audit: str | Path | None = None,
) -> tuple[str, dict[str, Any]]:
    issues: list[str] = []
    if isinstance(scores, (str, Path)):
        read = read_records(scores)
        records: Sequence[Mapping[str, Any]] = read.records
        issues += [str(issue) for issue in read.issues]
        source: str | None = Path(scores).name
    else:
        records, source = scores, None
    texts = None
    if dialogues is not None:
        texts = DialogueTexts.read(dialogues)
        issues += texts.issues
    from care_sdk import __version__

    data = report_data(
        records,
        texts,
        title=title or (f"CARE report: {source}" if source else "CARE report"),
        sources={"scores": source, "dialogues": Path(dialogues).name if dialogues is not None else None},
        issues=issues,
        meta={
            "generated": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "by care-sdk": __version__,
        },
    )
    section = ""
    if audit is not None:
        log = read_audit(audit)
        section = audit_html(log)
        data["audit"] = audit_summary(log)
    return render_html(data, section), data


def write_report(
    scores: str | Path | Sequence[Mapping[str, Any]],
    out: str | Path,
    *,
    dialogues: str | Path | None = None,
    title: str | None = None,
    audit: str | Path | None = None,
) -> ReportSummary:
    """Write the report of scored records to ``out`` (an ``.html`` file); see :func:`build_report`.

    Raises:
        InputError: a file cannot be read or ``out`` cannot be written.

    Examples:
        >>> import tempfile, os
        >>> out = os.path.join(tempfile.mkdtemp(), "r.html")
        >>> write_report([{"id": "a", "turn": 1, "reward": 0.25}], out).size > 10_000
        True
    """
    page, data = build_report(scores, dialogues=dialogues, title=title, audit=audit)
    path = Path(out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", location=str(path)) from exc
    overview = data["overview"]
    return ReportSummary(
        path=path,
        dialogues=overview["dialogues"],
        turns=overview["turns"],
        failed=overview["failed"],
        size=path.stat().st_size,
        issues=[*data["issues"]],
    )
