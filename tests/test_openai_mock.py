"""The OpenAI backend's retry and fallback rules, against an in-process HTTP transport (no server).

Each test answers the client's HTTP requests with ``httpx.MockTransport`` and checks what the
backend sent and what it returned: which statuses are retried, ``Retry-After`` honoured, the
``response_format`` fallback, and a body without choices retried like any unreadable body.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from care_sdk.backends import GenerationRequest
from care_sdk.backends._retry import RetryPolicy
from care_sdk.types import Message

openai = pytest.importorskip("openai", reason="needs the openai extra")
# The HTTP library the installed openai client is built on (httpx, or its successor httpx2).
httpx: Any = importlib.import_module(openai.DefaultHttpxClient.__mro__[1].__module__.split(".")[0])

from care_sdk.backends.openai import OpenAIBackend  # noqa: E402

BASE_URL = "http://127.0.0.1:9/v1"
REQUEST = GenerationRequest(messages=(Message(role="user", content="hi"),), max_tokens=8)
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
# Backoff long enough that a test finishing fast shows the backoff was not used.
SLOW_BACKOFF = RetryPolicy(max_retries=2, initial_delay=30.0, jitter=0.0)
NO_WAIT = RetryPolicy(max_retries=2, initial_delay=0.0, jitter=0.0)

Handler = Callable[[int, dict[str, Any]], Any]


def reply(text: str = '{"a": 1}', *, choices: int = 1) -> Any:
    body = {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            for i in range(choices)
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    return httpx.Response(200, json=body)


def error(status: int, message: str = "failed", headers: dict[str, str] | None = None) -> Any:
    return httpx.Response(status, json={"error": {"message": message, "type": "error"}}, headers=headers)


class Server:
    """Answers the n-th request (from 0) with ``handler(n, body)`` and keeps what was sent and when."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.bodies: list[dict[str, Any]] = []
        self.times: list[float] = []

    def __call__(self, request: Any) -> Any:
        body = json.loads(request.content)
        self.bodies.append(body)
        self.times.append(time.monotonic())
        return self.handler(len(self.bodies) - 1, body)

    def backend(self, *, asynchronous: bool = False, **options: Any) -> OpenAIBackend:
        transport = httpx.MockTransport(self)
        client: Any
        if asynchronous:
            client = openai.AsyncOpenAI(
                api_key="k", base_url=BASE_URL, http_client=httpx.AsyncClient(transport=transport)
            )
        else:
            client = openai.OpenAI(api_key="k", base_url=BASE_URL, http_client=httpx.Client(transport=transport))
        return OpenAIBackend(model="m", client=client, **options)


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Server]]:
    yield Server


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503])
def test_transient_statuses_are_retried(serve: Callable[[Handler], Server], status: int) -> None:
    server = serve(lambda n, body: error(status) if n == 0 else reply())
    [result] = server.backend(retry_policy=NO_WAIT).generate([REQUEST])
    assert result.ok and result.text == '{"a": 1}'
    assert len(server.bodies) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_are_not_retried(serve: Callable[[Handler], Server], status: int) -> None:
    server = serve(lambda n, body: error(status, "bad request"))
    [result] = server.backend(retry_policy=NO_WAIT).generate([REQUEST])
    assert result.error is not None and result.error.status_code == status
    assert not result.error.retryable and result.error.hint
    assert len(server.bodies) == 1


def test_retries_stop_after_the_policy(serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda n, body: error(503))
    [result] = server.backend(retry_policy=NO_WAIT).generate([REQUEST])
    assert result.error is not None and result.error.retryable and "gave up after 3 attempts" in str(result.error)
    assert len(server.bodies) == 3


@pytest.mark.parametrize(
    ("headers", "wait"), [({"Retry-After": "0.3"}, 0.3), ({"retry-after-ms": "200", "Retry-After": "30"}, 0.2)]
)
def test_retry_after_is_honoured(serve: Callable[[Handler], Server], headers: dict[str, str], wait: float) -> None:
    server = serve(lambda n, body: error(429, "slow down", headers) if n == 0 else reply())
    [result] = server.backend(retry_policy=SLOW_BACKOFF).generate([REQUEST])
    assert result.ok
    gap = server.times[1] - server.times[0]
    assert wait <= gap < wait + 5.0  # the server's wait, not the 30 s backoff


def test_a_rejected_json_schema_falls_back_to_json_mode_once(serve: Callable[[Handler], Server]) -> None:
    def handler(n: int, body: dict[str, Any]) -> Any:
        if body["response_format"]["type"] == "json_schema":
            return error(400, "response_format of type json_schema is not supported")
        return reply()

    server = serve(handler)
    backend = server.backend(retry_policy=NO_WAIT)
    request = GenerationRequest(messages=REQUEST.messages, json_schema=SCHEMA)
    assert backend.generate([request])[0].ok
    assert backend.generate([request])[0].ok
    formats = [b["response_format"] for b in server.bodies]
    assert formats[0]["type"] == "json_schema"
    assert formats[1] == formats[2] == {"type": "json_object", "schema": SCHEMA}
    assert backend.structured_output == "json_object_schema"


def test_every_format_rejected_ends_without_response_format(serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda n, body: error(422, "response_format unsupported") if "response_format" in body else reply())
    request = GenerationRequest(messages=REQUEST.messages, json_schema=SCHEMA)
    assert server.backend(retry_policy=NO_WAIT).generate([request])[0].ok
    assert [b.get("response_format", {}).get("type") for b in server.bodies] == [
        "json_schema",
        "json_object",
        "json_object",
        None,
    ]


def test_a_400_about_something_else_does_not_change_the_format(serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda n, body: error(400, "max_tokens is too large"))
    backend = server.backend(retry_policy=NO_WAIT)
    result = backend.generate([GenerationRequest(messages=REQUEST.messages, json_schema=SCHEMA)])[0]
    assert result.error is not None and result.error.status_code == 400
    assert backend.structured_output == "json_schema" and len(server.bodies) == 1


def test_a_reply_without_choices_is_retried(serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda n, body: reply(choices=0) if n == 0 else reply("ok"))
    [result] = server.backend(retry_policy=NO_WAIT).generate([REQUEST])
    assert result.ok and result.text == "ok"
    assert len(server.bodies) == 2


def test_a_reply_without_choices_is_retried_async(serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda n, body: reply(choices=0) if n < 2 else reply("ok"))
    backend = server.backend(asynchronous=True, retry_policy=NO_WAIT)
    [result] = asyncio.run(backend.agenerate([REQUEST]))
    assert result.ok and result.text == "ok"
    assert len(server.bodies) == 3


def test_no_choices_every_time_is_a_retryable_error(serve: Callable[[Handler], Server]) -> None:
    server = serve(lambda n, body: reply(choices=0))
    [result] = server.backend(retry_policy=NO_WAIT).generate([REQUEST])
    assert result.error is not None and result.error.retryable and "no choices" in str(result.error)
    assert len(server.bodies) == 3


def test_provenance_counts_a_request_once_and_sums_the_usage_the_server_reported(
    serve: Callable[[Handler], Server],
) -> None:
    from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator
    from care_sdk.testing import evaluation_json, rubric_json

    def answer(n: int, body: dict[str, Any]) -> Any:
        if n == 0:
            return error(503)  # retried by the transport: still one request of the SDK's
        is_rubric = "weights" in json.dumps(body.get("response_format") or body["messages"][-1])
        return reply(
            rubric_json({"cognitive": 1, "affective": 1, "proactive": 1}) if is_rubric else evaluation_json([3] * 6)
        )

    server = serve(answer)
    backend = server.backend(asynchronous=True, retry_policy=NO_WAIT)
    reward = AdaptiveReward(RubricGenerator(backend), RubricEvaluator(backend))
    result = asyncio.run(reward.ascore("I failed my exam.", "That sounds hard."))
    made = result.provenance
    assert result.reward == 0.5 and made is not None and len(server.bodies) == 3
    assert made.rubric_cost.calls == 1.0 and made.evaluation_cost.calls == 1.0
    # each answer's usage reads 3 prompt and 2 completion tokens
    assert (made.cost.prompt_tokens, made.cost.completion_tokens) == (6.0, 4.0)
