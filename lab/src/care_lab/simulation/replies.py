"""The replies of simulated users and judges: what a prompt quotes, and the JSON a model sends back.

:func:`clip` shortens what a prompt quotes (one rule for every part of the lab that cuts a profile
or a transcript); :func:`parse_json_reply` reads a model's JSON reply into a pydantic model, with
errors that name the field (a ``ValueError``, which :func:`care_sdk.plans.parse_plan` retries).

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
    >>> clip("  a long profile  ", 6)
    'a long ...'
"""

from __future__ import annotations

import json
from typing import TypeVar

from pydantic import BaseModel, ValidationError

__all__ = ["clip", "parse_json_reply"]

M = TypeVar("M", bound=BaseModel)


def clip(text: str, limit: int | None) -> str:
    """``text`` stripped and, past ``limit`` characters, cut there with `` ...`` (``None``: no limit).

    Examples:
        >>> clip("  a long profile  ", 6), clip(" short ", None)
        ('a long ...', 'short')
    """
    text = text.strip()
    if limit is None or len(text) <= limit:
        return text
    return text[:limit].rstrip() + " ..."


def parse_json_reply(text: str, model: type[M], what: str, *, strip: bool = False) -> M:
    """``text`` as ``model``; raises ``ValueError`` (``"<what> is not JSON: ..."`` or
    ``"<what>: <field>: <problem>"``), which :func:`care_sdk.plans.parse_plan` retries.

    ``strip`` strips the reply's top-level string values first.

    Examples:
        >>> from pydantic import BaseModel
        >>> class Verdict(BaseModel):
        ...     score: int
        >>> parse_json_reply('{"score": 8}', Verdict, "judge reply").score
        8
        >>> parse_json_reply("eight", Verdict, "judge reply")
        Traceback (most recent call last):
        ...
        ValueError: judge reply is not JSON: Expecting value
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
