"""One conformance suite, run against every backend this environment can build.

Backends: llama.cpp in-process on the bundled model, the OpenAI backend against a real
llama.cpp server on 127.0.0.1, transformers on the GGUF-derived checkpoint (slow; skipped
without the ``hf`` extra), and the scripted test backend where a check means something for it.
Every check uses short replies so the suite stays within a few minutes on a CPU.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from care_sdk.backends import Backend, GenerationRequest, GenerationResult
from care_sdk.errors import BackendError, ContextOverflowError
from care_sdk.prompts import evaluation_schema
from care_sdk.types import Message
from servers import LlamaServer
from servers import llama_server as llama_server_fixture

llama_server = llama_server_fixture

CONTEXT_LIMIT_WORDS = 9000
"""A prompt this long exceeds every backend's context window here."""


def _user(text: str) -> tuple[Message, ...]:
    return (Message(role="user", content=text),)


def _const_schema(value: int) -> dict[str, Any]:
    """A schema whose only valid instance is ``{"item": value}``: the reply identifies its request."""
    return {
        "type": "object",
        "properties": {"item": {"type": "integer", "enum": [value]}},
        "required": ["item"],
        "additionalProperties": False,
    }


def _scripted_reply(request: GenerationRequest) -> str | BackendError:
    """A deterministic stand-in model: schema-valid JSON derived from the request."""
    text = request.messages[-1].content if request.messages else ""
    if len(text.split()) > CONTEXT_LIMIT_WORDS - 100:
        return BackendError("prompt exceeds the context window", provider="scripted")
    schema = request.json_schema
    if schema is None:
        return f"echo {len(text)} seed={request.seed}"
    properties = schema["properties"]
    if "item" in properties:
        return json.dumps({"item": properties["item"]["enum"][0]})
    keys = sorted(schema["properties"]["scores"]["properties"])
    base = (request.seed or 0) + len(text)
    return json.dumps({"scores": {k: 1 + (base + i) % 5 for i, k in enumerate(keys)}})


def _make_scripted(_: pytest.FixtureRequest) -> Backend:
    from care_sdk.testing import ScriptedBackend

    return ScriptedBackend(_scripted_reply, name="conformance")


def _make_llamacpp(_: pytest.FixtureRequest) -> Backend:
    pytest.importorskip("llama_cpp", reason="needs the llamacpp extra")
    from care_sdk.backends.llamacpp import LlamaCppBackend, default_model_path

    threads = int(os.environ.get("CARE_TEST_SERVER_THREADS", "1"))
    return LlamaCppBackend(default_model_path(), n_ctx=2048, n_threads=threads, logprobs=True)


def _make_openai(request: pytest.FixtureRequest) -> Backend:
    server: LlamaServer = request.getfixturevalue("llama_server")
    from care_sdk.backends.openai import OpenAIBackend

    return OpenAIBackend(model=server.model, base_url=server.base_url, max_retries=2, timeout=120)


def _make_hf(_: pytest.FixtureRequest) -> Backend:
    pytest.importorskip("torch", reason="needs the hf extra (torch)")
    pytest.importorskip("transformers", reason="needs the hf extra (transformers)")
    # With the extra installed, a backend module that does not import, or an API that went
    # missing, is a failure here, not a skip.
    from care_sdk.backends.hf import HFBackend
    from care_sdk.backends.llamacpp import default_model_path

    return HFBackend.from_gguf(default_model_path())


FACTORIES: dict[str, Callable[[pytest.FixtureRequest], Backend]] = {
    "scripted": _make_scripted,
    "llamacpp": _make_llamacpp,
    "openai": _make_openai,
    "hf": _make_hf,
}


@pytest.fixture(
    scope="module",
    params=[
        "scripted",
        "llamacpp",
        "openai",
        pytest.param("hf", marks=pytest.mark.slow),
    ],
)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each available backend in turn."""
    made = FACTORIES[request.param](request)
    yield made
    made.close()


def _real(backend: Backend) -> bool:
    return backend.provider != "scripted"


SEEDS_AND_LOGPROBS = {"scripted": (True, False), "llamacpp": (True, True), "openai": (True, True), "hf": (True, True)}
"""What each backend built here gives: (the same samples for the same seed, logprobs on request).
The table is the tests' own, not a flag of the backend, so no backend skips a check by losing one."""


def test_every_backend_built_here_is_in_the_table(backend: Backend) -> None:
    assert backend.provider in SEEDS_AND_LOGPROBS


def _one(backend: Backend, request: GenerationRequest) -> GenerationResult:
    [result] = backend.generate([request])
    assert result.error is None, f"{backend.identity}: {result.error}"
    return result


def _texts(result: GenerationResult) -> list[str]:
    return [c.text for c in result.completions]


# -- structured output ---------------------------------------------------------------------


def test_reply_follows_the_json_schema(backend: Backend) -> None:
    schema = evaluation_schema(3)
    request = GenerationRequest(
        messages=_user("Rate three things from 1 to 5 as JSON: the weather, the food, the music."),
        json_schema=schema,
        max_tokens=48,
    )
    result = _one(backend, request)
    data = json.loads(result.text)
    assert set(data) == {"scores"}
    assert set(data["scores"]) == {"c1", "c2", "c3"}
    assert all(isinstance(v, int) and 1 <= v <= 5 for v in data["scores"].values())


def test_results_come_back_in_input_order(backend: Backend) -> None:
    requests = [
        GenerationRequest(
            messages=_user(f"Write a JSON object for item {i}."), json_schema=_const_schema(i), max_tokens=16
        )
        for i in (3, 1, 4, 5, 2)
    ]
    results = backend.generate(requests)
    assert [json.loads(r.text)["item"] for r in results] == [3, 1, 4, 5, 2]


# -- sampling ------------------------------------------------------------------------------


def test_n_samples(backend: Backend) -> None:
    request = GenerationRequest(
        messages=_user("Say something kind in a few words."), max_tokens=12, temperature=0.9, n=3, seed=11
    )
    result = _one(backend, request)
    assert len(result.completions) == 3
    assert all(c.finish_reason in ("stop", "length") for c in result.completions)
    if _real(backend):
        assert any(c.text.strip() for c in result.completions)


def test_same_seed_same_samples(backend: Backend) -> None:
    if not SEEDS_AND_LOGPROBS[backend.provider][0]:
        pytest.skip(f"{backend.identity} does not support seeds")
    request = GenerationRequest(
        messages=_user("Name a colour and a feeling."), max_tokens=12, temperature=1.0, n=2, seed=1234
    )
    other = GenerationRequest(messages=_user("What is the weather like?"), max_tokens=4)
    # llama.cpp reuses the evaluated prefix of the previous prompt, and logits computed for one
    # token differ in the last bits from logits computed in a batch, which can change what is
    # sampled. So both runs start from the same kind of cache state: after a different prompt.
    _one(backend, other)
    first = _texts(_one(backend, request))
    _one(backend, other)
    second = _texts(_one(backend, request))
    assert first == second


def test_greedy_is_deterministic_across_batches(backend: Backend) -> None:
    a = GenerationRequest(messages=_user("I failed my exam today."), max_tokens=16)
    b = GenerationRequest(messages=_user("My friend moved away."), max_tokens=16)
    other = GenerationRequest(messages=_user("What is the weather like?"), max_tokens=4)
    # A server may take a batch's requests in either order, and llama.cpp reuses the prefix the
    # previous prompt left in its cache. Starting each batch after a prompt that shares only the
    # chat template with a and b gives every request the same cache state, whatever the order.
    _one(backend, other)
    ab = backend.generate([a, b])
    _one(backend, other)
    ba = backend.generate([b, a])
    assert [r.text for r in ab] == [ba[1].text, ba[0].text]


# -- logprobs and usage --------------------------------------------------------------------


def test_logprob_shape(backend: Backend) -> None:
    if not SEEDS_AND_LOGPROBS[backend.provider][1]:
        pytest.skip(f"{backend.identity} does not return logprobs")
    request = GenerationRequest(messages=_user("Pick a number from 1 to 5."), max_tokens=8, top_logprobs=3)
    result = _one(backend, request)
    logprobs = result.completions[0].logprobs
    assert logprobs, "asked for logprobs, got none"
    for token in logprobs:
        assert math.isfinite(token.logprob) and token.logprob <= 1e-6
        assert 1 <= len(token.top) <= 3
        values = [lp for _, lp in token.top]
        assert values == sorted(values, reverse=True)
        assert token.logprob <= values[0] + 1e-4
    assert "".join(t.token for t in logprobs) == result.completions[0].text


def test_usage_is_reported(backend: Backend) -> None:
    if not _real(backend):
        pytest.skip("the scripted backend counts characters, not tokens")
    result = _one(backend, GenerationRequest(messages=_user("Hello!"), max_tokens=8))
    assert result.usage.get("prompt_tokens", 0) > 0
    assert 0 < result.usage.get("completion_tokens", 0) <= 8


# -- errors --------------------------------------------------------------------------------


def test_a_failing_request_does_not_sink_the_batch(backend: Backend) -> None:
    too_long = GenerationRequest(messages=_user("word " * CONTEXT_LIMIT_WORDS), max_tokens=4)
    fine = GenerationRequest(messages=_user("Hi."), json_schema=_const_schema(7), max_tokens=16)
    results = backend.generate([fine, too_long, fine])
    assert [r.ok for r in results] == [True, False, True]
    error = results[1].error
    assert isinstance(error, BackendError)
    if backend.provider in ("llamacpp", "hf"):  # the backends that hold the model say so, and by how much
        assert isinstance(error, ContextOverflowError) and error.tokens > error.limit
    assert not error.retryable
    assert error.provider == backend.provider
    with pytest.raises(BackendError):
        _ = results[1].text
    assert json.loads(results[2].text) == {"item": 7}


# -- sync and async ------------------------------------------------------------------------


def test_sync_and_async_agree(backend: Backend) -> None:
    requests = [
        GenerationRequest(messages=_user("Describe a calm evening."), max_tokens=16, seed=5),
        GenerationRequest(messages=_user("Give me one word."), json_schema=_const_schema(2), max_tokens=16),
    ]
    sync = backend.generate(requests)
    async_ = asyncio.run(backend.agenerate(requests))
    assert [r.text for r in sync] == [r.text for r in async_]


def test_async_batches_can_run_concurrently(backend: Backend) -> None:
    request = GenerationRequest(messages=_user("Say hi."), json_schema=_const_schema(9), max_tokens=16)

    async def both() -> list[list[GenerationResult]]:
        return list(await asyncio.gather(backend.agenerate([request]), backend.agenerate([request, request])))

    first, second = asyncio.run(both())
    assert [json.loads(r.text) for r in first + second] == [{"item": 9}] * 3
