"""Reading logged dialogues from JSONL: one ``{"id": ..., "messages": [...]}`` object a line.

Malformed lines are reported with their line number and reason; the rest are still read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from care_sdk.errors import InputError
from care_sdk.types import Dialogue

__all__ = ["DialogueLine", "read_dialogues"]


@dataclass(frozen=True)
class DialogueLine:
    """One line of a dialogue file: the dialogue, or the error that made it unusable.

    Examples:
        >>> DialogueLine(line=3, error=InputError("bad JSON", location="f.jsonl:3")).dialogue is None
        True
    """

    line: int
    dialogue: Dialogue | None = None
    error: InputError | None = None


def _field(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _parse_line(text: str, where: str) -> Dialogue:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg} (column {exc.colno})", location=where) from None
    if not isinstance(data, dict):
        raise InputError("expected a JSON object with 'id' and 'messages'", location=where)
    for key in ("id", "messages"):
        if key not in data:
            raise InputError(f"missing field '{key}'", location=where)
    if not isinstance(data["id"], str | int) or isinstance(data["id"], bool) or str(data["id"]) == "":
        raise InputError("field 'id' must be a non-empty string or integer", location=where)
    if not isinstance(data["messages"], list) or not data["messages"]:
        raise InputError("empty dialogue: 'messages' must be a non-empty list", location=where)
    try:
        dialogue = Dialogue.model_validate({"id": str(data["id"]), "messages": data["messages"]})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(f"{first['msg']}", location=f"{where}: {_field(first['loc'])}") from None
    if not any(True for _ in dialogue.turns()):
        raise InputError("no assistant turn to score (an assistant message after at least one other)", location=where)
    return dialogue


def read_dialogues(path: str | Path) -> Iterator[DialogueLine]:
    """Read a JSONL file of dialogues, yielding each non-blank line's dialogue or its error.

    Duplicate ids are errors (results are keyed by id).

    Examples:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "d.jsonl")
        >>> _ = open(p, "w").write('{"id": "a", "messages": [{"role": "user", "content": "hi"},'
        ...                        ' {"role": "assistant", "content": "hello"}]}\\n{"id": "b"}\\n')
        >>> [(x.line, x.error.reason if x.error else x.dialogue.id) for x in read_dialogues(p)]
        [(1, 'a'), (2, "missing field 'messages'")]
    """
    path = Path(path)
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            where = f"{path.name}:{number}"
            try:
                dialogue = _parse_line(text, where)
                assert dialogue.id is not None
                if dialogue.id in seen:
                    raise InputError(
                        f"duplicate id {dialogue.id!r} (first on line {seen[dialogue.id]})", location=where
                    )
                seen[dialogue.id] = number
                yield DialogueLine(line=number, dialogue=dialogue)
            except InputError as exc:
                yield DialogueLine(line=number, error=exc)
