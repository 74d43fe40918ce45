"""The data-construction roles' model calls, on the SDK's structured-call engine (one retry loop)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from care_sdk.backends import Backend, GenerationRequest
from care_sdk.errors import CareError
from care_sdk.plans import drive, parse_plan
from care_sdk.types import Message

__all__ = ["ask"]

V = TypeVar("V")


def ask(
    backend: Backend,
    prompts: Sequence[Sequence[Message]],
    parse: Callable[[str], V],
    *,
    what: str,
    schema: dict[str, Any] | None,
    max_tokens: int,
    attempts: int,
    seed: int,
    temperature: float = 0.0,
    accept: Callable[[int, V], str | None] | None = None,
) -> list[V | CareError]:
    """Ask every prompt (under ``schema``, when given) and parse each reply; retry as the engine does.

    Returns the parsed value or the :class:`~care_sdk.errors.CareError` of each prompt: a
    :class:`~care_sdk.errors.OutputError` after ``attempts`` unusable (or refused, see
    ``accept``) replies, whose ``raw`` holds the last reply; a backend error as it came.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> ask(ScriptedBackend(["no", "42"]), [[Message(role="user", content="n?")]], int, what="demo",
        ...     schema=None, max_tokens=4, attempts=2, seed=0)
        [42]
    """
    requests = [
        GenerationRequest(
            messages=tuple(p), json_schema=schema, max_tokens=max_tokens, temperature=temperature, seed=seed
        )
        for p in prompts
    ]
    plan = parse_plan(requests, lambda i, c: parse(c.text), what=what, max_attempts=attempts, accept=accept)
    return drive(plan, backend)
