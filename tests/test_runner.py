"""The one sync runner: sync calls run their async forms on one long-lived loop.

The OpenAI backend's sync ``generate`` is checked against a real HTTP server on 127.0.0.1 that
answers chat completions slowly and counts requests in flight and TCP connections.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from care_sdk._runner import PerLoop, run_sync, runner_loop
from care_sdk.backends import GenerationRequest
from care_sdk.types import Message


async def _double(x: int) -> int:
    await asyncio.sleep(0)
    return 2 * x


def test_a_sync_call_works_inside_a_running_loop() -> None:
    async def notebook_cell() -> int:
        return run_sync(_double(21))  # a sync call made where a loop already runs (Jupyter)

    assert asyncio.run(notebook_cell()) == 42


def test_a_sync_call_from_the_runner_itself_does_not_wait_on_itself() -> None:
    async def on_the_runner() -> int:
        assert asyncio.get_running_loop() is runner_loop()
        return run_sync(_double(4))

    assert run_sync(on_the_runner()) == 8


def test_errors_reach_the_caller() -> None:
    async def fails() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        run_sync(fails())


def test_per_loop_values_are_closed_on_their_own_loop() -> None:
    closed: list[tuple[int, asyncio.AbstractEventLoop]] = []

    async def close(value: int) -> None:
        closed.append((value, asyncio.get_running_loop()))

    made = iter(range(10))
    values = PerLoop(lambda: next(made), close)

    async def get() -> int:
        return values.get()

    assert run_sync(get()) == run_sync(get()) == 0  # the runner's loop keeps its value
    other = asyncio.new_event_loop()
    try:
        assert other.run_until_complete(get()) == 1
        values.close()
        assert sorted(v for v, _ in closed) == [0, 1] and dict(closed) == {0: runner_loop(), 1: other}
        assert values.values() == []
    finally:
        other.close()


# -- the OpenAI backend's sync form -------------------------------------------------------------


class SlowChat(ThreadingHTTPServer):
    """Answers ``/v1/chat/completions`` after ``delay`` seconds; counts requests in flight and connections."""

    daemon_threads = True

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.in_flight = self.max_in_flight = self.requests = 0
        self.peers: set[tuple[str, int]] = set()
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a kept client reuses its connections
    server: SlowChat

    def do_POST(self) -> None:
        server = self.server
        self.rfile.read(int(self.headers["Content-Length"]))
        with server.lock:
            server.requests += 1
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
            server.peers.add(self.client_address)
        time.sleep(server.delay)
        with server.lock:
            server.in_flight -= 1
        body = json.dumps(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def slow_chat() -> Iterator[SlowChat]:
    server = SlowChat(delay=0.2)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _requests(n: int) -> list[GenerationRequest]:
    return [GenerationRequest(messages=(Message(role="user", content=f"hi {i}"),), max_tokens=4) for i in range(n)]


def test_sync_calls_share_one_client_and_one_bound(slow_chat: SlowChat) -> None:
    pytest.importorskip("openai", reason="needs the openai extra")
    from care_sdk.backends.openai import OpenAIBackend

    url = f"http://127.0.0.1:{slow_chat.server_address[1]}/v1"
    backend = OpenAIBackend(model="m", base_url=url, max_concurrency=2, max_retries=0)
    try:
        assert all(r.ok for r in backend.generate(_requests(2)))
        assert all(r.ok for r in backend.generate(_requests(2)))
        assert len(slow_chat.peers) == 2  # the second call reused the first call's two connections
        assert not [t for t in threading.enumerate() if t.name.startswith("care-sdk-openai")]  # no thread pool

        slow_chat.max_in_flight = 0
        results: list[bool] = []
        threads = [
            threading.Thread(target=lambda: results.extend(r.ok for r in backend.generate(_requests(4))))
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == [True] * 8
        assert slow_chat.max_in_flight == 2  # one bound for every sync caller, whatever its thread

        async def in_a_notebook() -> bool:
            return all(r.ok for r in backend.generate(_requests(1)))

        assert asyncio.run(in_a_notebook())
    finally:
        backend.close()
