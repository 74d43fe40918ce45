"""Real local servers for tests: ``llama_cpp.server`` with the bundled model, and the fault proxy.

Fixtures (import them into ``conftest.py`` or a test module):

- ``llama_server`` (session): a running llama.cpp OpenAI-compatible server on 127.0.0.1
  serving the bundled SmolLM2-135M-Instruct GGUF; skips when llama.cpp or the model is missing.
- ``fault_proxy`` (function): a factory ``fault_proxy(schedule) -> FaultProxy`` in front of
  ``llama_server``; every proxy it made is stopped after the test.

The server process is started once per test process and stopped at teardown (and at exit).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fault_proxy import FaultProxy, LoopbackURLs, Schedule

__all__ = ["LlamaServer", "fault_proxy", "free_port", "llama_server", "skip_reason", "start_llama_server"]

SERVER_MODEL_NAME = "smollm2"
"""The model alias the test server answers to."""
STARTUP_TIMEOUT_S = float(os.environ.get("CARE_TEST_SERVER_TIMEOUT", "180"))


@dataclass
class LlamaServer(LoopbackURLs):
    """A running llama.cpp server process (``url``, ``base_url``: its addresses)."""

    process: subprocess.Popen[bytes]
    port: int
    model: str
    log_path: Path

    @property
    def spec(self) -> str:
        """The backend spec string for this server."""
        return f"openai:{self.model}@{self.base_url}"

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log, for error messages."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Terminate the process (kill it if it does not exit); safe to call twice."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as response:
            return response.status == 200 and "data" in json.loads(response.read())
    except (OSError, urllib.error.URLError, ValueError):
        return False


def start_llama_server(
    model_path: str | Path | None = None,
    *,
    n_ctx: int = 4096,
    n_threads: int | None = None,
    timeout: float = STARTUP_TIMEOUT_S,
) -> LlamaServer:
    """Start ``llama_cpp.server`` on a free loopback port and wait until it answers (inside
    :func:`~care_sdk.backends.llamacpp.plain_cpu_buffers`, as the package loads its models).

    The server uses the chat template embedded in the GGUF (SmolLM2's ChatML template).

    Raises:
        RuntimeError: the server exited or did not answer within ``timeout`` seconds (with its log).
    """
    if model_path is None:
        from care_sdk.backends.llamacpp import default_model_path

        model_path = default_model_path()
    port = free_port()
    log_path = Path(tempfile.mkstemp(prefix="care-llama-server-", suffix=".log")[1])
    threads = n_threads or int(os.environ.get("CARE_TEST_SERVER_THREADS", "1"))
    command = [
        sys.executable,
        "-c",
        # the server builds its own Llama: keep the weights in plain CPU buffers, as the package does
        "import runpy; from care_sdk.backends.llamacpp import plain_cpu_buffers\n"
        "with plain_cpu_buffers(): runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)",
        "--model",
        str(model_path),
        "--model_alias",
        SERVER_MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads),
        "--seed",
        "0",
        "--verbose",
        "False",
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = LlamaServer(process=process, port=port, model=SERVER_MODEL_NAME, log_path=log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama.cpp server exited with code {process.returncode}:\n{server.log_tail()}")
        if _ready(server.url):
            return server
        time.sleep(0.25)
    server.stop()
    raise RuntimeError(f"llama.cpp server did not answer within {timeout:.0f}s:\n{server.log_tail()}")


_SERVER: LlamaServer | None = None
_SERVER_LOCK = threading.Lock()


def _shared_server() -> LlamaServer:
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None or _SERVER.process.poll() is not None:
            _SERVER = start_llama_server()
            atexit.register(_SERVER.stop)
        return _SERVER


def skip_reason() -> str | None:
    """Why a llama.cpp server cannot run here, or ``None`` when it can."""
    try:
        import llama_cpp  # noqa: F401
        import openai  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        return f"needs the llamacpp and openai extras ({exc.name} is not installed)"
    try:
        from care_sdk.backends.llamacpp import default_model_path

        path = default_model_path()
    except Exception as exc:
        return f"the bundled model is not available: {exc}"
    if not Path(path).is_file():
        return f"the bundled model is not at {path}"
    return None


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    """A real llama.cpp OpenAI-compatible server on 127.0.0.1 with the bundled model (session-wide)."""
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    server = _shared_server()
    yield server
    server.stop()


@pytest.fixture
def fault_proxy(llama_server: LlamaServer) -> Iterator[Callable[..., FaultProxy]]:
    """A factory for fault proxies in front of ``llama_server``: ``fault_proxy(schedule, **kw)``."""
    proxies: list[FaultProxy] = []

    def make(schedule: Schedule | None = None, **kwargs: float) -> FaultProxy:
        proxy = FaultProxy(llama_server.url, schedule, **kwargs).start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.stop()
