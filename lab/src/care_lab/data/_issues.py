"""Load issues: what a loader found wrong, and where."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar, overload

from care_sdk.errors import InputError

__all__ = ["LoadIssue", "Loaded"]

T = TypeVar("T")


@dataclass(frozen=True)
class LoadIssue:
    """One problem found in an input file, with its place.

    ``position`` is ``"line N"`` for JSONL and CSV files (1-based, as editors count) or
    ``"[i]"`` for the i-th element of a JSON list; ``field`` is the path inside the record.
    ``dropped`` says whether the loader left the record (or utterance) out because of it.

    Examples:
        >>> issue = LoadIssue(path="train.jsonl", position="line 3", field="dialog[2].speaker",
        ...                   message="unknown speaker 'bot'", dropped=True)
        >>> str(issue)
        "train.jsonl:line 3: dialog[2].speaker: unknown speaker 'bot' (dropped)"
    """

    path: str
    """The file (its name as given to the loader)."""
    position: str
    """Where in the file: ``line N`` or ``[i]``."""
    field: str | None
    """The field inside the record, e.g. ``dialog[4].strategy``; ``None`` for the whole record."""
    message: str
    """What is wrong."""
    dropped: bool = False
    """Whether the record or utterance was left out."""

    @property
    def location(self) -> str:
        """``path:position: field``, the form :class:`~care_sdk.errors.InputError` uses."""
        loc = f"{self.path}:{self.position}"
        return f"{loc}: {self.field}" if self.field else loc

    def __str__(self) -> str:
        return f"{self.location}: {self.message}" + (" (dropped)" if self.dropped else "")

    def to_error(self) -> InputError:
        """The issue as an :class:`~care_sdk.errors.InputError` (what strict mode raises).

        Examples:
            >>> LoadIssue("a.json", "[0]", "dialog", "missing").to_error().location
            'a.json:[0]: dialog'
        """
        return InputError(self.message, location=self.location)


@dataclass
class Loaded(Generic[T]):
    """The records a loader read, and the issues it found on the way.

    Behaves as a read-only sequence of records.

    Examples:
        >>> loaded = Loaded(records=[1, 2], issues=[])
        >>> len(loaded), loaded[0], loaded.ok
        (2, 1, True)
    """

    records: list[T]
    """The records, in file order."""
    issues: list[LoadIssue] = field(default_factory=list)
    """Every issue found, in file order."""

    @property
    def ok(self) -> bool:
        """Whether no issue was found."""
        return not self.issues

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[T]:
        return iter(self.records)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        return self.records[index]

    def summary(self, limit: int = 10) -> str:
        """A short text: counts and the first ``limit`` issues.

        Examples:
            >>> Loaded(records=[1], issues=[]).summary()
            '1 records, 0 issues'
        """
        lines = [f"{len(self.records)} records, {len(self.issues)} issues"]
        lines += [f"  {issue}" for issue in self.issues[:limit]]
        if len(self.issues) > limit:
            lines.append(f"  ... and {len(self.issues) - limit} more")
        return "\n".join(lines)


class IssueLog:
    """Collects issues for one file; raises the first one in strict mode."""

    def __init__(self, path: Path | str, *, strict: bool) -> None:
        self.name = str(path)
        self.strict = strict
        self.issues: list[LoadIssue] = []

    def add(self, position: str, field: str | None, message: str, *, dropped: bool = False) -> None:
        issue = LoadIssue(self.name, position, field, message, dropped)
        if self.strict:
            raise issue.to_error()
        self.issues.append(issue)


def merge(parts: Sequence[Loaded[T]]) -> Loaded[T]:
    """Concatenate several loads (e.g. the splits of one corpus)."""
    out: Loaded[T] = Loaded(records=[], issues=[])
    for part in parts:
        out.records.extend(part.records)
        out.issues.extend(part.issues)
    return out
