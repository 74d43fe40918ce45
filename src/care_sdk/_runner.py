"""One event loop for sync callers: the SDK's sync forms run their async forms on it.

A sync call that needs async I/O (the OpenAI backend's ``generate``, ``RemoteReward.score_batch``,
a backend that implements only ``agenerate``) hands its coroutine to :func:`run_sync`, which runs
it on one long-lived loop in a daemon thread. Clients built for that loop (their connection
pools) are therefore kept from one sync call to the next, instead of a new loop, new clients and
new connections per call; and a sync call works from inside a running event loop (a notebook),
which it blocks until the result is there, as any sync call does.

:class:`PerLoop` keeps one value per event loop (an async client, whose connections belong to
the loop it was opened on) and closes each on its own loop.

Examples:
    >>> async def two() -> int:
    ...     return 2
    >>> run_sync(two())
    2
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["PerLoop", "close_on_loop", "run_sync", "runner_loop"]

_LOCK = threading.Lock()
_RUNNER: tuple[int, asyncio.AbstractEventLoop] | None = None
_PENDING: set[asyncio.Future[Any]] = set()  # closings scheduled on a running loop, kept until done


def runner_loop() -> asyncio.AbstractEventLoop:
    """The loop :func:`run_sync` runs coroutines on, started on first use (again in a forked child).

    Examples:
        >>> runner_loop() is runner_loop(), runner_loop().is_running()
        (True, True)
    """
    global _RUNNER
    with _LOCK:
        if _RUNNER is None or _RUNNER[0] != os.getpid() or _RUNNER[1].is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="care-sdk-runner", daemon=True).start()
            _RUNNER = (os.getpid(), loop)
        return _RUNNER[1]


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even inside a running event loop.

    The coroutine runs on :func:`runner_loop`; the caller's thread waits for it (an interrupt
    there cancels it). Called from a coroutine already running on that loop, it runs the
    coroutine on a loop of its own in a new thread instead, rather than wait on itself.

    Examples:
        >>> import asyncio
        >>> async def inside() -> int:  # a sync call made from async code
        ...     async def three() -> int:
        ...         return 3
        ...     return run_sync(three())
        >>> asyncio.run(inside())
        3
    """
    loop = runner_loop()
    try:
        current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    if current is loop:
        return _run_in_new_thread(coro)
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def _run_in_new_thread(coro: Coroutine[Any, Any, T]) -> T:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="care-sdk-run-sync")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def close_on_loop(close: Callable[[], Awaitable[Any]], loop: asyncio.AbstractEventLoop | None) -> None:
    """Run ``close()`` (an async client's closing) on the loop the client belongs to, from any thread.

    Scheduled there when that loop runs this thread's code, awaited there when it runs in another
    thread, run to completion when it is idle. A loop that is closed has no way left to close its
    connections: nothing is done.

    Examples:
        >>> closed = []
        >>> async def close() -> None:
        ...     closed.append(True)
        >>> close_on_loop(close, runner_loop()); closed
        [True]
    """
    if loop is None or loop.is_closed():
        return
    if not loop.is_running():
        loop.run_until_complete(close())
        return
    try:
        current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    if current is loop:
        task = loop.create_task(_awaited(close))
        _PENDING.add(task)
        task.add_done_callback(_PENDING.discard)
    else:
        asyncio.run_coroutine_threadsafe(_awaited(close), loop).result(timeout=30)


async def _awaited(close: Callable[[], Awaitable[Any]]) -> None:
    await close()


class PerLoop(Generic[T]):
    """One value per event loop, made on first use in that loop and closed on it.

    Args:
        make: builds the value for the running loop.
        close: closes a value (a coroutine function), or ``None`` when values need no closing.

    Examples:
        >>> import asyncio
        >>> made = PerLoop(lambda: object())
        >>> async def twice() -> bool:
        ...     return made.get() is made.get()
        >>> asyncio.run(twice()), run_sync(twice())
        (True, True)
    """

    def __init__(self, make: Callable[[], T], close: Callable[[T], Awaitable[Any]] | None = None) -> None:
        self._make = make
        self._close = close
        self._values: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = weakref.WeakKeyDictionary()

    def get(self) -> T:
        """The running loop's value (made now if it has none)."""
        loop = asyncio.get_running_loop()
        value = self._values.get(loop)
        if value is None:
            value = self._values[loop] = self._make()
        return value

    def values(self) -> list[T]:
        """The values made so far (one per loop still alive), not closed yet."""
        return list(self._values.values())

    async def aclose(self) -> None:
        """Close the running loop's value now, then every other value (see :meth:`close`)."""
        value = self._values.pop(asyncio.get_running_loop(), None)
        if value is not None and self._close is not None:
            await self._close(value)
        self.close()

    def close(self) -> None:
        """Close every value on its own loop (:func:`close_on_loop`) and forget them all."""
        values, self._values = list(self._values.items()), weakref.WeakKeyDictionary()
        closer = self._close
        if closer is None:
            return
        for loop, value in values:
            close_on_loop(functools.partial(closer, value), loop)
