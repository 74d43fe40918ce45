"""Cross-request batching: items from requests that arrive within a short window are scored together.

One :class:`Batcher` per service collects the ``(context, reply)`` items of every request, waits
up to ``window_s`` after the first one arrives (or until ``max_batch`` items wait), and scores
them in one awaited call of the reward's ``ascore_batch``, one batch at a time. So the
completions of one context share one rubric even when different trainer ranks send them. At
most ``max_queue`` items are accepted and not yet answered; beyond that :meth:`Batcher.submit`
raises :class:`QueueFull` (the service answers 429).

Examples:
    >>> import asyncio
    >>> seen = []
    >>> async def score(items):
    ...     seen.append(len(items))
    ...     return [RewardResult(reward=0.5) for _ in items]
    >>> async def main():
    ...     batcher = Batcher(score, window_s=0.01)
    ...     await batcher.start()
    ...     a, b = await asyncio.gather(batcher.submit([("hi", "a")]), batcher.submit([("hi", "b")]))
    ...     await batcher.stop()
    ...     return [r.reward for r in a + b]
    >>> asyncio.run(main()), seen
    ([0.5, 0.5], [2])
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from care_sdk.errors import CareError, ConfigError
from care_sdk.types import RewardResult

__all__ = ["Batcher", "QueueFull", "error_id"]

logger = logging.getLogger("care_sdk")

ScoreItem = tuple[Any, ...]
"""An item the score function takes (the service's: context, reply and user profile); the batcher never looks inside."""


def error_id() -> str:
    """A new id for an unexpected error: the answer names it and the log line that holds the error's text carries it.

    Examples:
        >>> len(error_id()), error_id() != error_id()
        (12, True)
    """
    return uuid.uuid4().hex[:12]


class QueueFull(CareError):
    """More items wait than the service accepts; try again after ``retry_after`` seconds.

    Examples:
        >>> QueueFull("full").retry_after
        1.0
    """

    def __init__(self, message: str, retry_after: float = 1.0, *, closing: bool = False) -> None:
        self.retry_after = retry_after
        self.closing = closing
        """Whether the service is shutting down (answered 503) rather than busy (429)."""
        super().__init__(message)


@dataclass(eq=False)
class _Request:
    """One request's items: their results fill in as batches finish; the future is set by the last."""

    future: asyncio.Future[list[RewardResult]] = field(repr=False)
    results: list[RewardResult | None]
    left: int


@dataclass(eq=False)
class _Pending:
    item: ScoreItem
    request: _Request = field(repr=False)
    index: int
    at: float


class Batcher:
    """Scores items from many requests together, in windows, one batch at a time.

    Args:
        score: scores a list of items: a coroutine function (``AdaptiveReward.ascore_batch``),
            awaited in the event loop, or a plain function, called in a worker thread.
        window_s: how long to wait after the first item of a batch for more to arrive.
        max_batch: the most items scored in one call.
        max_queue: the most items accepted and not yet answered.
        on_batch: called with each batch's size and seconds taken (for metrics), in the event loop.

    Examples:
        >>> Batcher(lambda items: [], max_queue=4).depth
        0
    """

    def __init__(
        self,
        score: Callable[[list[ScoreItem]], Awaitable[Sequence[RewardResult]]]
        | Callable[[list[ScoreItem]], Sequence[RewardResult]],
        *,
        window_s: float = 0.01,
        max_batch: int = 64,
        max_queue: int = 256,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        if window_s < 0 or max_batch < 1 or max_queue < 1:
            raise ConfigError(
                f"window_s must be >= 0, max_batch and max_queue >= 1; got {window_s}, {max_batch}, {max_queue}"
            )
        self._score: Callable[[list[ScoreItem]], Awaitable[Sequence[RewardResult]]]
        if inspect.iscoroutinefunction(score):
            self._score = cast("Callable[[list[ScoreItem]], Awaitable[Sequence[RewardResult]]]", score)
        else:
            blocking = cast("Callable[[list[ScoreItem]], Sequence[RewardResult]]", score)

            async def in_thread(items: list[ScoreItem]) -> Sequence[RewardResult]:
                return await asyncio.to_thread(blocking, items)

            self._score = in_thread
        self.window_s = window_s
        self.max_batch = max_batch
        self.max_queue = max_queue
        self._on_batch = on_batch
        self._waiting: deque[_Pending] = deque()
        self._in_flight = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def depth(self) -> int:
        """Items accepted and not yet answered (waiting or being scored)."""
        return len(self._waiting) + self._in_flight

    async def start(self) -> None:
        """Start the scoring loop in the running event loop."""
        self._wake = asyncio.Event()
        self._closing = False
        self._task = asyncio.create_task(self._run(), name="care-batcher")

    async def stop(self) -> None:
        """Stop accepting items, finish every accepted one, then end the loop."""
        self._closing = True
        if self._wake is not None:
            self._wake.set()
        if self._task is not None:
            await self._task
            self._task = None

    def submit(self, items: Sequence[ScoreItem]) -> asyncio.Future[list[RewardResult]]:
        """Queue ``items``; the returned future holds their results in order.

        Raises:
            QueueFull: accepting them would put more than ``max_queue`` items in the queue, or
                the service is shutting down.
        """
        if self._wake is None or self._closing:
            raise QueueFull("the service is shutting down", closing=True)
        if self.depth + len(items) > self.max_queue:
            raise QueueFull(f"{self.depth} items are queued; at most {self.max_queue} are accepted")
        loop = asyncio.get_running_loop()
        request = _Request(loop.create_future(), [None] * len(items), len(items))
        if not items:
            request.future.set_result([])
            return request.future
        now = loop.time()
        self._waiting.extend(_Pending(item, request, i, now) for i, item in enumerate(items))
        if len(self._waiting) == len(items) or len(self._waiting) >= self.max_batch:
            self._wake.set()  # the first item opens a window; a full batch closes it
        return request.future

    async def _window(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait until the oldest waiting item has waited ``window_s``, ``max_batch`` items wait, or
        the service stops."""
        assert self._wake is not None
        while len(self._waiting) < self.max_batch and not self._closing:
            left = self._waiting[0].at + self.window_s - loop.time()
            if left <= 0:
                return
            self._wake.clear()
            try:
                async with asyncio.timeout(left):
                    await self._wake.wait()
            except TimeoutError:
                return

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            if not self._waiting:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._window(loop)
            batch = [self._waiting.popleft() for _ in range(min(self.max_batch, len(self._waiting)))]
            self._in_flight = len(batch)
            started = loop.time()
            try:
                results = list(await self._score([p.item for p in batch]))
                if len(results) != len(batch):
                    raise CareError(f"the reward returned {len(results)} results for {len(batch)} items")
            except Exception:
                incident = error_id()
                logger.exception("care serve: error %s: scoring a batch of %d items failed", incident, len(batch))
                results = [RewardResult.failed(f"scoring failed: internal error {incident}")] * len(batch)
            finally:
                self._in_flight = 0
            for pending, result in zip(batch, results, strict=True):
                request = pending.request
                request.results[pending.index] = result
                request.left -= 1
                if not request.left and not request.future.done():  # done: the request was cancelled
                    request.future.set_result(cast("list[RewardResult]", request.results))
            if self._on_batch is not None:
                self._on_batch(len(batch), loop.time() - started)
