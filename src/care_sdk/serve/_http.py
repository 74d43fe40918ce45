"""The service's HTTP layer on Starlette's own parts: bearer-token authentication, request metrics
and the error answers (exception handlers).

Every error is answered as JSON ``{"error": ..., "field": ...}``. An unexpected exception is
answered 500 with an error id and no text of its own; the log line that holds its text and
traceback carries the same id.

Examples:
    >>> bytes(error_response(422, "must be a string", "query[3]").body)
    b'{"error":"must be a string","field":"query[3]"}'
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Mapping

from starlette.authentication import AuthCredentials, AuthenticationBackend, BaseUser, SimpleUser
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from care_sdk.serve.batching import QueueFull, error_id
from care_sdk.serve.metrics import ServeMetrics
from care_sdk.serve.protocol import RequestError

__all__ = [
    "SCORE_SCOPE",
    "BearerToken",
    "RequestMetrics",
    "error_response",
    "internal_error",
    "queue_full",
    "request_error",
    "unauthorised",
]

logger = logging.getLogger("care_sdk")

SCORE_SCOPE = "score"
"""The authentication scope every scoring route requires (``requires(SCORE_SCOPE, status_code=401)``)."""


def error_response(
    status: int, message: str, field: str | None = None, headers: Mapping[str, str] | None = None
) -> Response:
    """The service's error answer: ``{"error": message, "field": field}`` with ``status``.

    Examples:
        >>> error_response(413, "too big", "body").status_code
        413
    """
    return JSONResponse({"error": message, "field": field}, status_code=status, headers=headers)


class BearerToken(AuthenticationBackend):
    """Grants the scoring scope to a request carrying ``Authorization: Bearer <token>`` (compared in
    constant time), or to every request when ``token`` is ``None``.

    Examples:
        >>> import asyncio
        >>> from starlette.requests import HTTPConnection
        >>> conn = HTTPConnection({"type": "http", "headers": [(b"authorization", b"Bearer s3cret")]})
        >>> asyncio.run(BearerToken("s3cret").authenticate(conn))[0].scopes
        ['score']
        >>> asyncio.run(BearerToken("other").authenticate(conn)) is None
        True
    """

    def __init__(self, token: str | None) -> None:
        self._expected = f"Bearer {token}".encode() if token else None

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        """The scoring scope for a request with the token; ``None`` (unauthenticated) without it."""
        if self._expected is not None:
            given = conn.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, self._expected):
                return None
        return AuthCredentials([SCORE_SCOPE]), SimpleUser("client")


class RequestMetrics:
    """ASGI middleware that counts each answered request to a named endpoint and times it.

    Args:
        app: the application it wraps.
        metrics: where requests are counted (``care_serve_requests_total{endpoint,status}``).
        endpoints: ``POST`` path to endpoint name; other requests pass uncounted.

    Examples:
        >>> from starlette.applications import Starlette
        >>> from starlette.middleware import Middleware
        >>> metrics = ServeMetrics()
        >>> app = Starlette(middleware=[Middleware(RequestMetrics, metrics=metrics, endpoints={"/v1/score": "score"})])
    """

    def __init__(self, app: ASGIApp, metrics: ServeMetrics, endpoints: Mapping[str, str]) -> None:
        self.app = app
        self.metrics = metrics
        self.endpoints = dict(endpoints)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, noting the status of the answer and the time it took."""
        name = self.endpoints.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if name is None:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def noting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noting)
        finally:
            self.metrics.observe_request(name, status, time.perf_counter() - started)


async def unauthorised(request: Request, exc: Exception) -> Response:
    """401 for a scoring request without the bearer token (never naming the token).

    Examples:
        >>> import asyncio
        >>> request = Request({"type": "http", "method": "POST", "path": "/v1/score", "headers": []})
        >>> asyncio.run(unauthorised(request, Exception())).headers["www-authenticate"]
        'Bearer'
    """
    return error_response(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})


async def request_error(request: Request, exc: Exception) -> Response:
    """A body the service cannot read: its status (400, 413 or 422) and the field it names.

    Examples:
        >>> import asyncio
        >>> request = Request({"type": "http", "method": "POST", "path": "/v1/score", "headers": []})
        >>> asyncio.run(request_error(request, RequestError("must be a list", field="query"))).status_code
        422
    """
    assert isinstance(exc, RequestError)
    return error_response(exc.status, exc.reason, exc.field)


async def queue_full(request: Request, exc: Exception) -> Response:
    """429 while the queue is full, 503 while shutting down; both with ``Retry-After``.

    Examples:
        >>> import asyncio
        >>> request = Request({"type": "http", "method": "POST", "path": "/v1/score", "headers": []})
        >>> asyncio.run(queue_full(request, QueueFull("full", retry_after=2.5))).headers["retry-after"]
        '2'
    """
    assert isinstance(exc, QueueFull)
    status = 503 if exc.closing else 429
    return error_response(status, str(exc), headers={"Retry-After": str(int(max(1, exc.retry_after)))})


async def internal_error(request: Request, exc: Exception) -> Response:
    """500 for an unexpected exception: the answer names an error id, the log line with the same id
    holds the exception's text and traceback (the answer never does).

    Examples:
        >>> import asyncio
        >>> request = Request({"type": "http", "method": "POST", "path": "/v1/score", "headers": []})
        >>> answer = asyncio.run(internal_error(request, RuntimeError("secret detail")))
        >>> answer.status_code, b"secret detail" in answer.body, b"internal error " in answer.body
        (500, False, True)
    """
    incident = error_id()
    logger.error(
        "care serve: error %s on %s %s: %s: %s",
        incident,
        request.method,
        request.url.path,
        type(exc).__name__,
        exc,
        exc_info=exc,
    )
    return error_response(500, f"internal error {incident} (the service's log has its details)")
