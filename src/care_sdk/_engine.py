"""The request/parse/retry loop shared by the generator and the evaluator, written once.

A *plan* is a generator that yields batches of requests and receives their results; it returns
one parsed value or :class:`CareError` per input. A batch holds requests to decode
(:class:`GenerationRequest`, sent to ``generate``) or forced replies to build
(:class:`ForcedRequest`, sent to the backend's :class:`ForcedReplies` capability), not both. A
plan can also yield an :class:`Offload`, a call it receives the value of: a blocking one (a read of
the model's hidden states, ...), or a sync and an async form of one (another component's batch
method, which runs its own plan on its own backend). :func:`drive` and :func:`adrive` run a plan
on a backend synchronously or asynchronously (a blocking call or forced replies in a worker thread,
so they never block the event loop), so sync and async APIs share every line of logic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, TypeVar, cast

from care_sdk.backends.base import (
    Backend,
    Completion,
    ForcedReplies,
    ForcedRequest,
    GenerationRequest,
    GenerationResult,
    Request,
)
from care_sdk.errors import CareError, ConfigError, ContextOverflowError, OutputError

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
RequestT = TypeVar("RequestT", bound=Request)


@dataclasses.dataclass(frozen=True)
class Offload:
    """A call a plan hands to its driver, which sends back its value: :func:`drive` calls ``call``
    in place; :func:`adrive` awaits ``acall`` when there is one, else calls ``call`` in a worker
    thread. Yield it through :func:`offload`, which types the value.

    Examples:
        >>> import asyncio
        >>> from care_sdk.testing import ScriptedBackend
        >>> def plan():
        ...     doubled = yield from offload(lambda: 2 * 21)
        ...     return [doubled]
        >>> drive(plan(), ScriptedBackend([]))
        [42]
        >>> async def answer():
        ...     return "async"
        >>> def both():
        ...     return [(yield from offload(lambda: "sync", answer))]
        >>> drive(both(), ScriptedBackend([])), asyncio.run(adrive(both(), ScriptedBackend([])))
        (['sync'], ['async'])
    """

    call: Callable[[], Any]
    acall: Callable[[], Awaitable[Any]] | None = None


Batch = list[GenerationRequest] | list[ForcedRequest]
"""What a plan sends at once: requests to decode, or forced replies to build."""

Plan = Generator[Batch | Offload, Any, list[T | CareError]]
"""Yields request batches (sent back their results) and :class:`Offload` calls (sent back their values)."""


def offload(call: Callable[[], R], acall: Callable[[], Awaitable[R]] | None = None) -> Generator[Offload, Any, R]:
    """Inside a plan, ``value = yield from offload(call, acall)``: ``call()`` run by the driver, or
    ``await acall()`` by the async driver when given (see :class:`Offload`)."""
    value: R = yield Offload(call, acall)
    return value


RETRY_TEMPERATURE = 0.7
"""Sampling temperature used for retries when the first attempt was greedy."""


def retry_request(request: RequestT, attempt: int) -> RequestT:
    """The request for a retry: a new seed and, for greedy decoding, some temperature."""
    if attempt == 0:
        return request
    return dataclasses.replace(
        request,
        seed=None if request.seed is None else request.seed + attempt,
        temperature=max(request.temperature, RETRY_TEMPERATURE),
    )


def ran_out_of_window(result: GenerationResult, request: Request) -> bool:
    """Whether a reply cut off for length (``finish_reason="length"``) stopped before ``max_tokens``:
    the model's context window filled up (a backend that holds the model, llama.cpp or
    transformers, starts a prompt that fits and stops where the window ends), so the reply has no
    room whatever the budget.

    Examples:
        >>> from care_sdk.backends.base import Completion
        >>> request = GenerationRequest(messages=(), max_tokens=512)
        >>> reply = Completion(text='{"weights": {', finish_reason="length")
        >>> cut = GenerationResult(completions=(reply,), usage={"completion_tokens": 41})
        >>> ran_out_of_window(cut, request), ran_out_of_window(cut, dataclasses.replace(request, max_tokens=41))
        (True, False)
    """
    if not isinstance(request, GenerationRequest) or not result.completions:
        return False
    if result.completions[0].finish_reason != "length":
        return False
    used = result.usage.get("completion_tokens")
    return request.n == 1 and used is not None and used < request.max_tokens


def parse_plan(
    requests: Sequence[RequestT],
    parse: Callable[[int, Completion], T],
    *,
    what: str,
    max_attempts: int,
    accept: Callable[[int, T], str | None] | None = None,
    shorter: Callable[[int], RequestT | None] | None = None,
) -> Plan[T]:
    """Send ``requests``; parse each reply with ``parse(index, completion)``; retry the ones that fail.

    A reply that raises ``ValueError`` is retried up to ``max_attempts`` in all, then becomes an
    :class:`OutputError`. ``accept(index, value)``, when given, checks a parsed value: it returns
    ``None`` to accept it, or the reason it refuses it; a refused reply is retried like one that
    does not parse (its :class:`OutputError` keeps the last reply as ``raw``). A backend error
    (already retried by the backend's own retry layer) is final for that item, except a
    :class:`ContextOverflowError` when ``shorter`` is given: ``shorter(index)`` returns the item's
    request with fewer context messages, sent instead at no cost in attempts, or ``None`` when there
    is nothing left to drop (the error is then final). A reply that does not parse because the
    context window filled up before ``max_tokens`` (:func:`ran_out_of_window`) is sent with fewer
    messages the same way; with nothing left to drop it counts as a failed attempt. A request
    without a ``purpose`` is sent with ``what`` as its purpose.
    """

    def with_purpose(request: RequestT) -> RequestT:
        return request if request.purpose is not None else dataclasses.replace(request, purpose=what)

    def sent_shorter(i: int, why: object, again: list[int]) -> bool:
        """Item ``i`` queued again with fewer context messages, if ``shorter`` has one to drop."""
        smaller = shorter(i) if shorter is not None else None
        if smaller is None:
            return False
        logger.info("%s %d: %s; sent again with fewer context messages", what, i, why)
        sent[i] = with_purpose(smaller)
        again.append(i)
        return True

    sent: list[RequestT] = [with_purpose(r) for r in requests]
    outcomes: list[T | CareError | None] = [None] * len(sent)
    attempts = [0] * len(sent)
    pending = list(range(len(sent)))
    while pending:
        batch: list[Any] = [retry_request(sent[i], attempts[i]) for i in pending]
        results: list[GenerationResult] = yield batch
        again: list[int] = []
        for i, result in zip(pending, results, strict=True):
            if result.error is not None:
                if not (isinstance(result.error, ContextOverflowError) and sent_shorter(i, result.error, again)):
                    outcomes[i] = result.error
                continue
            completion = result.completions[0]
            try:
                value = parse(i, completion)
                refused = accept(i, value) if accept is not None else None
                if refused is not None:
                    raise ValueError(f"not accepted: {refused}")
                outcomes[i] = value
            except ValueError as exc:
                window_full = ran_out_of_window(result, sent[i])
                if window_full and sent_shorter(i, "the context window filled up", again):
                    continue
                reason = str(exc)
                if window_full:
                    reason += " (the reply filled the context window)"
                elif completion.finish_reason == "length":
                    reason += " (the reply hit max_tokens)"
                attempts[i] += 1
                if attempts[i] < max_attempts:
                    again.append(i)
                else:
                    outcomes[i] = OutputError(
                        f"{what} reply invalid: {reason}", attempts=max_attempts, raw=completion.text
                    )
        pending = again
    assert all(o is not None for o in outcomes)
    return outcomes  # type: ignore[return-value]


def fewer_messages(
    shown: Callable[[int], int], build: Callable[[int, int], RequestT]
) -> Callable[[int], RequestT | None]:
    """A ``shorter`` for :func:`parse_plan`: item ``i``'s request rebuilt by ``build(i, keep)`` with
    one context message fewer than it last showed (``shown(i)`` at first, asked only once the item
    overflows), ``None`` once it shows one.

    Examples:
        >>> shorter = fewer_messages(lambda i: 3, lambda i, keep: GenerationRequest(messages=(), max_tokens=keep))
        >>> [getattr(shorter(0), "max_tokens", None) for _ in range(3)]
        [2, 1, None]
    """
    left: dict[int, int] = {}

    def shorter(i: int) -> RequestT | None:
        if i not in left:
            left[i] = shown(i)
        if left[i] <= 1:
            return None
        left[i] -= 1
        return build(i, left[i])

    return shorter


def _forced_capability(backend: Backend) -> ForcedReplies:
    if not isinstance(backend, ForcedReplies):
        raise ConfigError(f"forced replies need a backend that builds them (ForcedReplies); {backend!r} does not")
    return backend


def _is_forced(batch: Batch) -> bool:
    """Whether a batch holds forced replies (a batch that mixes both kinds is a plan's bug)."""
    forced = [isinstance(r, ForcedRequest) for r in batch]
    if any(forced) and not all(forced):
        raise TypeError("a batch mixes forced replies and requests to decode")
    return bool(forced) and forced[0]


def drive(plan: Plan[T], backend: Backend) -> list[T | CareError]:
    """Run a plan with the backend's blocking API: a batch to decode goes to ``generate``, forced
    replies to ``forced_replies``, and an :class:`Offload` is called in place."""
    try:
        step = next(plan)
        while True:
            if isinstance(step, Offload):
                value = step.call()
            elif _is_forced(step):
                value = _forced_capability(backend).forced_replies(cast("list[ForcedRequest]", step))
            else:
                value = backend.generate(cast("list[GenerationRequest]", step))
            step = plan.send(value)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def adrive(plan: Plan[T], backend: Backend) -> list[T | CareError]:
    """Run a plan with the backend's async API (forced replies, and an :class:`Offload` without an
    async form, in a worker thread)."""
    try:
        step = next(plan)
        while True:
            if isinstance(step, Offload):
                value = await (step.acall() if step.acall is not None else asyncio.to_thread(step.call))
            elif _is_forced(step):
                forced = _forced_capability(backend).forced_replies
                value = await asyncio.to_thread(forced, cast("list[ForcedRequest]", step))
            else:
                value = await backend.agenerate(cast("list[GenerationRequest]", step))
            step = plan.send(value)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def unwrap(value: T | CareError) -> T:
    """Return ``value``, or raise it when it is an error (single-item calls raise; batches don't)."""
    if isinstance(value, CareError):
        raise value
    return value
