"""What ``care train build-data`` reports: :class:`BuildReport`, the counts every builder of
training data (teacher targets, template targets, evaluator targets, preference pairs) adds to.

Examples:
    >>> report = BuildReport()
    >>> report.pairs["kept:train"] += 3
    >>> report.to_json()["pairs"]
    {'kept:train': 3}
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from care_lab.training.prompts import DATA_PROMPT_VERSION

__all__ = ["BuildReport"]


@dataclass
class BuildReport:
    """Counts of everything build-data kept, rejected and why.

    Examples:
        >>> r = BuildReport()
        >>> r.sft["kept"] += 2
        >>> "kept" in r.table()
        True
    """

    sft: Counter[str] = field(default_factory=Counter)
    """SFT target counts: candidates, rejections by reason, kept per split."""
    pairs: Counter[str] = field(default_factory=Counter)
    """Preference-pair counts: candidates, rejections by reason, kept per source and split."""
    load_issues: list[str] = field(default_factory=list)
    """Issues the loaders reported (file, position, field)."""
    judge_reasons: list[str] = field(default_factory=list)
    """A sample of the judges' rejection reasons."""
    files: dict[str, int] = field(default_factory=dict)
    """Each written file and its number of records."""
    lengths: dict[str, dict[str, float]] = field(default_factory=dict)
    """Length balance of the kept pairs per origin (:func:`~care_lab.training.pairs.length_balance`)."""

    def table(self) -> str:
        """The counts as a plain-text table."""
        lines = [f"{'stage':<6} {'count':<36} value", f"{'-' * 6} {'-' * 36} -----"]
        for name, counter in (("sft", self.sft), ("pairs", self.pairs)):
            for key in sorted(counter):
                lines.append(f"{name:<6} {key:<36} {counter[key]}")
        for path, n in self.files.items():
            lines.append(f"file   {path:<36} {n}")
        for origin, balance in self.lengths.items():
            shown = ", ".join(f"{k} {v}" for k, v in balance.items())
            lines.append(f"length {origin:<36} {shown}")
        if self.load_issues:
            lines.append(f"load issues: {len(self.load_issues)} (first: {self.load_issues[0]})")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the report."""
        return {
            "sft": dict(self.sft),
            "pairs": dict(self.pairs),
            "load_issues": self.load_issues,
            "judge_reasons": self.judge_reasons[:50],
            "files": self.files,
            "lengths": self.lengths,
            "prompt_version": DATA_PROMPT_VERSION,
        }
