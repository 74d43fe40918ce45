"""Low-level readers shared by the loaders: JSONL lines, JSON lists, CSV rows, with positions."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from care_lab.data._issues import IssueLog
from care_sdk.errors import InputError
from care_sdk.jsonl import BadLine
from care_sdk.jsonl import iter_jsonl as read_lines

__all__ = ["iter_csv", "iter_json_list", "iter_jsonl", "require_file"]


def require_file(path: Path) -> Path:
    """Raise a clear :class:`InputError` when ``path`` is not a readable file."""
    if not path.is_file():
        raise InputError("no such file", location=str(path))
    return path


def iter_jsonl(path: Path, log: IssueLog) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``("line N", object)`` for each non-empty line; bad lines become issues (dropped)."""

    def bad_line(bad: BadLine) -> None:
        log.add(f"line {bad.line}", bad.field, bad.reason, dropped=True)

    for number, obj in read_lines(require_file(path), on_bad=bad_line):
        yield f"line {number}", obj


def iter_json_list(path: Path, log: IssueLog) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``("[i]", object)`` for each element of a JSON list file."""
    try:
        data = json.loads(require_file(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", location=f"{path}:line {exc.lineno}") from exc
    if not isinstance(data, list):
        raise InputError(f"expected a JSON list of dialogues, got {type(data).__name__}", location=str(path))
    for i, obj in enumerate(data):
        pos = f"[{i}]"
        if not isinstance(obj, dict):
            log.add(pos, None, f"expected a JSON object, got {type(obj).__name__}", dropped=True)
            continue
        yield pos, obj


def iter_csv(path: Path, log: IssueLog, required: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    """Yield ``("line N", row)`` for each CSV row (N is the row's first line in the file)."""
    with require_file(path).open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"missing column(s) {', '.join(missing)}", location=f"{path}:line 1")
        start = reader.line_num + 1
        for row in reader:
            yield f"line {start}", row
            start = reader.line_num + 1
