"""What a data file holds, not where it lies: the fingerprints that decide a known file's role.

The published files of the shared corpora are listed in ``known_files.json`` (package data, next to
this module) by the sha256 of their bytes, with their role. A file that is not one of them byte for
byte is still recognised by its rows: every row of a non-``train`` file is kept as a 12-hex-digit
fingerprint of its canonical JSON (JSONL lines, JSON list elements, CSV rows as ``{column: text}``),
and a CSV whose rows name a dialogue (EmpatheticIntents' ``Dialog_ID``) is kept by those ids instead,
so a converted copy that keeps the ids is recognised too. A file's bytes are hashed once per process
(cached by path, modification time and size).

Rebuild the table from a data directory with ``python -m care_lab.data._content DATA_DIR``.

Examples:
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "mine.jsonl"
    >>> _ = f.write_text('{"b": 1, "a": "x"}\\n')
    >>> file_sha256(f)[:12], row_fingerprints(f) == {row_fingerprint({"a": "x", "b": 1})}
    ('4fafd2331918', True)
    >>> known_match(f) is None
    True
"""

from __future__ import annotations

import csv
import fnmatch
import functools
import hashlib
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "ID_FIELDS",
    "ROLE_ORDER",
    "KnownMatch",
    "build_known_files",
    "file_sha256",
    "id_fingerprint",
    "known_match",
    "row_fingerprint",
    "row_fingerprints",
]

_RESOURCE = "known_files.json"
_HEX = 12
ID_FIELDS = ("Dialog_ID", "dialog_id", "dialogue_id", "id")
"""Fields whose value (before any ``#``) is looked up among the known dialogue ids."""
_ID_COLUMNS = ("Dialog_ID",)
"""Columns of a published file that are kept as ids rather than rows (EmpatheticIntents)."""
ROLE_ORDER = ("test", "by-record", "eval-only", "selection", "train")
"""When a file's rows come from files of several roles, the first of these wins (the strictest)."""


@dataclass(frozen=True)
class KnownMatch:
    """How a file was recognised: its role, the published file it matches and how.

    Examples:
        >>> KnownMatch("test", "empatheticdialogues_intents/annotated_subset/sad.csv", "content").why
        'its content is the published empatheticdialogues_intents/annotated_subset/sad.csv'
    """

    role: str
    """The published file's role (see :data:`care_lab.data.roles.KNOWN_ROLES`)."""
    published: str
    """The published file's path under the data directory."""
    how: str
    """``content`` (the same bytes), ``rows`` (rows of it) or ``ids`` (its dialogue ids)."""

    @property
    def why(self) -> str:
        """The reason in words, for messages."""
        if self.how == "content":
            return f"its content is the published {self.published}"
        return f"it holds {self.how} of the published {self.published}"


@functools.lru_cache(maxsize=4096)
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes, computed once per process (cached by path, mtime and size).

    Examples:
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "x.txt"
        >>> _ = f.write_bytes(b"abc")
        >>> file_sha256(f)[:16]
        'ba7816bf8f01cfea'
    """
    stat = Path(path).stat()
    return _sha256(str(Path(path).absolute()), stat.st_mtime_ns, stat.st_size)


def row_fingerprint(row: Mapping[str, Any]) -> str:
    """A row's fingerprint: 12 hex digits of the sha256 of its canonical JSON.

    Examples:
        >>> row_fingerprint({"a": 1, "b": "x"}) == row_fingerprint({"b": "x", "a": 1})
        True
    """
    text = json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(("row:" + text).encode()).hexdigest()[:_HEX]


def id_fingerprint(value: str) -> str:
    """A dialogue id's fingerprint (12 hex digits).

    Examples:
        >>> len(id_fingerprint("hit:0_conv:1"))
        12
    """
    return hashlib.sha256(("id:" + value).encode()).hexdigest()[:_HEX]


def _rows(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a JSONL, JSON-list or CSV file (others have none); unreadable rows are skipped."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".jsonl":
            with path.open(encoding="utf-8") as handle:
                for line in handle:
                    try:
                        obj = json.loads(line) if line.strip() else None
                    except json.JSONDecodeError:
                        continue
                    if isinstance(obj, dict):
                        yield obj
        elif suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            yield from (obj for obj in (data if isinstance(data, list) else []) if isinstance(obj, dict))
        elif suffix == ".csv":
            with path.open(encoding="utf-8", newline="") as handle:
                yield from csv.DictReader(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error):
        return


def _ids(row: Mapping[str, Any]) -> set[str]:
    out = set()
    for name in ID_FIELDS:
        value = row.get(name)
        if isinstance(value, str) and value:
            out |= {id_fingerprint(value), id_fingerprint(value.split("#", 1)[0])}
    return out


@functools.lru_cache(maxsize=256)
def _fingerprints(path: str, mtime_ns: int, size: int) -> frozenset[str]:
    out: set[str] = set()
    for row in _rows(Path(path)):
        out.add(row_fingerprint(row))
        out |= _ids(row)
    return frozenset(out)


def row_fingerprints(path: str | Path) -> frozenset[str]:
    """Every fingerprint of a file's rows: each row's, and each dialogue id it names (cached like the hash).

    Examples:
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "x.jsonl"
        >>> _ = f.write_text('{"id": "hit:1_conv:2#3"}\\n')
        >>> id_fingerprint("hit:1_conv:2") in row_fingerprints(f)
        True
    """
    stat = Path(path).stat()
    return _fingerprints(str(Path(path).absolute()), stat.st_mtime_ns, stat.st_size)


@dataclass(frozen=True)
class _Table:
    by_sha: dict[str, tuple[str, str]]
    by_print: dict[str, list[tuple[str, str, str]]]


@functools.cache
def _table() -> _Table:
    text = resources.files("care_lab.data").joinpath(_RESOURCE).read_text(encoding="utf-8")
    by_sha: dict[str, tuple[str, str]] = {}
    by_print: dict[str, list[tuple[str, str, str]]] = {}
    for entry in json.loads(text)["files"]:
        by_sha[entry["sha256"]] = (entry["role"], entry["path"])
        for how in ("rows", "ids"):
            packed = entry.get(how, "")
            for i in range(0, len(packed), _HEX):
                by_print.setdefault(packed[i : i + _HEX], []).append((entry["role"], entry["path"], how))
    return _Table(by_sha, by_print)


def known_match(path: str | Path) -> KnownMatch | None:
    """The published file ``path`` is, or whose rows or dialogue ids it holds (``None``: none).

    A file whose bytes are a published file's takes that file's role; else a file holding rows or
    dialogue ids of published files takes the strictest of their roles (:data:`ROLE_ORDER`).

    Examples:
        >>> import os, pathlib
        >>> root = pathlib.Path(os.environ.get("CARE_DATA_DIR", "/no-data"))
        >>> if (root / "esconv").is_dir():
        ...     assert known_match(root / "esconv" / "valid.jsonl").role == "selection"
        >>> known_match("/nowhere/x.jsonl") is None
        True
    """
    path = Path(path)
    if not path.is_file():
        return None
    table = _table()
    known = table.by_sha.get(file_sha256(path))
    if known is not None:
        return KnownMatch(known[0], known[1], "content")
    hits = [hit for fp in row_fingerprints(path) for hit in table.by_print.get(fp, ())]
    if not hits:
        return None
    role, published, how = min(hits, key=lambda h: (ROLE_ORDER.index(h[0]), h[1], h[2]))
    return KnownMatch(role, published, how)


def build_known_files(root: str | Path, patterns: Mapping[str, str]) -> dict[str, Any]:
    """The table of published files under a data directory: each file a pattern gives a role.

    Non-``train`` JSONL, JSON-list and CSV files keep their rows' fingerprints (or, for a CSV with a
    ``Dialog_ID`` column, its dialogue ids); ``train`` files and other formats keep their hash only.

    Examples:
        >>> import tempfile, pathlib
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> (root / "c").mkdir(); _ = (root / "c" / "t.jsonl").write_text('{"a": 1}\\n')
        >>> entry = build_known_files(root, {"c/*.jsonl": "test"})["files"][0]
        >>> entry["path"], entry["role"], len(entry["rows"])
        ('c/t.jsonl', 'test', 12)
    """
    root = Path(root)
    files = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        relative = path.relative_to(root).as_posix()
        role = next((r for pattern, r in patterns.items() if fnmatch.fnmatchcase(relative, pattern)), None)
        if role is None or path.name.startswith(".") or path.name in ("PROVENANCE.md", "README.md"):
            continue
        entry: dict[str, Any] = {"path": relative, "role": role, "sha256": file_sha256(path)}
        if role != "train":
            rows = list(_rows(path))
            if rows and all(c in rows[0] for c in _ID_COLUMNS):
                ids = {str(r[c]) for r in rows for c in _ID_COLUMNS if r.get(c)}
                entry["ids"] = "".join(sorted(id_fingerprint(i) for i in ids))
            elif rows:
                entry["rows"] = "".join(sorted({row_fingerprint(r) for r in rows}))
        files.append(entry)
    about = (
        "The published data files by sha256 of their bytes, with their role; rows: 12-hex fingerprints of each "
        "row's canonical JSON, ids: of each dialogue id (care_lab.data._content). Rebuilt with "
        "python -m care_lab.data._content DATA_DIR."
    )
    return {"about": about, "files": files}


def main(argv: list[str] | None = None) -> int:
    """Print the table of the data directory given (``python -m care_lab.data._content DATA_DIR``)."""
    from care_lab.data.roles import KNOWN_ROLES

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        usage = "usage: python -m care_lab.data._content DATA_DIR > lab/src/care_lab/data/known_files.json"
        print(usage, file=sys.stderr)
        return 2
    table = build_known_files(args[0], KNOWN_ROLES)
    print(json.dumps(table, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
