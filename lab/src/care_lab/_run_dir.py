"""What every run of ``care eval`` and ``care bench quality`` shares: an output directory that refuses mixed
models, resumable records, run metadata.

Examples:
    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> check_identity(out, {"evaluator": "e1", "generators": {"a": "g1"}})
    >>> check_identity(out, {"evaluator": "e1", "generators": {"b": "g2"}})  # a new generator joins the run
    >>> json.loads((out / "run.json").read_text())["generators"]
    {'a': 'g1', 'b': 'g2'}
"""

from __future__ import annotations

import json
import logging
import platform
import sys
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from pathlib import Path
from typing import Any

from care_sdk.errors import ConfigError
from care_sdk.jsonl import BadLine, iter_jsonl

logger = logging.getLogger("care_sdk")

RUN = "run.json"
RECORDS = "records.jsonl"


def check_identity(out_dir: Path, identity: Mapping[str, Any], *, merge: str = "generators") -> None:
    """Create ``out_dir`` and its ``run.json``, or check that an existing run used the same models.

    Every key must match, except the mapping under ``merge`` (label -> identity): a label already
    there must keep its identity, a new label is added. A mismatch raises :class:`ConfigError`
    instead of mixing results.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    run_file = out_dir / RUN
    mine = dict(identity)
    if run_file.exists():
        try:
            theirs = json.loads(run_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{run_file} is not valid JSON ({exc}); remove it or choose another --out") from exc
        changed = [k for k in mine if k != merge and theirs.get(k) != mine[k]]
        old: dict[str, Any] = dict(theirs.get(merge) or {})
        changed += [
            f"{merge[:-1]} {label!r}"
            for label, ident in (mine.get(merge) or {}).items()
            if old.get(label, ident) != ident
        ]
        if changed:
            raise ConfigError(
                f"{out_dir} holds records made with another {', '.join(changed)}; choose another output "
                "directory (or delete it) instead of mixing results"
            )
        if merge in mine:
            mine[merge] = {**old, **mine[merge]}
    run_file.write_text(json.dumps(mine, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def load_records(path: Path, key: Callable[[dict[str, Any]], Hashable]) -> dict[Hashable, dict[str, Any]]:
    """The records of an earlier run by ``key``; a cut-off or broken line is logged and its item redone."""
    records: dict[Hashable, dict[str, Any]] = {}
    if not path.exists():
        return records

    def redo(bad: BadLine) -> None:
        logger.warning("%s; that item is scored again", bad)

    for _, record in iter_jsonl(path, on_bad=redo):
        try:
            records[key(record)] = record
        except KeyError as exc:
            logger.warning("%s: a record without %s; that item is scored again", path, exc)
    return records


def file_hashes(paths: Iterable[Path]) -> dict[str, str]:
    """SHA-256 of each existing file (the data layer's hash, computed once per process and file)."""
    from care_lab.data._content import file_sha256

    return {str(p): file_sha256(p) for p in sorted(set(paths)) if p.is_file()}


def run_meta(benchmark: str, seconds: float) -> dict[str, Any]:
    """The versions, platform and time every report starts with."""
    from care_sdk import __version__
    from care_sdk.prompts import FIXED_CRITERIA_VERSION

    return {
        "benchmark": benchmark,
        "care_sdk": __version__,
        "fixed_criteria_version": FIXED_CRITERIA_VERSION,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(seconds, 1),
    }
