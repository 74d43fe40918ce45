"""Reading and writing JSONL, with one policy for bad lines.

Every reader in the package goes through :func:`iter_jsonl`: blank lines are skipped, a line
that is not a JSON object (or that a caller's check rejects) becomes a :class:`BadLine` naming
the file, the 1-based line number, the field and the reason. A caller either lets it raise
(the default) or passes ``on_bad`` to collect it and go on; nothing is dropped without a word.

Examples:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "r.jsonl")
    >>> write_jsonl(path, [{"id": "a"}, {"id": "b"}])
    2
    >>> _ = open(path, "a").write("[1, 2]\\n")
    >>> bad = []
    >>> [record["id"] for _, record in iter_jsonl(path, on_bad=bad.append)]
    ['a', 'b']
    >>> str(bad[0]).endswith("r.jsonl:line 3: expected a JSON object, got list")
    True
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from care_sdk.errors import InputError

__all__ = ["BadLine", "append_jsonl", "iter_jsonl", "read_jsonl", "replace_jsonl", "write_jsonl"]


class BadLine(InputError):
    """A JSONL line that could not be used: where it is, which field, and why.

    Examples:
        >>> err = BadLine("d.jsonl", 3, "missing", field="messages")
        >>> str(err), err.line, err.field
        ('d.jsonl:line 3: messages: missing', 3, 'messages')
    """

    def __init__(self, path: str | Path, line: int, reason: str, *, field: str | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        location = f"{self.path}:line {line}" + (f": {field}" if field else "")
        super().__init__(reason, location=location)


def iter_jsonl(
    path: str | Path,
    *,
    on_bad: Callable[[BadLine], None] | None = None,
    check: Callable[[dict[str, Any]], tuple[str | None, str] | None] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for each non-blank line of a JSONL file.

    Args:
        path: the file.
        on_bad: called with each bad line, which is then skipped; ``None`` raises it.
        check: returns ``(field, reason)`` for an object that is unusable, ``None`` for a good one.

    Raises:
        InputError: the file cannot be read.
        BadLine: a bad line, when ``on_bad`` is ``None``.

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.jsonl")
        >>> _ = open(path, "w").write('{"a": 1}\\n\\nnot json\\n')
        >>> bad = []
        >>> list(iter_jsonl(path, on_bad=bad.append)), [b.line for b in bad]
        ([(1, {'a': 1})], [3])
    """
    path = Path(path)
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", location=str(path)) from exc
    with handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            problem: tuple[str | None, str] | None
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                problem = None, f"not valid JSON: {exc.msg} at column {exc.colno}"
            else:
                if not isinstance(obj, dict):
                    problem = None, f"expected a JSON object, got {type(obj).__name__}"
                else:
                    problem = check(obj) if check is not None else None
            if problem is None:
                yield number, obj
                continue
            bad = BadLine(path, number, problem[1], field=problem[0])
            if on_bad is None:
                raise bad
            on_bad(bad)


def read_jsonl(path: str | Path, *, limit: int | None = None) -> list[dict[str, Any]]:
    """Every object of a JSONL file (at most ``limit``); the first bad line raises.

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "r.jsonl")
        >>> _ = write_jsonl(path, [{"n": 1}, {"n": 2}, {"n": 3}])
        >>> read_jsonl(path, limit=2)
        [{'n': 1}, {'n': 2}]
    """
    out: list[dict[str, Any]] = []
    if limit is not None and limit <= 0:
        return out
    for _, record in iter_jsonl(path):
        out.append(record)
        if limit is not None and len(out) >= limit:
            break
    return out


def append_jsonl(handle: IO[str], record: Mapping[str, Any]) -> None:
    """Write one object as one line to an open text file (UTF-8 text kept as is).

    Examples:
        >>> import io
        >>> out = io.StringIO()
        >>> append_jsonl(out, {"text": "ça va"})
        >>> out.getvalue()
        '{"text": "ça va"}\\n'
    """
    handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def write_jsonl(path: str | Path, records: Iterable[Mapping[str, Any]], *, append: bool = False) -> int:
    """Write objects one a line (appending when ``append``); returns how many were written.

    Examples:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "out.jsonl")
        >>> write_jsonl(path, [{"id": "a"}, {"id": "b"}]), write_jsonl(path, [{"id": "c"}], append=True)
        (2, 1)
        >>> [line for _, line in iter_jsonl(path)]
        [{'id': 'a'}, {'id': 'b'}, {'id': 'c'}]
    """
    count = 0
    with Path(path).open("a" if append else "w", encoding="utf-8") as handle:
        for record in records:
            append_jsonl(handle, record)
            count += 1
    return count


def replace_jsonl(path: str | Path, records: Iterable[Mapping[str, Any]]) -> int:
    """Rewrite a JSONL file atomically: the records go to a temporary file beside it, which then
    replaces it, so an interrupted rewrite leaves the old file whole (and no temporary file).
    Returns how many were written.

    Examples:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "r.jsonl")
        >>> write_jsonl(path, [{"id": "a"}, {"id": "b"}, {"id": "a"}])
        3
        >>> replace_jsonl(path, [{"id": "b"}, {"id": "a"}])
        2
        >>> [record["id"] for record in read_jsonl(path)], os.listdir(os.path.dirname(path))
        (['b', 'a'], ['r.jsonl'])
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        count = write_jsonl(tmp, records)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return count
