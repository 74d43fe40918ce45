"""A backend wrapper that counts what a benchmark's scoring cost: calls, tokens and seconds.

Examples:
    >>> from care_sdk.backends import GenerationRequest
    >>> from care_sdk.testing import ScriptedBackend
    >>> meter = Meter(ScriptedBackend(lambda req: "ok"))
    >>> _ = meter.generate([GenerationRequest(messages=())] * 2)
    >>> meter.snapshot()["calls"], meter.by_role["evaluator"]["calls"], meter.by_role["generator"]["calls"]
    (2, 2, 0)
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from care_sdk.backends import RUBRIC, ForwardingBackend, GenerationRequest, GenerationResult
from care_sdk.backends.base import Backend, Request

__all__ = ["ROLES", "Meter"]

R = TypeVar("R", bound=Request)

ROLES = ("generator", "evaluator")
"""What :attr:`Meter.by_role` splits by: rubric requests (``purpose == RUBRIC``) and every other request."""
_COUNTS = ("calls", "prompt_tokens", "completion_tokens")


class Meter(ForwardingBackend):
    """Forwards to ``inner`` and counts requests, prompt and completion tokens and seconds, in :attr:`totals`
    and by the role that sent them (:attr:`by_role`: ``generator`` for rubric requests, ``evaluator`` for the
    rest).

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> meter = Meter(ScriptedBackend(lambda req: "ok"))
        >>> before = meter.snapshot()
        >>> _ = meter.generate([GenerationRequest(messages=())])
        >>> meter.snapshot()["calls"] - before["calls"]
        1
    """

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.totals: dict[str, float] = {**dict.fromkeys(_COUNTS, 0), "seconds": 0.0}
        self.by_role: dict[str, dict[str, int]] = {role: dict.fromkeys(_COUNTS, 0) for role in ROLES}

    def _count(self, requests: Sequence[Request], results: list[GenerationResult], seconds: float) -> None:
        self.totals["seconds"] += seconds
        for request, result in zip(requests, results, strict=True):
            role = self.by_role["generator" if getattr(request, "purpose", None) == RUBRIC else "evaluator"]
            counts = {"calls": 1, **{k: result.usage.get(k, 0) for k in _COUNTS[1:]}}
            for key, value in counts.items():
                self.totals[key] += value
                role[key] += value

    def forward(
        self, requests: Sequence[R], call: Callable[[Sequence[R]], list[GenerationResult]]
    ) -> list[GenerationResult]:
        """Forward a batch (decoded or forced), counting it."""
        start = time.perf_counter()
        results = call(requests)
        self._count(requests, results, time.perf_counter() - start)
        return results

    async def aforward(
        self,
        requests: Sequence[GenerationRequest],
        call: Callable[[Sequence[GenerationRequest]], Awaitable[list[GenerationResult]]],
    ) -> list[GenerationResult]:
        """Async form of :meth:`forward`."""
        start = time.perf_counter()
        results = await call(requests)
        self._count(requests, results, time.perf_counter() - start)
        return results

    def snapshot(self) -> dict[str, Any]:
        """The totals so far."""
        return dict(self.totals)
