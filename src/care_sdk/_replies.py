"""Parsing a model's JSON reply into a pydantic model, with errors that name the field.

Examples:
    >>> from pydantic import BaseModel
    >>> class Turn(BaseModel):
    ...     reply: str
    >>> parse_json_reply('{"reply": " hi "}', Turn, "simulated user reply", strip=True).reply
    'hi'
    >>> parse_json_reply('{"reply": 3}', Turn, "simulated user reply")
    Traceback (most recent call last):
    ...
    ValueError: simulated user reply: reply: Input should be a valid string
"""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def parse_json_reply(text: str, model: type[M], what: str, *, strip: bool = False) -> M:
    """``text`` as ``model``; raises ``ValueError`` (``"<what> is not JSON: ..."`` or
    ``"<what>: <field>: <problem>"``), which the engine's parse plans retry.

    ``strip`` strips the reply's top-level string values first.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} is not JSON: {exc.msg}") from None
    if strip and isinstance(data, dict):
        data = {k: v.strip() if isinstance(v, str) else v for k, v in data.items()}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "reply"
        raise ValueError(f"{what}: {where}: {first['msg']}") from None
