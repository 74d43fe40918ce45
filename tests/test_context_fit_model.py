"""Context fit on the real bundled model: the reads of llama.cpp and transformers agree, the KV
cache reuse changes nothing, held-out ESConv reference replies fit their contexts better than
replies from other conversations, and the bundled models' reward with the add-on prefers them to
those replies and to echoes of the user (greedy and deterministic, so the counts are stable)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from care_lab.data import default_strategy_map, load_esconv
from care_sdk import AdaptiveReward, Message
from care_sdk.addons import add_ons
from care_sdk.backends.llamacpp import LlamaCppBackend
from care_sdk.bundled.context_fit import ContextFit

pytestmark = pytest.mark.slow

PAIRS = 10


@pytest.fixture(scope="module")
def pairs(data_dir: Path) -> list[tuple[list[dict[str, Any]], str, str]]:
    """``(context, reference reply, another test dialogue's reply)``: the third supporter turn of
    each of the first ten ESConv test dialogues, against the same turn of the next dialogue."""
    mapping = default_strategy_map()
    turns = []
    for dialogue in load_esconv(data_dir / "esconv" / "test.jsonl", strategy_map=mapping).records:
        usable = [t for t in dialogue.supporter_turns(mapping) if len(t.context) >= 2 and t.reply.strip()]
        if len(usable) >= 3:
            turns.append(usable[2])
        if len(turns) == PAIRS:
            break
    return [(t.context_messages(), t.reply, turns[(i + 1) % PAIRS].reply) for i, t in enumerate(turns)]


@pytest.fixture(scope="module")
def fit(model_path: Path) -> Iterator[ContextFit]:
    context_fit = ContextFit(LlamaCppBackend(model_path, n_ctx=4096, n_threads=1))
    yield context_fit
    context_fit.close()


def test_llamacpp_and_transformers_read_the_same_reply_logprobs(
    model_path: Path, pairs: list[tuple[list[dict[str, Any]], str, str]]
) -> None:
    from care_sdk.backends.hf import HFBackend

    llama = LlamaCppBackend(model_path, n_ctx=4096, n_threads=1)
    hf = HFBackend.from_gguf(model_path, n_threads=1)
    for context, reference, other in pairs[:2]:
        messages = [Message(**m) for m in context][-6:]
        for reply in (reference, other):
            a, b = llama.reply_logprobs(messages, reply), hf.reply_logprobs(messages, reply)
            assert len(a) == len(b) > 0
            assert abs(sum(a) - sum(b)) / len(a) < 0.05  # the same weights, two numerics
    llama.close()
    hf.close()


def test_reusing_the_cached_prompt_gives_the_cold_read(
    model_path: Path, pairs: list[tuple[list[dict[str, Any]], str, str]]
) -> None:
    backend = LlamaCppBackend(model_path, n_ctx=4096, n_threads=1)
    context, reference, other = pairs[0]
    messages = [Message(**m) for m in context]
    warm = [backend.reply_logprobs(messages, reply) for reply in (reference, other, reference)]
    backend.llama.reset()
    cold = backend.reply_logprobs(messages, other)
    assert warm[0] == pytest.approx(warm[2], abs=1e-4)
    assert warm[1] == pytest.approx(cold, abs=1e-3)
    backend.close()


def test_held_out_references_fit_their_contexts_better_than_other_conversations_replies(
    fit: ContextFit, pairs: list[tuple[list[dict[str, Any]], str, str]]
) -> None:
    scores = fit.score_batch([(c, reply) for c, reference, other in pairs for reply in (reference, other)])
    assert all(isinstance(s, float) and 0.0 < s < 1.0 for s in scores)
    wins = sum(scores[2 * i] > scores[2 * i + 1] for i in range(PAIRS))  # type: ignore[operator]
    assert wins >= 8, f"the reference fitted better in only {wins} of {PAIRS} pairs"  # 9 when written


def _echo(context: list[dict[str, Any]]) -> str:
    said = next(m["content"] for m in reversed(context) if m["role"] == "user")
    return said.strip()


def test_the_context_fit_add_on_prefers_the_reference_to_other_replies_and_echoes(
    pairs: list[tuple[list[dict[str, Any]], str, str]],
) -> None:
    """The bundled models' reward with the context-fit add-on asked for, the same evaluations read
    two ways: the rubric reward alone and with the fit; and against two echoes of the user."""
    reward = AdaptiveReward.from_backend("default", context_fit=add_ons("context-fit").context_fit)
    assert reward.context_fit is not None and reward.context_fit.identity.endswith("copies discounted")
    assert reward.parts == ("care", "context_fit")
    assert AdaptiveReward.from_backend("default").parts == ("care",)  # the method alone, as on every backend
    kinds = ("reference", "other", "echo", "reference + echo")
    items = [
        (c, reply)
        for c, reference, other in pairs
        for reply in (reference, other, _echo(c), f"{reference.rstrip()} {_echo(c)}")
    ]
    results = reward.score_batch(items)
    assert all(r.reward is not None for r in results), [r.error for r in results]
    by_kind = {k: results[i :: len(kinds)] for i, k in enumerate(kinds)}
    assert all(r.context_fit is not None for r in by_kind["reference"] + by_kind["other"])

    def wins(kind: str, rubric_only: bool = False) -> float:
        pick = (lambda r: r.rubric_reward) if rubric_only else (lambda r: r.reward)
        return sum(
            float(pick(a) > pick(b)) + 0.5 * (pick(a) == pick(b))
            for a, b in zip(by_kind["reference"], by_kind[kind], strict=True)
        )

    # with the fit and on the rubric alone: 9 and 9 on the second-stage evaluator (7 and 5 on the SFT one)
    assert wins("other") >= 7 and wins("other", rubric_only=True) >= 7, (
        wins("other"),
        wins("other", rubric_only=True),
    )
    assert wins("echo") >= 8 and wins("reference + echo") >= 7, (wins("echo"), wins("reference + echo"))


def test_care_score_records_the_context_fit(tmp_path: Path, pairs: list[tuple[list[dict[str, Any]], str, str]]) -> None:
    import json

    from care_sdk.cli import main

    context, reference, _ = pairs[0]
    source = tmp_path / "dialogues.jsonl"
    source.write_text(
        json.dumps({"id": "d1", "messages": [*context, {"role": "assistant", "content": reference}]}) + "\n"
    )
    out = tmp_path / "scores.jsonl"
    assert main(["score", str(source), "--add-on", "context-fit", "--out", str(out), "--quiet"]) == 0
    record = json.loads(out.read_text().splitlines()[-1])
    assert 0.0 < record["context_fit"] < 1.0 and record["reward"] is not None
    assert record["scored_by"]["context_fit"].startswith("llamacpp:SmolLM2-135M-Instruct.Q4_1.gguf|window=6|")
    plain = tmp_path / "plain.jsonl"
    assert main(["score", str(source), "--out", str(plain), "--quiet"]) == 0  # the method alone, no fit read
    default = json.loads(plain.read_text().splitlines()[-1])
    assert default["context_fit"] is None and default["parts"] == ["care"]
    assert record["parts"] == ["care", "context_fit"]
    assert main(["score", str(source), "--add-on", "context-fit=openai:gpt@http://127.0.0.1:9/v1", "--quiet"]) == 2
