"""Results files and the test-read ledger: every quoted number names its data, role and test reads.

A ``test`` set is read once per shipped artifact, after the rule that governs the read is
committed. :func:`record_test_read` is the one way to read one for evaluation: it adds an entry to
a JSON ledger (``benchmarks/results/test_reads.json`` in this repository; ``$CARE_TEST_READS`` or
``ledger=`` elsewhere) holding what proves the read's order and scope:

- ``time`` (UTC) and ``commit`` (HEAD), and whether the working tree was clean;
- ``rule``, ``rule_sha256`` and ``rule_commit``: the rule file, which must be committed and
  unchanged (a read with no committed rule is refused);
- ``artifact`` and ``artifact_files``: the identity of the artifact from the bytes of every model
  file it loads, and each file's sha256;
- ``items`` and ``items_sha256``: how many items it reads and the hash of their ids, in order;
- ``records``, added by :func:`attach_records`: the per-item records of the read (a committed
  ``.jsonl.gz`` and its sha256, or, when too large, their sha256 and the command that regenerates
  them from the committed artifact).

A read whose model files are all among an earlier read's (the same models read again) is refused
unless ``force=True``; a forced read is marked ``forced``, and a read of the labels alone, with no
model, ``labels_only``. The entry is what :func:`care_lab.data.roles.require_role` and the test
loaders ask for (:func:`check_test_read`). :func:`write_results` writes the small JSON file a
benchmark command leaves behind: the command, the data, its role, the test reads (with their
``forced`` marks), the metrics and the same run's baselines.

Examples:
    >>> import pathlib, subprocess, tempfile
    >>> repo = pathlib.Path(tempfile.mkdtemp())
    >>> _ = subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    >>> _ = (repo / "rule.md").write_text("# Rule\\n")
    >>> _ = (repo / "model.gguf").write_bytes(b"weights")
    >>> git = ["git", "-C", str(repo), "-c", "user.name=x", "-c", "user.email=x@x"]
    >>> _ = subprocess.run([*git, "add", "."], check=True)
    >>> _ = subprocess.run([*git, "commit", "-qm", "rule"], check=True)
    >>> read = record_test_read("empatheticdialogues_intents", artifact="bundled", command="care bench x",
    ...                         rule=repo / "rule.md", artifact_files=[repo / "model.gguf"], items=["a", "b"],
    ...                         ledger=repo / "test_reads.json")
    >>> read.reads, read.artifact, read.items, test_reads("empatheticdialogues_intents", repo / "test_reads.json")
    (1, 'bundled@9a129038d9a0', 2, 1)
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from care_lab.data._content import file_sha256
from care_lab.data._git import committed_file
from care_lab.data.roles import data_role, normalise_role
from care_sdk.errors import InputError

__all__ = [
    "LEDGER_ENV",
    "RECORDS_LIMIT",
    "TEST_SETS",
    "TestRead",
    "artifact_identity",
    "attach_records",
    "check_test_read",
    "items_sha256",
    "ledger_entry",
    "ledger_path",
    "record_test_read",
    "set_items",
    "test_reads",
    "write_results",
]

LEDGER_ENV = "CARE_TEST_READS"
"""The environment variable naming the test-read ledger file."""

RECORDS_LIMIT = 4 * 1024 * 1024
"""The largest compressed per-item records file :func:`attach_records` commits (bytes)."""

_DEFAULT_LEDGER = Path("benchmarks") / "results" / "test_reads.json"

TEST_SETS: dict[str, str] = {
    "empatheticdialogues_intents": "EmpatheticIntents listener turns (annotated_subset/*.csv, automatic labels)",
    "sage_rlver/test_turns": "SAGE rollout turns outside the 400 already scored, with their emotion changes "
    "(care_lab.data.sage_turns)",
}
"""The ``test`` sets of the shared data, by ledger name."""


@dataclass(frozen=True)
class TestRead:
    """One recorded read of a test set: what :func:`record_test_read` returns and the loaders ask for.

    Examples:
        >>> read = TestRead("empatheticdialogues_intents", "a@1", "care bench", "2026-12-05T10:00:00Z", False, 1,
        ...                 "l.json")
        >>> read.date, read.reads
        ('2026-12-05', 1)
    """

    __test__ = False  # not a pytest class

    data: str
    """The test set's ledger name."""
    artifact: str
    """The artifact evaluated (``name@<12 hex digits>``, :func:`artifact_identity`)."""
    command: str
    """The command that read it."""
    time: str
    """When (UTC, ISO 8601; a date alone for entries recorded before times were)."""
    forced: bool
    """Whether the read was forced past an earlier read of the same models."""
    reads: int
    """How many times the set has been read, this read included (this read's number)."""
    ledger: str
    """The ledger file."""
    items: int = 0
    """How many items it reads."""
    items_sha256: str = ""
    """The sha256 of the items' ids, one a line, in read order (:func:`items_sha256`)."""
    labels_only: bool = False
    """Whether it reads the labels alone, with no model."""
    artifact_files: Mapping[str, str] = field(default_factory=dict)
    """Each model file's sha256, by name."""
    commit: str = ""
    """The HEAD commit when the read was recorded."""

    @property
    def date(self) -> str:
        """The UTC date of the read."""
        return self.time[:10]


def ledger_path(ledger: str | Path | None = None) -> Path:
    """The ledger file: ``ledger``, else ``$CARE_TEST_READS``, else ``benchmarks/results/test_reads.json``.

    Examples:
        >>> ledger_path("/tmp/l.json")
        PosixPath('/tmp/l.json')
    """
    if ledger is not None:
        return Path(ledger)
    raw = os.environ.get(LEDGER_ENV, "").strip()
    return Path(raw) if raw else _DEFAULT_LEDGER


def _read_ledger(path: Path) -> dict[str, list[dict[str, Any]]]:
    if not path.is_file():
        return {}
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", location=str(path)) from None
    if not isinstance(table, dict) or not all(isinstance(v, list) for v in table.values()):
        raise InputError("expected a mapping of data set to a list of reads", location=str(path))
    return table


def _write_ledger(path: Path, table: Mapping[str, list[dict[str, Any]]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(dict(sorted(table.items())), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")


def test_reads(data: str, ledger: str | Path | None = None) -> int:
    """How many times a test set has been read, by the ledger.

    Examples:
        >>> test_reads("empatheticdialogues_intents", "/nowhere/test_reads.json")
        0
    """
    return len(_read_ledger(ledger_path(ledger)).get(data, []))


test_reads.__test__ = False  # type: ignore[attr-defined]


def artifact_identity(name: str, *files: str | Path) -> str:
    """``name@<sha256 of the files' bytes, 12 hex digits>``: what a test read is counted against.

    Examples:
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "adapter.gguf"
        >>> _ = f.write_bytes(b"weights")
        >>> artifact_identity("generator", f)
        'generator@9a129038d9a0'
    """
    digest = hashlib.sha256()
    for file in files:
        with Path(file).open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return f"{name}@{digest.hexdigest()[:12]}"


def items_sha256(ids: Iterable[str]) -> str:
    """The sha256 of item ids, one a line (each followed by a newline), in the order given.

    Examples:
        >>> items_sha256(["a", "b"]) == hashlib.sha256(b"a\\nb\\n").hexdigest()
        True
    """
    digest = hashlib.sha256()
    for item in ids:
        digest.update(f"{item}\n".encode())
    return digest.hexdigest()


def _file_names(files: Sequence[str | Path]) -> dict[str, str]:
    names: dict[str, str] = {}
    for file in files:
        path = Path(file)
        if not path.is_file():
            raise InputError("no such model file: the artifact's identity is read from its files", location=str(path))
        name = path.name
        while name in names:
            name = f"{path.parent.name}/{name}"
        names[name] = file_sha256(path)
    return names


def _same_models(entry: Mapping[str, Any], hashes: set[str], artifact: str) -> bool:
    files = entry.get("artifact_files")
    if isinstance(files, dict) and files:
        return hashes <= set(files.values())  # every model file of this read was read before
    return entry.get("artifact") == artifact or not hashes


def _entry_read(data: str, entry: Mapping[str, Any], number: int, path: Path) -> TestRead:
    return TestRead(
        data=data,
        artifact=str(entry.get("artifact", "")),
        command=str(entry.get("command", "")),
        time=str(entry.get("time", entry.get("date", ""))),
        forced=bool(entry.get("forced", False)),
        reads=number,
        ledger=str(path),
        items=int(entry.get("items", 0) or 0),
        items_sha256=str(entry.get("items_sha256") or ""),
        labels_only=bool(entry.get("labels_only", False)),
        artifact_files=dict(entry.get("artifact_files") or {}),
        commit=str(entry.get("commit") or ""),
    )


def ledger_entry(data: str, number: int, ledger: str | Path | None = None) -> TestRead:
    """The ``number``-th recorded read of ``data`` (1 = the first): a resumed run is the same read.

    Raises:
        InputError: the ledger has no such read.

    Examples:
        >>> ledger_entry("empatheticdialogues_intents", 1, "/nowhere/reads.json")
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: /nowhere/reads.json: no read 1 of empatheticdialogues_intents in the ledger
    """
    path = ledger_path(ledger)
    reads = _read_ledger(path).get(data, [])
    if not 1 <= number <= len(reads):
        raise InputError(f"no read {number} of {data} in the ledger", location=str(path))
    return _entry_read(data, reads[number - 1], number, path)


def check_test_read(test_read: object, data: str | None, where: str | Path) -> TestRead:
    """The ledger entry a test loader was given, checked: a :class:`TestRead` of ``data`` that the ledger holds.

    Raises:
        InputError: no entry, another set's entry, or one the ledger does not hold (naming ``where``).

    Examples:
        >>> check_test_read(None, "empatheticdialogues_intents", "/data/x.csv")
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: /data/x.csv: test data is read once per shipped artifact: ...
    """
    if not isinstance(test_read, TestRead):
        raise InputError(
            "test data is read once per shipped artifact: pass test_read=, the entry "
            "care_lab.data.results.record_test_read returned for this read (it records the read)",
            location=str(where),
        )
    if data is not None and test_read.data != data:
        raise InputError(f"the ledger entry is a read of {test_read.data}, not of {data}", location=str(where))
    recorded = _read_ledger(Path(test_read.ledger)).get(test_read.data, [])
    number = test_read.reads
    entry = recorded[number - 1] if 1 <= number <= len(recorded) else {}
    if entry.get("artifact") != test_read.artifact or str(entry.get("time", entry.get("date"))) != test_read.time:
        raise InputError(
            f"read {number} of {test_read.data} ({test_read.artifact}) is not in the ledger {test_read.ledger}",
            location=str(where),
        )
    return test_read


def record_test_read(
    data: str,
    *,
    artifact: str,
    command: str,
    rule: str | Path,
    items: Sequence[str] = (),
    artifact_files: Sequence[str | Path] = (),
    files: Sequence[str | Path] = (),
    labels_only: bool = False,
    force: bool = False,
    ledger: str | Path | None = None,
    when: dt.datetime | None = None,
) -> TestRead:
    """Record a read of a test set for evaluation; refuse a second read of the same models.

    Args:
        data: the test set's ledger name (see :data:`TEST_SETS`).
        artifact: the artifact's name; its identity is ``name@<hash of artifact_files>``.
        command: the command line that reads it.
        rule: the rule file that governs the read: committed and unchanged in the working tree.
        items: the ids of the items about to be read, in read order; when they are drawn from the
            test data itself (so known only once it is loaded), leave them out and name them with
            :func:`set_items` before anything is scored.
        artifact_files: every model file the artifact loads (none only for ``labels_only``).
        files: the data files about to be read; each must be declared ``test`` (or hold test records).
        labels_only: the read takes the labels alone, with no model (it is still a read).
        force: read again with models an earlier read used; the forced read is marked.
        ledger: the ledger file (see :func:`ledger_path`).
        when: the time to record (default: now, UTC).

    Raises:
        InputError: the rule is not committed or has changed, no model file is named (and the
            read is not ``labels_only``), a data file is not a test file, or
            earlier reads used the same models and ``force`` is off (naming the earlier read).

    Examples:
        >>> import pathlib, subprocess, tempfile
        >>> repo = pathlib.Path(tempfile.mkdtemp())
        >>> _ = subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
        >>> _ = (repo / "rule.md").write_text("# Rule\\n")
        >>> _ = subprocess.run(["git", "-C", str(repo), "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm",
        ...                     "r", "--allow-empty"], check=True)
        >>> record_test_read("empatheticdialogues_intents", artifact="labels", command="c", rule=repo / "rule.md",
        ...                  items=["a"], labels_only=True, ledger=repo / "reads.json")
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: .../rule.md: the rule is not committed: ...
    """
    ruled = committed_file(rule)
    if not artifact_files and not labels_only:
        raise InputError(
            "name every model file the artifact loads (artifact_files=): its identity is read from their bytes; "
            "a read of the labels alone is labels_only=True",
            location=str(rule),
        )
    for file in files:
        role = data_role(file)
        if role not in ("test", "by-record"):
            raise InputError(f"not a test file (its role is {role})", location=str(file))
    hashes = _file_names(artifact_files)
    identity = artifact_identity(artifact, *artifact_files) if artifact_files else artifact
    path = ledger_path(ledger)
    table = _read_ledger(path)
    reads = table.setdefault(data, [])
    earlier = [r for r in reads if _same_models(r, set(hashes.values()), identity)]
    if earlier and not force:
        first = earlier[0]
        raise InputError(
            f"{data} was read for {first.get('artifact')} on {first.get('time', first.get('date'))} by "
            f"`{first.get('command')}` with the same models; a test set is read once per shipped artifact "
            "(force=True / --force-test-read reads again, and the ledger marks it)",
            location=str(path),
        )
    moment = (when or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    entry: dict[str, Any] = {
        "time": moment,
        "commit": ruled.head,
        "tree_clean": ruled.clean,
        "rule": ruled.path,
        "rule_sha256": ruled.sha256,
        "rule_commit": ruled.commit,
        "artifact": identity,
        "artifact_files": hashes,
        "command": command,
        "items": len(items) if items else None,
        "items_sha256": items_sha256(items) if items else None,
        "records": None,
    }
    if earlier:
        entry["forced"] = True
    if labels_only:
        entry["labels_only"] = True
    reads.append(entry)
    _write_ledger(path, table)
    return _entry_read(data, entry, len(reads), path)


def _entry_of(read: TestRead) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    table = _read_ledger(Path(read.ledger))
    entries = table.get(read.data, [])
    if not 1 <= read.reads <= len(entries) or entries[read.reads - 1].get("artifact") != read.artifact:
        raise InputError(f"read {read.reads} of {read.data} is not in the ledger", location=read.ledger)
    return table, entries[read.reads - 1]


def set_items(read: TestRead, ids: Sequence[str]) -> TestRead:
    """Name the items of a read whose sample is drawn from the test data itself, before any is scored.

    Raises:
        InputError: no ids, the ledger does not hold ``read``, or it names other items already.

    Examples:
        >>> import tempfile, pathlib
        >>> ledger = pathlib.Path(tempfile.mkdtemp()) / "reads.json"
        >>> _ = ledger.write_text(json.dumps({"x/y": [{"artifact": "a@1", "time": "2026-12-05T10:00:00Z"}]}))
        >>> set_items(ledger_entry("x/y", 1, ledger), ["i1", "i2"]).items
        2
    """
    if not ids:
        raise InputError("a test read names the items it reads (their ids, in order)", location=read.ledger)
    table, entry = _entry_of(read)
    digest = items_sha256(ids)
    if entry.get("items_sha256") not in (None, "", digest):
        raise InputError(f"read {read.reads} of {read.data} names other items already", location=read.ledger)
    entry.update(items=len(ids), items_sha256=digest)
    _write_ledger(Path(read.ledger), table)
    return _entry_read(read.data, entry, read.reads, Path(read.ledger))


def _gzip(lines: bytes) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="") as handle:
        handle.write(lines)
    return buffer.getvalue()


def attach_records(
    read: TestRead,
    records: Iterable[Mapping[str, Any]],
    *,
    directory: str | Path | None = None,
    regenerate: str | None = None,
    limit: int = RECORDS_LIMIT,
) -> Path | None:
    """Keep a read's per-item records beside its ledger entry, and their sha256 in it.

    The records (one JSON object a line, each with its item's ``id``) are written compressed to
    ``<directory>/<data>-<n>.jsonl.gz`` (default directory: ``reads/`` beside the ledger), to be
    committed. When the compressed file would pass ``limit`` bytes, only the sha256 of the
    uncompressed lines is kept, with ``regenerate``, the command that writes them again from the
    committed artifact.

    Returns:
        The records file, or ``None`` when only their hash was kept.

    Raises:
        InputError: a record has no ``id``, the records are too large and ``regenerate`` is not
            given, or the ledger does not hold ``read``.

    Examples:
        >>> import tempfile, pathlib
        >>> ledger = pathlib.Path(tempfile.mkdtemp()) / "reads.json"
        >>> _ = ledger.write_text(json.dumps({"x/y": [{"artifact": "a@1", "time": "2026-12-05T10:00:00Z"}]}))
        >>> read = ledger_entry("x/y", 1, ledger)
        >>> attach_records(read, [{"id": "i1", "value": 1}]).name
        'x_y-1.jsonl.gz'
        >>> json.loads(ledger.read_text())["x/y"][0]["records"]["n"]
        1
    """
    rows = list(records)
    if any("id" not in r for r in rows):
        raise InputError("every per-item record names its item (id)", location=read.ledger)
    text = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows).encode()
    ledger = Path(read.ledger)
    table, entry = _entry_of(read)
    packed = _gzip(text)
    folder = Path(directory) if directory is not None else ledger.parent / "reads"
    target = folder / f"{read.data.replace('/', '_')}-{read.reads}.jsonl.gz"
    kept: dict[str, Any] = {"n": len(rows), "sha256_lines": hashlib.sha256(text).hexdigest()}
    written: Path | None = target
    if len(packed) <= limit:
        folder.mkdir(parents=True, exist_ok=True)
        target.write_bytes(packed)
        kept |= {"file": os.path.relpath(target, ledger.parent), "sha256": hashlib.sha256(packed).hexdigest()}
    elif regenerate:
        kept["regenerate"] = regenerate
        written = None
    else:
        raise InputError(
            f"the records are {len(packed)} bytes compressed (over {limit}): pass regenerate=, the command that "
            "writes them again from the committed artifact",
            location=str(ledger),
        )
    entry["records"] = kept
    _write_ledger(ledger, table)
    return written


def write_results(
    path: str | Path,
    command: str,
    *,
    data: str | Sequence[str],
    role: str,
    test_reads: int,
    metrics: Mapping[str, Any],
    baselines: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
    reads: Sequence[TestRead] = (),
) -> Path:
    """Write a benchmark's results file: small JSON, sorted keys, one per command run.

    Args:
        path: the file to write (``benchmarks/results/<name>.json`` in this repository).
        command: the command line that produced the numbers.
        data: the data set(s) read.
        role: their role (``selection``, ``test``, ``eval-only``; ``valid`` reads as ``selection``).
        test_reads: how many times that test set has been read, this run included (0 for other roles).
        metrics: the numbers (estimates with their intervals, counts).
        baselines: the same run's baselines (length, feeling-word count, uniform weights, untrained base).
        extra: anything else worth keeping (settings, time).
        reads: the ledger entries of the test reads behind the numbers: each is written with its
            number, time, artifact, items and whether it was ``forced`` or ``labels_only``.

    Raises:
        InputError: an unknown role, or a test read count below 1 for test data.

    Examples:
        >>> import tempfile, pathlib
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "r.json"
        >>> _ = write_results(out, "care bench x", data="esconv/test.jsonl", role="valid", test_reads=0,
        ...                   metrics={"auc": 0.6}, baselines={"length": 0.7})
        >>> json.loads(out.read_text())["role"]
        'selection'
    """
    canonical = normalise_role(role, str(path))
    if canonical == "test" and test_reads < 1:
        raise InputError("a test result counts its own read: test_reads >= 1", location=str(path))
    payload: dict[str, Any] = {
        "command": command,
        "data": data if isinstance(data, str) else list(data),
        "role": canonical,
        "test_reads": test_reads,
        "metrics": dict(metrics),
        "baselines": dict(baselines),
    }
    if reads:
        payload["reads"] = [
            {
                "data": r.data,
                "read": r.reads,
                "time": r.time,
                "artifact": r.artifact,
                "items": r.items,
                "items_sha256": r.items_sha256,
                "forced": r.forced,
                "labels_only": r.labels_only,
            }
            for r in reads
        ]
    if extra:
        payload["extra"] = dict(extra)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
