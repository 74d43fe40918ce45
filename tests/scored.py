"""Reading ``care score`` output for comparisons between runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def records_without_provenance(path: Path) -> list[dict[str, Any]]:
    """The records of an output file in order, each without its ``provenance`` (which describes the run
    that scored it: its seconds, and whether its rubric was written or read from the cache), after
    checking that every record has one."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert all(r.get("provenance") for r in records), "a record without its provenance"
    return [{k: v for k, v in r.items() if k != "provenance"} for r in records]
