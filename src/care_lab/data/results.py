"""Results files and the test-read ledger: every quoted number names its data, role and test reads.

A ``test`` set is read once per shipped artifact. :func:`record_test_read` is the one way to read
one for evaluation: it records the read (data set, artifact, command, date) in a JSON ledger
(``benchmarks/results/test_reads.json`` in this repository; ``$CARE_TEST_READS`` or ``ledger=``
elsewhere) and refuses a second read for the same artifact unless ``force=True``, which is
recorded too. Its entry is what :func:`care_lab.data.roles.require_role` and the test-set
loaders ask for. :func:`write_results` writes the small JSON file a benchmark command leaves
behind: the command, the data, its role, the test reads, the metrics and the same run's baselines.

Examples:
    >>> import tempfile, pathlib
    >>> ledger = pathlib.Path(tempfile.mkdtemp()) / "test_reads.json"
    >>> read = record_test_read("empatheticdialogues_intents", artifact="bundled@abc", command="care bench x",
    ...                         ledger=ledger, date="2026-12-05")
    >>> read.reads, test_reads("empatheticdialogues_intents", ledger)
    (1, 1)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from care_lab.data.roles import data_role, normalise_role
from care_sdk.errors import InputError

__all__ = [
    "LEDGER_ENV",
    "TEST_SETS",
    "TestRead",
    "artifact_identity",
    "ledger_path",
    "record_test_read",
    "test_reads",
    "write_results",
]

LEDGER_ENV = "CARE_TEST_READS"
"""The environment variable naming the test-read ledger file."""

_DEFAULT_LEDGER = Path("benchmarks") / "results" / "test_reads.json"

TEST_SETS: dict[str, str] = {
    "empatheticdialogues_intents": "EmpatheticIntents listener turns (annotated_subset/*.csv, manual annotations)",
    "sage_rlver/test_turns": "SAGE rollout turns outside the 400 already scored (care_lab.data.sage_turns)",
}
"""The ``test`` sets of the shared data, by ledger name."""


@dataclass(frozen=True)
class TestRead:
    """One recorded read of a test set: what :func:`record_test_read` returns.

    Examples:
        >>> TestRead("empatheticdialogues_intents", "a@1", "care bench", "2026-12-05", False, 1, "l.json").reads
        1
    """

    __test__ = False  # not a pytest class

    data: str
    """The test set's ledger name."""
    artifact: str
    """The artifact evaluated (e.g. ``bundled-default@<hash>``)."""
    command: str
    """The command that read it."""
    date: str
    """When (ISO date)."""
    forced: bool
    """Whether the read was forced past an earlier read of the same artifact."""
    reads: int
    """How many times the set has been read, this read included."""
    ledger: str
    """The ledger file."""


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
        digest.update(Path(file).read_bytes())
    return f"{name}@{digest.hexdigest()[:12]}"


def record_test_read(
    data: str,
    *,
    artifact: str,
    command: str,
    files: Sequence[str | Path] = (),
    force: bool = False,
    ledger: str | Path | None = None,
    date: str | None = None,
) -> TestRead:
    """Record a read of a test set for evaluation; refuse a second read of the same artifact.

    Args:
        data: the test set's ledger name (see :data:`TEST_SETS`).
        artifact: the artifact evaluated (:func:`artifact_identity`).
        command: the command line that reads it.
        files: the files about to be read; each must be declared ``test`` (or hold test records).
        force: read again for an artifact already read; the forced read is recorded.
        ledger: the ledger file (see :func:`ledger_path`).
        date: the date to record (default: today, UTC).

    Raises:
        InputError: the artifact has read this set before (naming the earlier read) and
            ``force`` is off, or a file is not a test file.

    Examples:
        >>> import tempfile, pathlib
        >>> ledger = pathlib.Path(tempfile.mkdtemp()) / "reads.json"
        >>> _ = record_test_read("empatheticdialogues_intents", artifact="a@1", command="c", ledger=ledger)
        >>> record_test_read("empatheticdialogues_intents", artifact="a@1", command="c", ledger=ledger)
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: ...: empatheticdialogues_intents was read for a@1 on ... by `c`; ...
        >>> again = record_test_read("empatheticdialogues_intents", artifact="a@1", command="c", ledger=ledger,
        ...                          force=True)
        >>> again.reads, again.forced
        (2, True)
    """
    for file in files:
        role = data_role(file)
        if role not in ("test", "by-record"):
            raise InputError(f"not a test file (its role is {role})", location=str(file))
    path = ledger_path(ledger)
    table = _read_ledger(path)
    reads = table.setdefault(data, [])
    earlier = [r for r in reads if r.get("artifact") == artifact]
    if earlier and not force:
        first = earlier[0]
        raise InputError(
            f"{data} was read for {artifact} on {first.get('date')} by `{first.get('command')}`; a test set is read "
            "once per shipped artifact (force=True / --force-test-read reads again, and the ledger records it)",
            location=str(path),
        )
    when = date or dt.datetime.now(dt.UTC).date().isoformat()
    entry: dict[str, Any] = {"artifact": artifact, "command": command, "date": when}
    if earlier:
        entry["forced"] = True
    reads.append(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(sorted(table.items())), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return TestRead(data, artifact, command, when, bool(earlier), len(reads), str(path))


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
    if extra:
        payload["extra"] = dict(extra)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
