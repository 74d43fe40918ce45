"""The one retry layer for network backends: tenacity, exponential backoff with jitter, ``Retry-After``.

A call is retried only when it raises a :class:`~care_sdk.errors.BackendError` whose ``retryable``
flag is set (rate limits, 408/409/5xx, timeouts, dropped connections, unreadable bodies). The wait
before the next attempt is the server's ``Retry-After`` when it sent one (capped), otherwise
exponential backoff with random jitter. When the attempts run out, the last error is raised
with the attempt count in its message.
"""

from __future__ import annotations

import email.utils
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_base

from care_sdk.errors import BackendError, ConfigError

__all__ = ["RetryPolicy", "call_with_retries", "parse_retry_after"]

T = TypeVar("T")

logger = logging.getLogger("care_sdk")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a failed backend call.

    Examples:
        >>> policy = RetryPolicy(max_retries=2, initial_delay=0.1)
        >>> policy.max_attempts
        3
    """

    max_retries: int = 4
    """Retries after the first attempt (0 disables retrying)."""
    initial_delay: float = 0.5
    """First backoff delay in seconds; doubles with each retry."""
    max_delay: float = 20.0
    """Upper bound of one backoff delay in seconds."""
    jitter: float = 0.5
    """Random extra delay in seconds, up to this much, added to each backoff."""
    max_retry_after: float = 60.0
    """Upper bound in seconds on a server's ``Retry-After`` that is honoured."""

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        for name in ("initial_delay", "max_delay", "jitter", "max_retry_after"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"{name} must be a finite number >= 0, got {value}")

    @property
    def max_attempts(self) -> int:
        """The first attempt plus the retries."""
        return self.max_retries + 1


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Read how long a server asked to wait from ``retry-after-ms`` or ``Retry-After``.

    ``Retry-After`` may be a number of seconds or an HTTP date. Header names are matched
    case-insensitively. Returns ``None`` when no usable value is present.

    Examples:
        >>> parse_retry_after({"Retry-After": "2"})
        2.0
        >>> parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:05 GMT"}, now=1445412480.0)
        5.0
        >>> parse_retry_after({"Retry-After": "soon"}) is None
        True
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            ms = float(raw_ms)
        except ValueError:
            ms = math.nan
        if math.isfinite(ms) and ms >= 0:
            return ms / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
        return max(0.0, seconds)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


class _WaitRetryAfter(wait_base):
    """Wait for the server's ``Retry-After`` when the error carries one, else back off with jitter."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy

    def __call__(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, BackendError) and exc.retry_after is not None:
            return min(max(0.0, exc.retry_after), self._policy.max_retry_after)
        policy = self._policy
        exponent = min(retry_state.attempt_number - 1, 62)
        backoff = min(policy.max_delay, policy.initial_delay * 2.0**exponent)
        return backoff + random.uniform(0.0, policy.jitter)


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, BackendError) and exc.retryable


async def call_with_retries(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    what: str = "request",
) -> T:
    """Await ``fn()`` and retry it under ``policy`` while it raises a retryable :class:`BackendError`.

    A non-retryable error is raised at once. When every attempt failed, the last error is raised
    again with ``after N attempts`` added to its message (its status, provider and hint kept).

    Examples:
        >>> import asyncio
        >>> calls = []
        >>> async def flaky() -> str:
        ...     calls.append(1)
        ...     if len(calls) < 3:
        ...         raise BackendError("busy", retryable=True, status_code=503, retry_after=0)
        ...     return "ok"
        >>> asyncio.run(call_with_retries(flaky, RetryPolicy(max_retries=3)))
        'ok'
        >>> len(calls)
        3
    """

    def log_retry(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        logger.info(
            "%s failed (attempt %d/%d): %s; retrying in %.2fs",
            what,
            state.attempt_number,
            policy.max_attempts,
            exc,
            delay,
        )

    retrying = AsyncRetrying(
        retry=retry_if_exception(_is_retryable),
        stop=stop_after_attempt(policy.max_attempts),
        wait=_WaitRetryAfter(policy),
        before_sleep=log_retry,
        reraise=True,
    )
    try:
        return await retrying(fn)
    except BackendError as exc:
        attempts = retrying.statistics.get("attempt_number", 1)
        if not exc.retryable or attempts <= 1:
            raise
        final = BackendError(f"{exc}; gave up after {attempts} attempts", retryable=True)
        final.status_code = exc.status_code
        final.provider = exc.provider
        final.hint = exc.hint
        final.retry_after = exc.retry_after
        raise final from exc
