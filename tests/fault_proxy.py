"""A fault-injecting HTTP proxy for tests: loopback only, deterministic schedule, stops by itself.

The proxy sits between an OpenAI-compatible client and a real server. Every POST it receives is
numbered (1, 2, 3, ...) and the schedule decides, from that number and the request's JSON body,
whether to pass it through or inject a fault:

- ``Fault.status(429, retry_after="1")``: answer with that status (and ``Retry-After``) at once
- ``Fault.drop()``: read the request, then close the connection without answering
- ``Fault.slow(delay)``: wait ``delay`` seconds (past the client's timeout), then close
- ``Fault.bad_json()``: answer 200 with a body that is not valid JSON
- ``Fault.bad_content(text)``: forward to the server, then replace every choice's message
  content with ``text`` (not JSON, or JSON that does not follow the requested schema)

GET requests (``/v1/models``) pass through unnumbered. The proxy shuts down when its context
exits or after ``max_lifetime`` seconds, whichever comes first.

Example:
    >>> with FaultProxy("http://127.0.0.1:9", every(2, Fault.status(503), limit=1)) as proxy:
    ...     proxy.base_url.startswith("http://127.0.0.1:")
    True
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

__all__ = [
    "Fault",
    "FaultProxy",
    "LoopbackURLs",
    "ProxyEvent",
    "Schedule",
    "at",
    "combine",
    "every",
    "reject_json_schema",
]

FaultKind = Literal["status", "drop", "slow", "bad_json", "bad_content"]
_HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "proxy-connection", "upgrade", "te"}
)


@dataclass(frozen=True)
class Fault:
    """One injected failure; build it with the class methods."""

    kind: FaultKind
    code: int = 500
    retry_after: str | None = None
    message: str = "injected fault"
    delay: float = 0.0
    text: str = ""

    @classmethod
    def status(cls, code: int, *, retry_after: str | None = None, message: str | None = None) -> Fault:
        """Answer ``code`` with an OpenAI-style error body; ``{authorization}`` in the message echoes that header."""
        return cls("status", code=code, retry_after=retry_after, message=message or f"injected HTTP {code}")

    @classmethod
    def drop(cls) -> Fault:
        """Close the connection without answering."""
        return cls("drop")

    @classmethod
    def slow(cls, delay: float) -> Fault:
        """Wait ``delay`` seconds, then close the connection without answering."""
        return cls("slow", delay=delay)

    @classmethod
    def bad_json(cls) -> Fault:
        """Answer 200 with a truncated, invalid JSON body."""
        return cls("bad_json")

    @classmethod
    def bad_content(cls, text: str = "this is not the JSON you asked for") -> Fault:
        """Forward, then replace each choice's content with ``text``."""
        return cls("bad_content", text=text)


Schedule = Callable[[int, Mapping[str, Any]], "Fault | None"]
"""Decides the fault (or ``None``) for POST number ``n`` (from 1) with JSON body ``payload``."""


def every(k: int, fault: Fault, *, limit: int | None = None, offset: int = 0) -> Schedule:
    """Inject ``fault`` on every ``k``-th POST (n = offset + k, offset + 2k, ...), at most ``limit`` times."""
    if k < 1:
        raise ValueError("k must be >= 1")

    def schedule(n: int, payload: Mapping[str, Any]) -> Fault | None:
        m = n - offset
        if m <= 0 or m % k:
            return None
        if limit is not None and m // k > limit:
            return None
        return fault

    return schedule


def at(faults: Mapping[int, Fault]) -> Schedule:
    """Inject ``faults[n]`` on POST number ``n``; pass everything else through."""
    table = dict(faults)
    return lambda n, payload: table.get(n)


def reject_json_schema(status: int = 400) -> Schedule:
    """Reject every request that asks for ``response_format`` type ``json_schema``, as some servers do."""
    fault = Fault.status(status, message="response_format type 'json_schema' is not supported by this server")

    def schedule(n: int, payload: Mapping[str, Any]) -> Fault | None:
        response_format = payload.get("response_format")
        if isinstance(response_format, Mapping) and response_format.get("type") == "json_schema":
            return fault
        return None

    return schedule


def combine(*schedules: Schedule) -> Schedule:
    """The first fault any of ``schedules`` picks."""

    def schedule(n: int, payload: Mapping[str, Any]) -> Fault | None:
        for s in schedules:
            fault = s(n, payload)
            if fault is not None:
                return fault
        return None

    return schedule


@dataclass
class ProxyEvent:
    """What happened to one POST."""

    n: int
    path: str
    fault: FaultKind | None
    status: int | None
    payload: dict[str, Any] = field(repr=False, default_factory=dict)


class LoopbackURLs:
    """The addresses of a server on 127.0.0.1, from the class's ``port``."""

    if TYPE_CHECKING:

        @property
        def port(self) -> int: ...

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``, the OpenAI base URL."""
        return f"{self.url}/v1"


class FaultProxy(LoopbackURLs):
    """A threaded HTTP proxy on 127.0.0.1 that injects faults by schedule.

    Args:
        upstream: The server's root URL, e.g. ``http://127.0.0.1:8000``.
        schedule: Which POSTs to break; ``None`` passes everything through.
        max_lifetime: Seconds after which the proxy shuts itself down.
        upstream_timeout: Seconds to wait for the upstream server.
    """

    def __init__(
        self,
        upstream: str,
        schedule: Schedule | None = None,
        *,
        max_lifetime: float = 1800.0,
        upstream_timeout: float = 600.0,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the fault proxy only forwards to loopback addresses, not {upstream!r}")
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.schedule = schedule
        self.max_lifetime = max_lifetime
        self.upstream_timeout = upstream_timeout
        self.events: list[ProxyEvent] = []
        self.errors: list[str] = []
        """Unexpected exceptions in the proxy itself (should stay empty)."""
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._count = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None
        self._stopping = threading.Event()

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the proxy listens on."""
        assert self._server is not None, "the proxy is not running"
        return int(self._server.server_address[1])

    def start(self) -> FaultProxy:
        """Start serving in a background thread."""
        handler = _make_handler(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.max_lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        """Stop serving; safe to call twice."""
        self._stopping.set()
        if self._timer is not None:
            self._timer.cancel()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- bookkeeping ---------------------------------------------------------------------

    def faults(self, kind: FaultKind | None = None) -> list[ProxyEvent]:
        """The events where a fault was injected (of ``kind``, when given)."""
        with self._lock:
            return [e for e in self.events if e.fault is not None and (kind is None or e.fault == kind)]

    @property
    def requests(self) -> int:
        """How many POSTs arrived."""
        with self._lock:
            return self._count

    def _next(self, path: str, payload: dict[str, Any]) -> tuple[ProxyEvent, Fault | None]:
        with self._lock:
            self._count += 1
            n = self._count
        fault = self.schedule(n, payload) if self.schedule is not None else None
        event = ProxyEvent(n=n, path=path, fault=fault.kind if fault else None, status=None, payload=payload)
        with self._lock:
            self.events.append(event)
        return event, fault

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _forward(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=self.upstream_timeout)
        try:
            out_headers = {k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS}
            out_headers["Content-Length"] = str(len(body))
            conn.request(method, path, body=body if body else None, headers=out_headers)
            response = conn.getresponse()
            data = response.read()
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_HEADERS]
            return response.status, kept, data
        finally:
            conn.close()

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set() and time.monotonic() < deadline:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


def _make_handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _read_body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _reply(self, status: int, body: bytes, headers: list[tuple[str, str]] | None = None) -> None:
            self.send_response(status)
            for key, value in headers or [("Content-Type", "application/json")]:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()

        def _drop(self) -> None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def do_GET(self) -> None:
            proxy._enter()
            try:
                status, headers, data = proxy._forward("GET", self.path, dict(self.headers), b"")
                self._reply(status, data, headers)
            finally:
                proxy._leave()

        def do_POST(self) -> None:
            proxy._enter()
            try:
                self._post()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            except Exception as exc:  # a proxy bug, not an injected fault: make it visible to the test
                proxy.errors.append(f"{type(exc).__name__}: {exc}")
                raise
            finally:
                proxy._leave()

        def _post(self) -> None:
            body = self._read_body()
            try:
                payload = json.loads(body) if body else {}
            except json.JSONDecodeError:
                payload = {}
            event, fault = proxy._next(self.path, payload if isinstance(payload, dict) else {})
            if fault is None:
                status, headers, data = proxy._forward("POST", self.path, dict(self.headers), body)
                event.status = status
                self._reply(status, data, headers)
                return
            if fault.kind == "status":
                message = fault.message.replace("{authorization}", self.headers.get("Authorization", ""))
                error = {"error": {"message": message, "type": "injected", "code": fault.code}}
                headers = [("Content-Type", "application/json")]
                if fault.retry_after is not None:
                    headers.append(("Retry-After", fault.retry_after))
                event.status = fault.code
                self._reply(fault.code, json.dumps(error).encode(), headers)
            elif fault.kind == "drop":
                self._drop()
            elif fault.kind == "slow":
                proxy._sleep(fault.delay)
                self._drop()
            elif fault.kind == "bad_json":
                event.status = 200
                self._reply(200, b'{"id": "chatcmpl-broken", "object": "chat.completion", "choices": [{"ind')
            elif fault.kind == "bad_content":
                status, headers, data = proxy._forward("POST", self.path, dict(self.headers), body)
                if status == 200:
                    document = json.loads(data)
                    for choice in document.get("choices", []):
                        choice["message"]["content"] = fault.text
                        choice["logprobs"] = None
                    data = json.dumps(document).encode()
                event.status = status
                self._reply(status, data, headers)

    return Handler
