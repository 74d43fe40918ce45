"""Reading logged dialogues from JSONL: one ``{"id": ..., "messages": [...]}`` object a line, with
an optional ``"profile"`` (the user's, see :mod:`care_sdk.profiles`).

Malformed lines are reported with their line number and reason; the rest are still read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from care_sdk.errors import InputError
from care_sdk.jsonl import BadLine, iter_jsonl
from care_sdk.types import Dialogue

__all__ = ["DialogueLine", "read_dialogues"]


@dataclass(frozen=True)
class DialogueLine:
    """One line of a dialogue file: the dialogue, or the error that made it unusable.

    Examples:
        >>> DialogueLine(line=3, error=InputError("bad JSON", location="f.jsonl:line 3")).dialogue is None
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


def _problem(data: dict[str, Any]) -> tuple[str | None, str] | None:
    """What makes a line's object unusable as a dialogue: ``(field, reason)``, or ``None``."""
    for key in ("id", "messages"):
        if key not in data:
            return None, f"missing field '{key}'"
    if not isinstance(data["id"], str | int) or isinstance(data["id"], bool) or str(data["id"]) == "":
        return "id", "must be a non-empty string or integer"
    if not isinstance(data["messages"], list) or not data["messages"]:
        return "messages", "empty dialogue: 'messages' must be a non-empty list"
    return None


def _dialogue(path: Path, number: int, data: dict[str, Any]) -> Dialogue:
    try:
        fields = {"id": str(data["id"]), "messages": data["messages"], "profile": data.get("profile")}
        dialogue = Dialogue.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BadLine(path, number, str(first["msg"]), field=_field(first["loc"])) from None
    if not any(True for _ in dialogue.turns()):
        raise BadLine(path, number, "no assistant turn to score (an assistant message after at least one other)")
    return dialogue


def read_dialogues(path: str | Path) -> Iterator[DialogueLine]:
    """Read a JSONL file of dialogues, yielding each non-blank line's dialogue or its error.

    Errors are :class:`~care_sdk.jsonl.BadLine` (file, line, field, reason). Duplicate ids are
    errors (results are keyed by id).

    Examples:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "d.jsonl")
        >>> _ = open(p, "w").write('{"id": "a", "messages": [{"role": "user", "content": "hi"},'
        ...                        ' {"role": "assistant", "content": "hello"}]}\\n{"id": "b"}\\n'
        ...                        '{"id": "c", "messages": [{"role": "user", "content": "hi"},'
        ...                        ' {"role": "assistant", "content": "hello"}], "profile": {"traits": [3]}}\\n')
        >>> for x in read_dialogues(p):
        ...     print(x.line, x.error.reason if x.error else x.dialogue.id, x.error and x.error.field)
        1 a None
        2 missing field 'messages' None
        3 Input should be a valid string profile.traits[0]
    """
    path = Path(path)
    seen: dict[str, int] = {}
    bad: list[BadLine] = []
    for number, data in iter_jsonl(path, on_bad=bad.append, check=_problem):
        yield from (DialogueLine(line=b.line, error=b) for b in bad)
        bad.clear()
        try:
            dialogue = _dialogue(path, number, data)
            assert dialogue.id is not None
            if dialogue.id in seen:
                raise BadLine(path, number, f"duplicate id {dialogue.id!r} (first on line {seen[dialogue.id]})")
            seen[dialogue.id] = number
            yield DialogueLine(line=number, dialogue=dialogue)
        except InputError as exc:
            yield DialogueLine(line=number, error=exc)
    yield from (DialogueLine(line=b.line, error=b) for b in bad)
