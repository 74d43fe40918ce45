"""The vLLM backend's request translation, output mapping and error isolation, without vLLM.

vLLM cannot be installed on a CPU-only machine, so the stand-ins below copy the shape of the
vLLM 0.33 objects the backend touches: ``vllm.logprobs.Logprob`` (logprob, rank, decoded_token),
``vllm.outputs.CompletionOutput`` (index, text, token_ids, cumulative_logprob, logprobs,
finish_reason, stop_reason), ``vllm.outputs.RequestOutput`` (request_id, prompt,
prompt_token_ids, outputs, finished), ``vllm.sampling_params.StructuredOutputsParams`` and
``vllm.SamplingParams`` (keyword-only construction), and ``LLM.chat(messages, sampling_params=...)``
with one ``SamplingParams`` per conversation. The real engine is exercised by the ``gpu`` test at
the end and by ``benchmarks/gpu_check.py``.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from care_sdk.backends import resolve_backend
from care_sdk.backends.base import GenerationRequest
from care_sdk.backends.vllm import VLLMBackend, chat_messages, result_from_output, sampling_kwargs
from care_sdk.errors import BackendError, ConfigError, MissingDependencyError
from care_sdk.evaluator import expected_scores
from care_sdk.types import CriterionScore, Evaluation, Message


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    outputs: list[CompletionOutput]
    finished: bool = True


@dataclass
class StructuredOutputsParams:
    json: str | dict[str, Any] | None = None
    regex: str | None = None


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    max_tokens: int | None = 16
    logprobs: int | None = None
    structured_outputs: StructuredOutputsParams | None = None


@dataclass
class StandInLLM:
    """Answers every conversation with its schema's type name; rejects schemas marked ``bad``."""

    model_config: Any = field(default_factory=lambda: types.SimpleNamespace(model="stand-in/model"))
    calls: list[int] = field(default_factory=list)
    init_kwargs: dict[str, Any] = field(default_factory=dict)

    def chat(self, messages: list[list[dict[str, str]]], sampling_params: list[SamplingParams], **kw: Any) -> list[Any]:
        assert len(messages) == len(sampling_params)
        self.calls.append(len(messages))
        outputs = []
        for i, (conversation, params) in enumerate(zip(messages, sampling_params, strict=True)):
            schema = params.structured_outputs.json if params.structured_outputs else None
            if isinstance(schema, dict) and schema.get("bad"):
                raise ValueError("structured_outputs.json: unsupported schema")
            text = conversation[-1]["content"].upper()
            outs = [
                CompletionOutput(
                    index=j,
                    text=f"{text}#{j}",
                    token_ids=[1] * (j + 1),
                    cumulative_logprob=None,
                    logprobs=None,
                    finish_reason="stop",
                )
                for j in reversed(range(params.n))
            ]
            outputs.append(RequestOutput(request_id=str(i), prompt=None, prompt_token_ids=[0] * 4, outputs=outs))
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A ``vllm`` package exposing the stand-ins under vLLM 0.33's import paths."""
    module = types.ModuleType("vllm")
    submodule = types.ModuleType("vllm.sampling_params")
    submodule.StructuredOutputsParams = StructuredOutputsParams  # type: ignore[attr-defined]
    submodule.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    module.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    module.sampling_params = submodule  # type: ignore[attr-defined]

    def build(model: str, **kwargs: Any) -> StandInLLM:
        return StandInLLM(model_config=types.SimpleNamespace(model=model), init_kwargs=kwargs)

    module.LLM = build  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", submodule)
    return module


def _request(text: str = "hi", **kw: Any) -> GenerationRequest:
    return GenerationRequest(messages=(Message(role="system", content="s"), Message(role="user", content=text)), **kw)


def test_chat_messages_keep_roles_and_order() -> None:
    assert chat_messages(_request("hello")) == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "hello"},
    ]


def test_sampling_kwargs_maps_every_request_field() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    kw = sampling_kwargs(
        _request(json_schema=schema, max_tokens=64, temperature=0.7, top_p=0.9, n=3, seed=11, top_logprobs=5)
    )
    assert kw == {
        "n": 3,
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 64,
        "seed": 11,
        "logprobs": 5,
        "structured_outputs": {"json": schema},
    }


def test_sampling_kwargs_omits_unset_options_and_request_wins_over_defaults() -> None:
    kw = sampling_kwargs(_request(temperature=0.0), {"top_k": 40, "temperature": 1.3, "repetition_penalty": 1.1})
    assert "logprobs" not in kw and "structured_outputs" not in kw
    assert kw["temperature"] == 0.0
    assert kw["top_k"] == 40 and kw["repetition_penalty"] == 1.1


def test_result_from_output_orders_samples_and_counts_usage() -> None:
    outs = [
        CompletionOutput(
            index=1, text="b", token_ids=[7, 8, 9], cumulative_logprob=None, logprobs=None, finish_reason="length"
        ),
        CompletionOutput(
            index=0, text="a", token_ids=[5], cumulative_logprob=None, logprobs=None, finish_reason="stop"
        ),
    ]
    result = result_from_output(RequestOutput("r", None, [1, 2], outs))
    assert [c.text for c in result.completions] == ["a", "b"]
    assert [c.finish_reason for c in result.completions] == ["stop", "length"]
    assert result.usage == {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}
    assert all(c.logprobs is None for c in result.completions)


def test_result_from_output_maps_logprobs_top_k_by_rank() -> None:
    # The sampled token of the 2nd position ranks 3rd: vLLM returns it in addition to the top 2.
    positions = [
        {10: Logprob(-0.1, 1, '{"c1": '), 11: Logprob(-2.5, 2, "{")},
        {20: Logprob(-0.2, 1, "5"), 21: Logprob(-1.9, 2, "4"), 22: Logprob(-3.0, 3, "3")},
        {30: Logprob(-0.01, 1, "}")},
    ]
    positions[1] = {22: positions[1][22], 20: positions[1][20], 21: positions[1][21]}  # dict order is arbitrary
    out = CompletionOutput(
        index=0,
        text='{"c1": 3}',
        token_ids=[10, 22, 30],
        cumulative_logprob=None,
        logprobs=positions,
        finish_reason="stop",
    )
    result = result_from_output(RequestOutput("r", None, [1], [out]), top_logprobs=2)
    tokens = result.completions[0].logprobs
    assert tokens is not None and len(tokens) == 3
    assert "".join(t.token for t in tokens) == result.text
    assert tokens[1].token == "3" and tokens[1].logprob == -3.0
    assert tokens[1].top == (("5", -0.2), ("4", -1.9))
    # The mapping feeds the evaluator's expected-score computation directly.
    ev = Evaluation(scores=[CriterionScore(dimension="cognitive", criterion="x", score=3)])
    expected = expected_scores(ev, result.completions[0]).scores[0].score
    p5, p4 = math.exp(-0.2), math.exp(-1.9)
    assert expected == pytest.approx((5 * p5 + 4 * p4) / (p5 + p4))


def test_missing_vllm_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(MissingDependencyError) as info:
        VLLMBackend("Qwen/Qwen2.5-0.5B-Instruct")
    assert info.value.extra == "vllm"
    assert 'pip install "care-sdk[vllm]"' in str(info.value)


def test_spec_string_builds_engine_with_prefix_caching(fake_vllm: types.ModuleType) -> None:
    backend = resolve_backend("vllm:some/model", max_model_len=2048)
    assert isinstance(backend, VLLMBackend)
    assert backend.identity == "vllm:some/model"
    assert backend.llm.init_kwargs == {"max_model_len": 2048, "enable_prefix_caching": True}


def test_engine_options_with_a_built_engine_are_rejected(fake_vllm: types.ModuleType) -> None:
    with pytest.raises(ConfigError, match="max_model_len"):
        VLLMBackend(StandInLLM(), max_model_len=10)


def test_generate_sends_one_batched_chat_call(fake_vllm: types.ModuleType) -> None:
    llm = StandInLLM()
    backend = VLLMBackend(llm, sampling_defaults={"top_k": 5})
    assert backend.identity == "vllm:stand-in/model"
    results = backend.generate([_request("one", n=2, json_schema={"type": "string"}), _request("two")])
    assert llm.calls == [2]
    assert [c.text for c in results[0].completions] == ["ONE#0", "ONE#1"]
    assert results[1].text == "TWO#0"
    assert results[0].usage["completion_tokens"] == 3


def test_a_rejected_request_fails_alone(fake_vllm: types.ModuleType) -> None:
    llm = StandInLLM()
    backend = VLLMBackend(llm)
    results = backend.generate([_request("ok"), _request("no", json_schema={"bad": True}), _request("fine")])
    assert llm.calls == [3, 1, 1, 1]  # the batch call failed, then each request ran alone
    assert results[0].text == "OK#0" and results[2].text == "FINE#0"
    assert isinstance(results[1].error, BackendError)
    assert results[1].error.provider == "vllm" and "unsupported schema" in str(results[1].error)
    assert not results[1].error.retryable


def test_params_build_structured_outputs(fake_vllm: types.ModuleType) -> None:
    backend = VLLMBackend(StandInLLM())
    params = backend._params(_request(json_schema={"type": "integer"}, top_logprobs=3, seed=4))
    assert isinstance(params, SamplingParams)
    assert isinstance(params.structured_outputs, StructuredOutputsParams)
    assert params.structured_outputs.json == {"type": "integer"}
    assert (params.logprobs, params.seed) == (3, 4)


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (GPU machines only)")
def test_real_vllm_engine_decodes_schema_valid_json() -> None:
    import json
    import os

    model = os.environ.get("CARE_VLLM_MODEL", "Qwen/Qwen2.5-0.5B-Instruct")
    backend = VLLMBackend(model, gpu_memory_utilization=0.3, max_model_len=2048)
    schema = {
        "type": "object",
        "properties": {"score": {"type": "integer", "enum": [1, 2, 3, 4, 5]}},
        "required": ["score"],
        "additionalProperties": False,
    }
    results = backend.generate(
        [
            _request(
                "Rate this day from 1 to 5.",
                json_schema=schema,
                n=2,
                seed=1,
                temperature=0.8,
                top_logprobs=3,
                max_tokens=32,
            )
        ]
    )
    for completion in results[0].completions:
        assert json.loads(completion.text)["score"] in {1, 2, 3, 4, 5}
        assert completion.logprobs is not None and "".join(t.token for t in completion.logprobs) == completion.text
    backend.close()
