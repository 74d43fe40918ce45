"""The OpenAI-compatible backend: configuration, secrets, and behaviour against a real llama.cpp server."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

import pytest

from care_sdk.backends import GenerationRequest, resolve_backend
from care_sdk.errors import ConfigError
from care_sdk.types import Message
from fault_proxy import FaultProxy, reject_json_schema
from servers import LlamaServer
from servers import fault_proxy as fault_proxy_fixture
from servers import llama_server as llama_server_fixture

llama_server = llama_server_fixture
fault_proxy = fault_proxy_fixture

openai = pytest.importorskip("openai", reason="needs the openai extra")

from care_sdk.backends.openai import DEFAULT_BASE_URL, OpenAIBackend  # noqa: E402

SECRET = "sk-test-7f3a9c1e5b2d4f60a8e1"
SCHEMA = {
    "type": "object",
    "properties": {"feeling": {"type": "string", "enum": ["sad", "angry", "calm"]}, "intensity": {"type": "integer"}},
    "required": ["feeling", "intensity"],
    "additionalProperties": False,
}


def _user(text: str) -> tuple[Message, ...]:
    return (Message(role="user", content=text),)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CARE_OPENAI_TIMEOUT", "CARE_OPENAI_MAX_RETRIES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("CARE_OPENAI_MAX_CONCURRENCY", raising=False)


def _backend(server: LlamaServer | FaultProxy, **options: object) -> OpenAIBackend:
    model = server.model if isinstance(server, LlamaServer) else "smollm2"
    return OpenAIBackend(model=model, base_url=server.base_url, **options)  # type: ignore[arg-type]


# -- configuration (no server) -------------------------------------------------------------


def test_spec_string_builds_the_backend() -> None:
    backend = resolve_backend("openai:smollm2@http://127.0.0.1:8000/v1", max_concurrency=3)
    assert isinstance(backend, OpenAIBackend)
    assert backend.identity == "openai:smollm2@http://127.0.0.1:8000/v1"
    assert backend.max_concurrency == 3


def test_hosted_api_without_a_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIBackend(model="gpt-4o-mini")


def test_key_and_base_url_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    backend = OpenAIBackend(model="gpt-4o-mini")
    assert backend.identity == f"openai:gpt-4o-mini@{DEFAULT_BASE_URL}"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9999/v1/")
    assert OpenAIBackend(model="m").identity == "openai:m@http://127.0.0.1:9999/v1"


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARE_OPENAI_TIMEOUT", "7.5")
    monkeypatch.setenv("CARE_OPENAI_MAX_RETRIES", "1")
    backend = OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1")
    assert (backend.timeout, backend.retry_policy.max_retries) == (7.5, 1)
    assert OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1", timeout=3).timeout == 3
    monkeypatch.setenv("CARE_OPENAI_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="CARE_OPENAI_TIMEOUT"):
        OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"timeout": 0}, "timeout"),
        ({"max_retries": -1}, "max_retries"),
        ({"structured_output": "xml"}, "structured_output"),
    ],
)
def test_invalid_options_name_the_option(options: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1", **options)  # type: ignore[arg-type]


def test_a_client_without_a_model_name_is_refused() -> None:
    client = openai.OpenAI(api_key=SECRET, base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="model"):
        resolve_backend(client)


def test_the_key_never_shows(caplog: pytest.LogCaptureFixture) -> None:
    backend = OpenAIBackend(model="m", api_key=SECRET, base_url="http://user:hunter2pass@127.0.0.1:9/v1", max_retries=1)
    with caplog.at_level(logging.DEBUG):
        [result] = backend.generate([GenerationRequest(messages=_user("hi"), max_tokens=4)])
    assert result.error is not None
    shown = [backend.identity, repr(backend), str(result.error), result.error.hint or "", caplog.text]
    assert all(SECRET not in text and "hunter2pass" not in text for text in shown)


# -- against the real server ---------------------------------------------------------------


def test_structured_output_against_llama_server(llama_server: LlamaServer, caplog: pytest.LogCaptureFixture) -> None:
    backend = _backend(llama_server)
    request = GenerationRequest(
        messages=_user("How does rain make you feel? Answer in JSON."), json_schema=SCHEMA, max_tokens=40
    )
    with caplog.at_level(logging.WARNING, logger="care_sdk"):
        first = backend.generate([request, request])
        second = backend.generate([request])
    for result in [*first, *second]:
        data = json.loads(result.text)
        assert data["feeling"] in ("sad", "angry", "calm") and isinstance(data["intensity"], int)
    # llama.cpp's server does not take response_format type json_schema: the backend falls back
    # to {"type": "json_object", "schema": ...} (grammar-enforced there) and says so once.
    fallbacks = [r for r in caplog.records if "falling back" in r.getMessage()]
    assert len(fallbacks) == 1
    assert "json_object_schema" in fallbacks[0].getMessage()


def test_usage_finish_reason_and_seed(llama_server: LlamaServer) -> None:
    backend = _backend(llama_server)
    request = GenerationRequest(messages=_user("Tell me a short story."), max_tokens=6, temperature=1.0, seed=3)
    a, b = backend.generate([request, request])
    assert a.text == b.text
    assert a.completions[0].finish_reason == "length"
    assert a.usage["completion_tokens"] == 6 and a.usage["prompt_tokens"] > 5


def test_logprobs_are_mapped(llama_server: LlamaServer) -> None:
    backend = _backend(llama_server)
    [result] = backend.generate([GenerationRequest(messages=_user("Pick 1, 2 or 3."), max_tokens=4, top_logprobs=2)])
    tokens = result.completions[0].logprobs
    assert tokens is not None and len(tokens) == result.usage["completion_tokens"]
    assert all(len(t.top) == 2 and t.top[0][1] >= t.top[1][1] for t in tokens)


def test_extra_requests_when_the_server_ignores_n(
    llama_server: LlamaServer, fault_proxy: Callable[..., FaultProxy]
) -> None:
    proxy = fault_proxy()
    backend = _backend(proxy)
    request = GenerationRequest(messages=_user("One word, please."), max_tokens=5, temperature=1.0, n=3, seed=40)
    [result] = backend.generate([request])
    assert len(result.completions) == 3
    # llama.cpp's server returns one choice per request: the backend sent the rest with new seeds.
    assert [e.payload.get("seed") for e in proxy.events] == [40, 41, 42]
    assert [e.payload.get("n", 1) for e in proxy.events] == [3, 2, 1]
    assert 3 <= result.usage["completion_tokens"] <= 15


def test_concurrency_is_bounded(llama_server: LlamaServer, fault_proxy: Callable[..., FaultProxy]) -> None:
    proxy = fault_proxy()
    requests = [GenerationRequest(messages=_user(f"Count to {i}."), max_tokens=8) for i in range(8)]
    results = _backend(proxy, max_concurrency=2).generate(requests)
    assert all(r.ok for r in results)
    assert proxy.max_in_flight == 2
    proxy.max_in_flight = 0
    results = asyncio.run(_backend(proxy, max_concurrency=5).agenerate(requests))
    assert all(r.ok for r in results)
    assert 2 < proxy.max_in_flight <= 5


def test_user_built_clients(llama_server: LlamaServer) -> None:
    request = GenerationRequest(messages=_user("Say hello to Ana."), max_tokens=10)
    [expected] = _backend(llama_server).generate([request])
    sync_client = openai.OpenAI(api_key="unused", base_url=llama_server.base_url)
    async_client = openai.AsyncOpenAI(api_key="unused", base_url=llama_server.base_url)
    from_sync = OpenAIBackend(model=llama_server.model, client=sync_client)
    from_async = OpenAIBackend(model=llama_server.model, client=async_client)
    assert from_async.identity == from_sync.identity == f"openai:{llama_server.model}@{llama_server.base_url}"
    assert from_sync.generate([request])[0].text == expected.text
    assert asyncio.run(from_sync.agenerate([request]))[0].text == expected.text
    assert asyncio.run(from_async.agenerate([request]))[0].text == expected.text
    assert from_async.generate([request])[0].text == expected.text
    with pytest.raises(ConfigError):
        OpenAIBackend(model="m", client=sync_client, base_url="http://127.0.0.1:1/v1")


def test_rejected_json_schema_falls_back_to_json_mode(
    llama_server: LlamaServer, fault_proxy: Callable[..., FaultProxy], caplog: pytest.LogCaptureFixture
) -> None:
    # A server that answers 400 to response_format json_schema (as some hosted APIs do).
    proxy = fault_proxy(reject_json_schema(400))
    backend = _backend(proxy)
    request = GenerationRequest(messages=_user("How do you feel? JSON please."), json_schema=SCHEMA, max_tokens=40)
    with caplog.at_level(logging.WARNING, logger="care_sdk"):
        results = backend.generate([request] * 3)
    assert all(json.loads(r.text)["feeling"] in ("sad", "angry", "calm") for r in results)
    formats = [e.payload["response_format"]["type"] for e in proxy.events]
    assert formats.count("json_schema") >= 1 and formats[-1] == "json_object"
    assert sum("falling back" in r.getMessage() for r in caplog.records) == 1
