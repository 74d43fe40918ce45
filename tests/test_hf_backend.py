"""The transformers backend on real models: a tiny random SmolLM2-shaped model for the decoding
logic (fast) and the bundled SmolLM2-135M-Instruct, loaded from its GGUF, for the real prompts
and schemas of the generator and the evaluator (slow)."""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs the hf extra")
pytest.importorskip("transformers", reason="needs the hf extra")
pytest.importorskip("llguidance", reason="needs the hf extra")

from care_sdk import RubricEvaluator
from care_sdk.backends import resolve_backend
from care_sdk.backends._hf_load import gguf_cache_path
from care_sdk.backends.base import GenerationRequest
from care_sdk.backends.hf import HFBackend
from care_sdk.errors import BackendError, ConfigError, MissingDependencyError
from care_sdk.evaluator import expected_scores
from care_sdk.prompts import generator_messages, parse_evaluation, parse_rubric, rubric_schema
from care_sdk.types import Message, Rubric, as_messages

SCORE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "enum": [1, 2, 3, 4, 5]}, "why": {"type": "string", "maxLength": 12}},
    "required": ["score", "why"],
    "additionalProperties": False,
}
CONTEXT = [
    {"role": "user", "content": "I failed my driving test for the third time. I feel like such an idiot."},
    {"role": "assistant", "content": "Three times is exhausting. What happened on the test?"},
    {"role": "user", "content": "I panicked at the roundabout again and everyone else passes easily."},
]


def _user(text: str) -> tuple[Message, ...]:
    return (Message(role="user", content=text),)


@pytest.fixture(scope="module")
def tiny() -> Iterator[HFBackend]:
    """A 2-layer, 64-wide random model with SmolLM2's tokenizer and chat template (context 512)."""
    pytest.importorskip("trl", reason="the tiny model helper needs the train extra")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from care_lab.training.models import tiny_model_dir

    path = tiny_model_dir()
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    model.config.max_position_embeddings = 512
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    backend = HFBackend(model=model, tokenizer=tokenizer, batch_size=2, n_threads=1)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def smol() -> Iterator[HFBackend]:
    """The bundled SmolLM2-135M-Instruct, dequantised from its GGUF (converted once, then cached)."""
    from care_sdk.backends.llamacpp import default_model_path

    backend = HFBackend.from_gguf(default_model_path(), batch_size=4, n_threads=1)
    yield backend
    backend.close()


# -- construction --------------------------------------------------------------------------


def test_model_or_path_but_not_both(tiny: HFBackend) -> None:
    with pytest.raises(ConfigError, match="either"):
        HFBackend()
    with pytest.raises(ConfigError, match="either"):
        HFBackend("x", model=tiny.model, tokenizer=tiny.tokenizer)
    with pytest.raises(ConfigError, match="tokenizer"):
        HFBackend(model=tiny.model)


def test_missing_local_model_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot load model"):
        resolve_backend(f"hf:{tmp_path / 'nothing-here'}")
    with pytest.raises(ConfigError, match="GGUF file not found"):
        HFBackend.from_gguf(tmp_path / "missing.gguf")


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llguidance", None)
    with pytest.raises(MissingDependencyError) as info:
        HFBackend("anything")
    assert info.value.extra == "hf" and "care-sdk[hf]" in str(info.value)


def test_gguf_cache_key_follows_the_file(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF-one")
    first = gguf_cache_path(gguf, tmp_path / "cache")
    assert first.parent == tmp_path / "cache" and first == gguf_cache_path(gguf, tmp_path / "cache")
    gguf.write_bytes(b"GGUF-two-longer")
    assert gguf_cache_path(gguf, tmp_path / "cache") != first


# -- decoding helpers ----------------------------------------------------------------------


def test_nucleus_sampling_keeps_only_the_top_mass() -> None:
    import torch

    from care_sdk.backends._hf_decode import sample_token

    scores = torch.log(torch.tensor([0.5, 0.3, 0.2]))
    generator = torch.Generator().manual_seed(0)
    draws = [sample_token(scores, 1.0, 0.6, generator) for _ in range(300)]
    assert set(draws) == {0, 1}  # 0.5 + 0.3 reaches 0.6; token 2 is cut
    assert 0.5 < draws.count(0) / len(draws) < 0.75  # renormalised: 0.5 / 0.8
    generator = torch.Generator().manual_seed(0)
    assert [sample_token(scores, 1.0, 1.0, generator) for _ in range(300)].count(2) > 30


def test_text_pieces_join_to_the_text_across_split_characters() -> None:
    from care_sdk.backends._hf_decode import text_pieces

    vocab = {1: b"caf", 2: b"\xc3", 3: b"\xa9", 4: b" ok"}

    def decode(ids: list[int]) -> str:
        return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")

    pieces = text_pieces(decode, [1, 2, 3, 4])
    assert pieces == ["caf", "", "\u00e9", " ok"]
    assert "".join(pieces) == decode([1, 2, 3, 4])


# -- decoding logic on the tiny model ------------------------------------------------------


def test_schema_constrained_reply_parses(tiny: HFBackend) -> None:
    request = GenerationRequest(messages=_user("Rate it."), json_schema=SCORE_SCHEMA, max_tokens=40)
    [result] = tiny.generate([request])
    assert result.ok, result.error
    data = json.loads(result.text)
    assert data["score"] in {1, 2, 3, 4, 5} and isinstance(data["why"], str) and len(data["why"]) <= 12
    assert result.completions[0].finish_reason == "stop"


def test_batches_keep_input_order_and_match_single_requests(tiny: HFBackend) -> None:
    def item(value: int, text: str) -> GenerationRequest:
        schema = {
            "type": "object",
            "properties": {"item": {"type": "integer", "enum": [value]}, "note": {"type": "string", "maxLength": 6}},
            "required": ["item", "note"],
            "additionalProperties": False,
        }
        return GenerationRequest(messages=_user(text), json_schema=schema, max_tokens=24)

    requests = [
        item(3, "a much longer prompt than the others, " * 4),
        item(1, "short"),
        item(4, "medium length one"),
        GenerationRequest(messages=_user("free text"), max_tokens=6),
        item(2, "x"),
    ]
    batched = tiny.generate(requests)  # batch_size=2: rows are sorted by length and decoded in 3 chunks
    assert [json.loads(r.text)["item"] for i, r in enumerate(batched) if i != 3] == [3, 1, 4, 2]
    alone = [tiny.generate([r])[0] for r in requests]
    assert [r.text for r in batched] == [r.text for r in alone]


LONG_TEXT_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "minLength": 200, "maxLength": 300}},
    "required": ["text"],
    "additionalProperties": False,
}
"""A reply that cannot end within a few tokens: the grammar allows no end before 200 characters."""


def test_max_tokens_ends_with_length(tiny: HFBackend) -> None:
    request = GenerationRequest(messages=_user("Go on."), json_schema=LONG_TEXT_SCHEMA, max_tokens=5)
    [result] = tiny.generate([request])
    completion = result.completions[0]
    assert completion.finish_reason == "length"
    assert result.usage["completion_tokens"] == 5
    assert result.usage["prompt_tokens"] > 0
    assert result.usage["total_tokens"] == result.usage["prompt_tokens"] + result.usage["completion_tokens"]


def test_n_samples_and_seeds(tiny: HFBackend) -> None:
    def sample(seed: int | None) -> list[str]:
        request = GenerationRequest(messages=_user("Say anything."), max_tokens=8, temperature=1.0, n=3, seed=seed)
        [result] = tiny.generate([request])
        assert len(result.completions) == 3
        return [c.text for c in result.completions]

    first = sample(7)
    assert sample(7) == first
    assert len(set(first)) > 1  # the samples of one request differ (seed + sample index)
    assert sample(8) != first


def test_greedy_ignores_the_seed(tiny: HFBackend) -> None:
    def greedy(seed: int) -> str:
        return tiny.generate([GenerationRequest(messages=_user("Hi."), max_tokens=6, seed=seed)])[0].text

    assert greedy(1) == greedy(2)


def test_logprobs_shape(tiny: HFBackend) -> None:
    request = GenerationRequest(messages=_user("Rate it."), json_schema=SCORE_SCHEMA, max_tokens=40, top_logprobs=4)
    [result] = tiny.generate([request])
    completion = result.completions[0]
    assert completion.logprobs is not None
    assert len(completion.logprobs) == result.usage["completion_tokens"]
    assert "".join(t.token for t in completion.logprobs) == completion.text
    for token in completion.logprobs:
        assert math.isfinite(token.logprob) and token.logprob <= 0
        values = [lp for _, lp in token.top]
        assert len(values) == 4 and values == sorted(values, reverse=True)
        assert token.logprob <= values[0] + 1e-5
    [plain] = tiny.generate([GenerationRequest(messages=_user("Rate it."), json_schema=SCORE_SCHEMA, max_tokens=40)])
    assert plain.completions[0].logprobs is None and plain.text == completion.text


def test_bad_requests_fail_alone(tiny: HFBackend) -> None:
    fine = GenerationRequest(messages=_user("Hi."), json_schema=SCORE_SCHEMA, max_tokens=40)
    too_long = GenerationRequest(messages=_user("word " * 600), max_tokens=4)
    bad_schema = GenerationRequest(messages=_user("Hi."), json_schema={"type": "object", "$ref": "#/nowhere"})
    results = tiny.generate([fine, too_long, bad_schema, fine])
    assert [r.ok for r in results] == [True, False, False, True]
    for failed in (results[1].error, results[2].error):
        assert isinstance(failed, BackendError) and failed.provider == "hf" and not failed.retryable
    assert "context" in str(results[1].error)
    assert results[0].text == results[3].text


def test_async_matches_sync(tiny: HFBackend) -> None:
    requests = [
        GenerationRequest(messages=_user("Rate it."), json_schema=SCORE_SCHEMA, max_tokens=40),
        GenerationRequest(messages=_user("Hello"), max_tokens=4),
    ]
    assert [r.text for r in asyncio.run(tiny.agenerate(requests))] == [r.text for r in tiny.generate(requests)]


def test_closed_backend_raises(tiny: HFBackend) -> None:
    backend = HFBackend(model=tiny.model, tokenizer=tiny.tokenizer)
    backend.close()
    backend.close()
    with pytest.raises(BackendError, match="closed"):
        backend.generate([GenerationRequest(messages=_user("Hi."), max_tokens=2)])


# -- the real model, the real prompts and schemas ------------------------------------------


def _check_rubric_json(data: Any, per_dimension: int = 2) -> None:
    assert set(data) == {"weights", "criteria"}
    dims = {"cognitive", "affective", "proactive"}
    assert set(data["weights"]) == dims
    assert all(isinstance(w, int | float) and w >= 0 for w in data["weights"].values())
    assert set(data["criteria"]) == dims
    for items in data["criteria"].values():
        assert len(items) == per_dimension
        assert all(isinstance(c, str) and 8 <= len(c) <= 200 for c in items)


@pytest.mark.slow
def test_smollm2_from_gguf_is_cached_as_a_plain_copy(smol: HFBackend) -> None:
    from care_sdk.backends.llamacpp import default_model_path

    cached = gguf_cache_path(default_model_path())
    assert (cached / "config.json").exists() and (cached / "care-sdk-complete").exists()
    assert "quantization_config" not in json.loads((cached / "config.json").read_text())
    assert smol.identity.startswith("hf:") and smol.identity.endswith(".gguf")


@pytest.mark.slow
def test_smollm2_writes_schema_valid_rubrics(smol: HFBackend) -> None:
    request = GenerationRequest(
        messages=tuple(generator_messages(as_messages(CONTEXT))), json_schema=rubric_schema(), max_tokens=400, seed=0
    )
    [result] = smol.generate([request])
    assert result.ok, result.error
    assert result.completions[0].finish_reason == "stop"
    _check_rubric_json(json.loads(result.text))
    rubric = parse_rubric(result.text)
    assert len(rubric.criteria) == 6 and math.isclose(sum(rubric.weights.values()), 1.0)


@pytest.mark.slow
def test_smollm2_scores_replies_with_logprob_distributions(smol: HFBackend) -> None:
    rubric = Rubric.uniform_fixed()
    replies = [
        "Panicking at the same spot three times sounds so frustrating. What happens right before the roundabout?",
        "Just practise more.",
    ]
    # Its exact decoded requests: schema, max_tokens, top_logprobs (forced replies: test_forced_scoring).
    evaluator = RubricEvaluator(smol, use_logprobs=True, mode="decoded")
    requests = [evaluator.request(CONTEXT, rubric, reply) for reply in replies]
    batched = smol.generate(requests)
    for result in batched:
        assert result.ok, result.error
        scores = json.loads(result.text)["scores"]
        assert sorted(scores) == [f"c{i}" for i in range(1, 7)] and all(s in range(1, 6) for s in scores.values())
        # What the evaluator does with a reply: parse it, then take expected scores from the digit logprobs.
        evaluation = expected_scores(parse_evaluation(result.text, rubric), result.completions[0])
        assert all(s.distribution is not None and math.isclose(sum(s.distribution), 1.0) for s in evaluation.scores)
        assert all(1.0 <= s.score <= 5.0 for s in evaluation.scores)
    # The shorter reply is left-padded in the batch; alone it has no padding.
    alone = smol.generate([requests[1]])[0]
    assert alone.text == batched[1].text
    tokens = [[t.token for t in r.completions[0].logprobs or ()] for r in (alone, batched[1])]
    assert tokens[0] == tokens[1]
