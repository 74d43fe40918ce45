"""Context fit on the real bundled model: the reads of llama.cpp and transformers agree, the KV
cache reuse changes nothing, a reply's hidden states are read after its prefix computed once,
held-out ESConv reference replies fit their contexts better than replies from other
conversations (against "Hi." and against four ESConv train contexts), and the bundled models'
default reward prefers them to those replies and to echoes of the user (greedy and
deterministic, so the counts are stable)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from care_lab.data import default_strategy_map, load_esconv
from care_sdk import AdaptiveReward, ContextFit, Message
from care_sdk.backends._llamacpp_states import LayerMeans
from care_sdk.backends.llamacpp import LlamaCppBackend
from care_sdk.errors import ConfigError, ContextOverflowError

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


def test_a_reply_read_after_its_prefix_computes_only_the_reply(
    model_path: Path, pairs: list[tuple[list[dict[str, Any]], str, str]]
) -> None:
    """The shift check's reads: the prefix once, then each reply's own tokens after it; the means
    are those transformers reads in float32 on the same weights (whole texts, by difference)."""
    import numpy as np

    from care_sdk.backends.hf import HFBackend
    from care_sdk.bundled.shift_check import check_prefix

    backend = LlamaCppBackend(model_path, n_ctx=4096, n_threads=1)
    hf = HFBackend.from_gguf(model_path)
    context, reference, other = pairs[0]
    prefix = check_prefix(context, 6)
    texts = [f"{prefix} {reference}", f"{prefix} {other}"]
    n = [len(backend.llama.tokenize(t.encode(), add_bos=False, special=False)) for t in [prefix, *texts]]
    means = backend._means()
    read = np.array(backend.hidden_state_means_after(prefix, texts, 15))
    assert means.computed == n[1] + n[2] - n[0]  # the prefix once, then each reply's own tokens
    again = np.array(backend.hidden_state_means_after(prefix, texts[1:], 15))
    assert means.computed == n[1] + 2 * n[2] - 2 * n[0] and np.array_equal(again[0], read[1])  # the prefix kept
    k = 5  # the shift over a reply's first k tokens: only those are computed, and they read as the reply cut there
    cut = backend.llama.tokenize(texts[0].encode(), add_bos=False, special=False)[: n[0] + k]
    short = backend.llama.detokenize(cut).decode()
    assert backend.llama.tokenize(short.encode(), add_bos=False, special=False) == cut  # a clean cut
    before = means.computed
    (first,) = backend.hidden_state_means_after(prefix, texts[:1], 15, max_tokens=k)
    assert means.computed - before == k
    assert np.array_equal(first, backend.hidden_state_means_after(prefix, [short], 15)[0])
    assert np.array_equal(backend.hidden_state_means_after(prefix, texts[:1], 15, max_tokens=n[1])[0], read[0])
    small = LayerMeans(backend.llama, n_ctx=n[0] + k, n_threads=1)  # only the tokens read need to fit
    with pytest.raises(ContextOverflowError):
        small.read_after(prefix, texts[:1], 15)
    assert np.allclose(small.read_after(prefix, texts[:1], 15, max_tokens=k)[0], first, atol=1e-3)
    small.close()
    backend.hidden_state_means(["User: Hi."], 15)  # another text in between: the prefix is computed again, alike
    assert np.array_equal(np.array(backend.hidden_state_means_after(prefix, texts[1:], 15))[0], read[1])
    whole = np.array(hf.hidden_state_means([prefix, *texts], 15))
    truth = (whole[1:] * np.array(n[1:])[:, None] - whole[0] * n[0]) / (np.array(n[1:])[:, None] - n[0])
    cosine = (read * truth).sum(1) / np.linalg.norm(read, axis=1) / np.linalg.norm(truth, axis=1)
    assert cosine.min() > 0.9999, cosine  # measured 0.99996 and 0.99998
    with pytest.raises(ConfigError, match="begin with"):
        backend.hidden_state_means_after(prefix, ["User: Hi.\nSupporter: Oh no."], 15)
    with pytest.raises(ConfigError, match="max_tokens must be at least 1"):
        backend.hidden_state_means_after(prefix, texts, 15, max_tokens=0)
    start, merged = "User: I am sad", "User: I am sadness today"  # "sadness" is one token, not "sad" and more
    tokens = [backend.llama.tokenize(t.encode(), add_bos=False, special=False) for t in (start, merged)]
    assert tokens[1][: len(tokens[0])] != tokens[0]
    (seam,) = backend.hidden_state_means_after(start, [merged], 15)
    a, b = (np.array(backend.hidden_state_means([t], 15)[0]) for t in (start, merged))  # each whole
    m, n = len(tokens[0]), len(tokens[1])
    assert np.allclose(seam, (b * n - a * m) / (n - m))  # merged at the seam: by difference of whole reads
    hf.close()
    backend.close()


def test_held_out_references_fit_their_contexts_better_than_other_conversations_replies(
    fit: ContextFit, pairs: list[tuple[list[dict[str, Any]], str, str]]
) -> None:
    scores = fit.score_batch([(c, reply) for c, reference, other in pairs for reply in (reference, other)])
    assert all(isinstance(s, float) and 0.0 < s < 1.0 for s in scores)
    wins = sum(scores[2 * i] > scores[2 * i + 1] for i in range(PAIRS))  # type: ignore[operator]
    assert wins >= 8, f"the reference fitted better in only {wins} of {PAIRS} pairs"  # 9 when written


def test_against_the_esconv_train_contexts_held_out_references_fit_better_too(
    model_path: Path, pairs: list[tuple[list[dict[str, Any]], str, str]]
) -> None:
    from care_sdk.bundled.context_fit import ESCONV_GATE, named_baselines

    esconv = ContextFit(LlamaCppBackend(model_path, n_ctx=4096, n_threads=1), baselines=named_baselines("esconv"))
    assert esconv.gate == ESCONV_GATE  # recognised from the data directory's draw
    scores = esconv.score_batch([(c, reply) for c, reference, other in pairs for reply in (reference, other)])
    assert all(isinstance(s, float) and 0.0 < s < 1.0 for s in scores)
    wins = sum(scores[2 * i] > scores[2 * i + 1] for i in range(PAIRS))  # type: ignore[operator]
    assert wins >= 8, f"the reference fitted better in only {wins} of {PAIRS} pairs"
    esconv.close()


def _echo(context: list[dict[str, Any]]) -> str:
    said = next(m["content"] for m in reversed(context) if m["role"] == "user")
    return said.strip()


def test_the_context_fit_add_on_prefers_the_reference_to_other_replies_and_echoes(
    pairs: list[tuple[list[dict[str, Any]], str, str]],
) -> None:
    """The bundled models' reward with the context-fit add-on asked for, the same evaluations read
    two ways: the rubric reward alone and with the fit; and against two echoes of the user."""
    on = AdaptiveReward.from_backend("default", context_fit="on")
    assert on.context_fit is not None and on.context_fit.check is None  # PMI alone unless the check is asked for
    assert on.parts == ("care", "context_fit")
    reward = AdaptiveReward.from_backend("default", context_fit=ContextFit(check="auto"))
    assert reward.context_fit is not None and reward.context_fit.identity.endswith("copies discounted")
    assert reward.parts == ("care", "context_fit", "shift_check")
    assert AdaptiveReward.from_backend("default").context_fit is None  # off unless asked for
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

    assert wins("other") >= 7 and wins("other") > wins("other", rubric_only=True), (
        wins("other"),
        wins("other", rubric_only=True),
    )  # 7 and 5 when written
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
    on = ["--context-fit", "on", "--context-fit-check", "auto"]
    assert main(["score", str(source), *on, "--out", str(out), "--quiet"]) == 0
    record = json.loads(out.read_text().splitlines()[-1])
    assert 0.0 < record["context_fit"] < 1.0 and record["reward"] is not None
    assert record["scored_by"]["context_fit"].startswith("llamacpp:SmolLM2-135M-Instruct.Q4_1.gguf|window=6|")
    assert "|shift-check=" in record["scored_by"]["context_fit"]
    plain = tmp_path / "plain.jsonl"
    assert (
        main(
            ["score", str(source), "--context-fit", "on", "--context-fit-check", "off", "--out", str(plain), "--quiet"]
        )
        == 0
    )
    unchecked = json.loads(plain.read_text().splitlines()[-1])
    assert "shift-check" not in unchecked["scored_by"]["context_fit"]
    assert unchecked["context_fit"] >= record["context_fit"]  # the check only takes away
    from dataclasses import replace

    from care_sdk.bundled.shift_check import ShiftCheck

    mine = replace(ShiftCheck.bundled(), reply_tokens=4)  # a check of one's own, from its file
    mine.save(tmp_path / "check.json")
    own = tmp_path / "own.jsonl"
    check = str(tmp_path / "check.json")
    assert main(["score", str(source), "--context-fit", "on", "--context-fit-check", check, "--out", str(own)]) == 0
    assert f"|{mine.identity}|" in json.loads(own.read_text().splitlines()[-1])["scored_by"]["context_fit"]
    missing = str(tmp_path / "none.json")
    assert main(["score", str(source), "--context-fit", "on", "--context-fit-check", missing, "--quiet"]) == 2
    off = tmp_path / "off.jsonl"
    assert main(["score", str(source), "--out", str(off), "--quiet"]) == 0  # off unless asked for
    assert json.loads(off.read_text().splitlines()[-1])["context_fit"] is None
    assert main(["score", str(source), "--context-fit", "openai:gpt@http://127.0.0.1:9/v1", "--quiet"]) == 2


def test_the_bundled_shift_check_doubts_other_conversations_replies_and_only_takes_away(
    model_path: Path, pairs: list[tuple[list[dict[str, Any]], str, str]]
) -> None:
    from care_sdk.bundled.shift_check import ShiftCheck

    backend = LlamaCppBackend(model_path, n_ctx=4096, n_threads=1)
    checked, plain = ContextFit(backend, check=ShiftCheck.bundled()), ContextFit(backend, check=None)
    items = [(c, reply) for c, reference, other in pairs for reply in (reference, other)]
    pmis = plain.pmi_batch(items)
    factors = checked.check_factors(items, pmis)
    assert all(isinstance(f, float) and 0.0 < f <= 1.0 for f in factors), factors
    reference, other = factors[0::2], factors[1::2]
    doubted = sum(r > o for r, o in zip(reference, other, strict=True))  # type: ignore[operator]
    assert doubted >= 5 and sum(o < 1.0 for o in other) > sum(r < 1.0 for r in reference), factors  # type: ignore[operator]
    with_check, without = checked.score_batch(items), plain.score_batch(items)
    assert all(a <= b for a, b in zip(with_check, without, strict=True))  # type: ignore[operator]
    backend.close()
