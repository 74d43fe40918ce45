"""Plans and drivers: how the generator, the evaluator and add-ons talk to a backend, written once.

The generator, the evaluator, the weight readers of :mod:`care_sdk.addons` and the lab's simulated
users and judges all do the same thing: build requests, send them, parse the replies, retry the
ones that do not parse. Each writes that once, as a *plan*, and a *driver* runs it on a backend,
synchronously (:func:`drive`) or asynchronously (:func:`adrive`). Sync and async APIs therefore
share every line of logic, and a plan never touches the backend itself.

The protocol. A plan is a Python generator (:data:`Plan`) that:

- ``yield``\\s a :data:`Batch`: a list of :class:`~care_sdk.backends.base.GenerationRequest`
  (sent to the backend's ``generate``/``agenerate``) or a list of
  :class:`~care_sdk.backends.base.ForcedRequest` (sent to its
  :class:`~care_sdk.backends.base.ForcedReplies` capability), never both in one batch; the driver
  sends back one :class:`~care_sdk.backends.base.GenerationResult` per request, in order;
- ``yield from offload(call)``\\s a blocking call (a read of the model's hidden states, a file
  read, ...): the driver runs ``call()`` in place (:func:`drive`) or in a worker thread
  (:func:`adrive`, so it never blocks the event loop) and sends back its value;
  ``offload(call, acall)`` gives an async form too, which :func:`adrive` awaits instead (another
  component's batch method, which runs its own plan on its own backend);
- ``return``\\s one value per input, or the :class:`~care_sdk.errors.CareError` of that input
  (errors are values: one bad item never fails the batch; :func:`unwrap` raises it for a single
  call).

Plans compose with ``yield from``: :func:`parse_plan` is the request/parse/retry loop every
component uses, and a plan built on it can run another plan on its outcomes (the generator runs a
:class:`~care_sdk.addons.WeightReader`'s ``read`` plan this way).

Examples:
    A plan that asks for a number and retries a reply that is not one, driven both ways:

    >>> import asyncio
    >>> from care_sdk.backends.base import GenerationRequest
    >>> from care_sdk.testing import ScriptedBackend
    >>> def numbers(questions):
    ...     requests = [GenerationRequest(messages=(), max_tokens=4) for _ in questions]
    ...     return parse_plan(requests, lambda i, reply: int(reply.text), what="number", max_attempts=2)
    >>> drive(numbers(["n?"]), ScriptedBackend(["many", "42"]))
    [42]
    >>> asyncio.run(adrive(numbers(["n?", "m?"]), ScriptedBackend(["1", "2"])))
    [1, 2]
    >>> [error] = drive(numbers(["n?"]), ScriptedBackend(["many", "lots"]))  # errors are values
    >>> print(error)
    number reply invalid: invalid literal for int() with base 10: 'lots' (after 2 attempts)

    A hand-written plan: one batch, one offloaded call, one value per input:

    >>> def shouted(texts):
    ...     results = yield [GenerationRequest(messages=(), max_tokens=8) for _ in texts]
    ...     suffix = yield from offload(lambda: "!")
    ...     return [r.completions[0].text.upper() + suffix for r in results]
    >>> drive(shouted(["a", "b"]), ScriptedBackend(["hi", "yo"]))
    ['HI!', 'YO!']
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
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
from care_sdk.provenance import Tally

__all__ = [
    "RETRY_TEMPERATURE",
    "Batch",
    "Offload",
    "Plan",
    "adrive",
    "drive",
    "fewer_messages",
    "offload",
    "parse_plan",
    "ran_out_of_window",
    "retry_request",
    "unwrap",
]

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
"""What a plan sends at once: requests to decode, or forced replies to build (never both).

Examples:
    >>> from care_sdk.testing import ScriptedBackend
    >>> batch: Batch = [GenerationRequest(messages=(), max_tokens=8)]
    >>> ScriptedBackend(["hi"]).generate(batch)[0].text
    'hi'
"""

Plan = Generator[Batch | Offload, Any, list[T | CareError]]
"""A plan returning ``T`` per input: it yields request batches (sent back their results) and
:class:`Offload` calls (sent back their values), and returns one ``T`` or
:class:`~care_sdk.errors.CareError` per input.

Examples:
    >>> from care_sdk.testing import ScriptedBackend
    >>> def lengths(texts: list[str]) -> Plan[int]:
    ...     results = yield [GenerationRequest(messages=(), max_tokens=8) for _ in texts]
    ...     return [len(r.completions[0].text) for r in results]
    >>> drive(lengths(["a", "b"]), ScriptedBackend(["hi", "hello"]))
    [2, 5]
"""


def offload(call: Callable[[], R], acall: Callable[[], Awaitable[R]] | None = None) -> Generator[Offload, Any, R]:
    """Inside a plan, ``value = yield from offload(call, acall)``: ``call()`` run by the driver, or
    ``await acall()`` by the async driver when given (see :class:`Offload`).

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> def plan() -> Plan[str]:
        ...     text = yield from offload(lambda: "read from disk")
        ...     return [text]
        >>> drive(plan(), ScriptedBackend([]))
        ['read from disk']
    """
    value: R = yield Offload(call, acall)
    return value


RETRY_TEMPERATURE = 0.7
"""Sampling temperature used for retries when the first attempt was greedy.

Examples:
    >>> retry_request(GenerationRequest(messages=(), temperature=0.0), 1).temperature == RETRY_TEMPERATURE
    True
"""


def retry_request(request: RequestT, attempt: int) -> RequestT:
    """The request for a retry: a new seed and, for greedy decoding, some temperature.

    Attempt 0 is the request itself; attempt ``k`` adds ``k`` to its seed (when it has one) and
    samples at :data:`RETRY_TEMPERATURE` at least.

    Examples:
        >>> first = GenerationRequest(messages=(), temperature=0.0, seed=7)
        >>> retry_request(first, 0) is first
        True
        >>> again = retry_request(first, 2)
        >>> again.seed, again.temperature
        (9, 0.7)
    """
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
    tallies: Sequence[Tally] | None = None,
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

    Args:
        requests: one request per input.
        parse: ``parse(index, completion)``, the input's value; raises ``ValueError`` for a reply
            to retry.
        what: what is asked for, in error messages and logs (``"rubric"``, ``"evaluation"``).
        max_attempts: unusable replies per input before it becomes an :class:`OutputError`.
        accept: ``accept(index, value)``, ``None`` or the reason a parsed value is refused.
        shorter: ``shorter(index)``, the input's request with fewer context messages (see
            :func:`fewer_messages`), or ``None``.
        tallies: one :class:`~care_sdk.provenance.Tally` per input, or ``None``: each counts every
            request sent for its input, the tokens its backend reported and the input's share of
            each batch's wall time (split evenly among the batch's requests; see
            :mod:`care_sdk.provenance`).

    Returns:
        A plan returning the parsed value or the :class:`~care_sdk.errors.CareError` of each input.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> requests = [GenerationRequest(messages=(), max_tokens=4) for _ in range(2)]
        >>> even = parse_plan(requests, lambda i, c: int(c.text), what="number", max_attempts=2,
        ...                   accept=lambda i, n: None if n % 2 == 0 else "odd")
        >>> drive(even, ScriptedBackend(["4", "3", "8"]))
        [4, 8]
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
        started = time.perf_counter()
        results: list[GenerationResult] = yield batch
        share = (time.perf_counter() - started) / len(batch)
        again: list[int] = []
        for i, result in zip(pending, results, strict=True):
            if tallies is not None:
                tallies[i].add(result.usage, share)
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
    replies to ``forced_replies``, and an :class:`Offload` is called in place.

    Raises:
        ConfigError: the plan yields forced replies and ``backend`` has no
            :class:`~care_sdk.backends.base.ForcedReplies` capability.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> plan = parse_plan([GenerationRequest(messages=())], lambda i, c: c.text, what="echo", max_attempts=1)
        >>> drive(plan, ScriptedBackend(["hello"]))
        ['hello']
    """
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
    async form, in a worker thread).

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> import asyncio
        >>> plan = parse_plan([GenerationRequest(messages=())], lambda i, c: c.text, what="echo", max_attempts=1)
        >>> asyncio.run(adrive(plan, ScriptedBackend(["hello"])))
        ['hello']
    """
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
    """Return ``value``, or raise it when it is an error (single-item calls raise; batches don't).

    Examples:
        >>> unwrap(3)
        3
        >>> unwrap(OutputError("rubric reply invalid", attempts=2))
        Traceback (most recent call last):
        ...
        care_sdk.errors.OutputError: rubric reply invalid (after 2 attempts)
    """
    if isinstance(value, CareError):
        raise value
    return value
