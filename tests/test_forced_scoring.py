"""Forced-position scoring: the tokenisation logic on made-up tokenisers, the evaluator's mode, and
the real backends (llama.cpp on the bundled model, with and without a LoRA adapter)."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from care_sdk import RubricEvaluator
from care_sdk._core import SCORES
from care_sdk.backends.base import Backend, ForcedReplies, ForcedReply, ForcedRequest, GenerationRequest
from care_sdk.backends.forced import build_forced_reply, choice_tokens, common_prefix, forced_completion
from care_sdk.errors import BackendError, ConfigError
from care_sdk.evaluator import expected_scores, forced_evaluation
from care_sdk.plans import drive, parse_plan
from care_sdk.prompts import parse_evaluation
from care_sdk.testing import RecordingBackend, ScriptedBackend, evaluation_json
from care_sdk.types import Evaluation, Message, Rubric

CONTEXT = [
    {"role": "user", "content": "I failed my driving test for the third time. I feel like such an idiot."},
    {"role": "assistant", "content": "Three times is exhausting. What happened on the test?"},
    {"role": "user", "content": "I panicked at the roundabout again and everyone else passes easily."},
]
REPLIES = [
    "Panicking at the same spot three times sounds so frustrating. What happens in your body right then?",
    "Just practise more and you will pass.",
]
DIGITS = tuple("12345")


# -- made-up tokenisers: each splits the same text differently ----------------------------------


def per_char(text: str) -> tuple[list[int], list[int]]:
    """One token per character."""
    return [ord(ch) for ch in text], list(range(1, len(text) + 1))


def greedy_vocab(vocab: Sequence[str]):  # type: ignore[no-untyped-def]
    """Longest-match tokenisation over ``vocab`` (any single character is a token too)."""
    ids = {piece: 1000 + i for i, piece in enumerate(vocab)}

    def tokenize(text: str) -> tuple[list[int], list[int]]:
        out, ends, i = [], [], 0
        while i < len(text):
            piece = max((p for p in vocab if text.startswith(p, i)), key=len, default=text[i])
            out.append(ids[piece] if piece in ids else ord(piece))
            i += len(piece)
            ends.append(i)
        return out, ends

    return tokenize, ids


def test_digit_as_its_own_token_is_one_step() -> None:
    tokens = choice_tokens(per_char, '{"c1": ', DIGITS, ", ")
    assert tokens.options == tuple((ord(d),) for d in DIGITS)
    assert tokens.shared == tuple(ord(ch) for ch in '{"c1": ')


def test_space_merged_with_the_digit_is_found_behind_the_shared_text() -> None:
    tokenize, ids = greedy_vocab([f" {d}" for d in DIGITS] + ['"c1":'])
    tokens = choice_tokens(tokenize, '{"c1": ', DIGITS, ", ")
    assert tokens.options == tuple((ids[f" {d}"],) for d in DIGITS)
    assert tokens.shared == (ord("{"), ids['"c1":'])  # the trailing space went into the digit's token


def test_digit_merged_with_the_comma_after_it_scores_the_merged_token() -> None:
    tokenize, ids = greedy_vocab([f"{d}," for d in DIGITS])
    tokens = choice_tokens(tokenize, "c1: ", DIGITS, ", c2")
    assert tokens.options == tuple((ids[f"{d},"],) for d in DIGITS)


def test_multi_token_choice_is_scored_by_the_sum_of_its_token_logprobs() -> None:
    forced = ForcedReply(segments=("s=", "."), choices=("ab", "c"))  # "ab" is two tokens
    calls: list[tuple[int, ...]] = []

    def next_logprobs(ids: Sequence[int], wanted: Sequence[int]) -> list[float]:
        calls.append(tuple(ids))
        table = {ord("a"): -1.0, ord("c"): -2.0, ord("b"): -0.5}
        return [table.get(w, -9.0) for w in wanted]

    built = build_forced_reply(forced, [7], per_char, next_logprobs)
    p_ab = math.exp(-1.5) / (math.exp(-1.5) + math.exp(-2.0))
    assert built.distributions[0] == pytest.approx((p_ab, 1 - p_ab))
    assert built.text == "s=ab."
    assert calls == [(7, ord("s"), ord("=")), (7, ord("s"), ord("="), ord("a"))]


def test_single_token_choices_cost_one_model_call_per_slot() -> None:
    forced = forced_evaluation(6)
    calls = []

    def next_logprobs(ids: Sequence[int], wanted: Sequence[int]) -> list[float]:
        calls.append(len(ids))
        return [-1.0] * len(wanted)

    build_forced_reply(forced, [1, 2, 3], per_char, next_logprobs)
    assert len(calls) == 6
    assert calls == sorted(calls)  # each slot's prefix extends the previous one (the cache is reused)


def test_choices_the_tokens_cannot_tell_apart_raise() -> None:
    def unknown_digits(text: str) -> tuple[list[int], list[int]]:
        ids, ends = per_char(text)
        return [0 if ch.isdigit() else i for ch, i in zip(text, ids, strict=True)], ends

    with pytest.raises(ValueError, match="cannot be told apart"):
        choice_tokens(unknown_digits, "c1: ", DIGITS, "}")


def test_tokens_that_do_not_cover_the_text_raise() -> None:
    with pytest.raises(ValueError, match="do not cover"):
        choice_tokens(lambda text: ([1], [1]), "c1: ", DIGITS, "}")


def test_greedy_takes_the_first_of_equal_maxima_and_sampling_follows_the_seed() -> None:
    forced = ForcedReply(segments=("", ""), choices=("1", "2", "3"))

    def flat(ids: Sequence[int], wanted: Sequence[int]) -> list[float]:
        return [-1.0] * len(wanted)

    assert build_forced_reply(forced, [0], per_char, flat).picked == ("1",)
    draws = [build_forced_reply(forced, [0], per_char, flat, temperature=1.0, seed=s).picked for s in range(12)]
    assert draws == [build_forced_reply(forced, [0], per_char, flat, temperature=1.0, seed=s).picked for s in range(12)]
    assert len(set(draws)) > 1


def test_common_prefix_counts_equal_leading_tokens() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 9, 9]) == 2
    assert common_prefix([1], []) == 0


def test_forced_evaluation_text_parses_and_completion_feeds_expected_scores() -> None:
    forced = forced_evaluation(6)
    rubric = Rubric.uniform_fixed()
    distributions = tuple((0.1, 0.2, 0.3, 0.3, 0.1) for _ in range(6))
    built = build_forced_reply(forced, [0], per_char, lambda ids, w: [math.log(p) for p in distributions[0]])
    assert built.picked == ("3",) * 6  # the first of the two equal maxima
    completion = forced_completion(built, forced)
    assert "".join(t.token for t in completion.logprobs or ()) == completion.text
    evaluation = expected_scores(parse_evaluation(completion.text, rubric), completion)
    assert [s.score for s in evaluation.scores] == pytest.approx([3.1] * 6)
    assert evaluation.scores[0].distribution == pytest.approx(distributions[0])


# -- the evaluator's mode -----------------------------------------------------------------------


class CharModel(ScriptedBackend):
    """A backend that builds forced replies over a per-character tokeniser; prefers "4" everywhere."""

    def __init__(self) -> None:
        super().__init__(lambda request: evaluation_json([1] * 6), forced=self.prefer_4)

    @staticmethod
    def prefer_4(text: str, chars: Sequence[str]) -> list[float]:
        return [-0.2 if c == "4" else -3.0 for c in chars]

    @property
    def forced_requests(self) -> int:
        return sum(isinstance(r, ForcedRequest) for r in self.requests)


def test_auto_mode_forces_where_the_backend_can_and_decodes_elsewhere() -> None:
    model = CharModel()
    evaluation = RubricEvaluator(model).evaluate(CONTEXT, Rubric.uniform_fixed(), REPLIES[0])
    assert [s.score for s in evaluation.scores] == [4.0] * 6
    assert model.forced_requests == 1
    scripted = RubricEvaluator(ScriptedBackend([evaluation_json([2] * 6)]))
    assert not scripted.forced
    assert isinstance(scripted.request(CONTEXT, Rubric.uniform_fixed(), "x"), GenerationRequest)
    decoded = RubricEvaluator(model, mode="decoded").evaluate(CONTEXT, Rubric.uniform_fixed(), REPLIES[0])
    assert [s.score for s in decoded.scores] == [1.0] * 6 and model.forced_requests == 1


def test_forced_mode_with_logprobs_gives_expected_scores() -> None:
    evaluation = RubricEvaluator(CharModel(), use_logprobs=True).evaluate(CONTEXT, Rubric.uniform_fixed(), "ok")
    weights = [math.exp(-3.0)] * 3 + [math.exp(-0.2), math.exp(-3.0)]
    expected = sum(w * s for w, s in zip(weights, range(1, 6), strict=True)) / sum(weights)
    assert [s.score for s in evaluation.scores] == pytest.approx([expected] * 6)


def test_a_forced_request_shows_the_prompt_a_decoded_one_shows() -> None:
    forced = RubricEvaluator(CharModel()).request(CONTEXT, Rubric.uniform_fixed(), "ok")
    decoded = RubricEvaluator(CharModel(), mode="decoded").request(CONTEXT, Rubric.uniform_fixed(), "ok")
    assert isinstance(forced, ForcedRequest) and isinstance(decoded, GenerationRequest)
    assert forced.reply == forced_evaluation(6) and forced.messages == decoded.messages
    assert (forced.purpose, forced.seed, forced.temperature) == (decoded.purpose, decoded.seed, decoded.temperature)


def test_a_forced_batch_needs_a_backend_that_builds_forced_replies() -> None:
    request = RubricEvaluator(CharModel()).request(CONTEXT, Rubric.uniform_fixed(), "ok")
    plain = RubricEvaluator(ScriptedBackend(["{}"]))
    with pytest.raises(ConfigError, match="ForcedReplies"):
        drive(parse_plan([request], lambda i, c: c.text, what="x", max_attempts=1), plain.backend)
    recorder = RecordingBackend(CharModel())
    assert isinstance(recorder, ForcedReplies) and not isinstance(RecordingBackend(ScriptedBackend([])), ForcedReplies)
    evaluation = RubricEvaluator(recorder).evaluate(CONTEXT, Rubric.uniform_fixed(), "ok")
    assert [s.score for s in evaluation.scores] == [4.0] * 6
    assert [type(r) for r in recorder.requests] == [ForcedRequest] and recorder.batches == [1]
    in_async = asyncio.run(RubricEvaluator(recorder).aevaluate(CONTEXT, Rubric.uniform_fixed(), "ok"))
    assert in_async == evaluation and recorder.batches == [1, 1]  # built in a worker thread, through the hooks


def test_forced_mode_on_a_backend_without_it_and_unknown_modes_are_refused() -> None:
    with pytest.raises(ConfigError, match="forced replies"):
        RubricEvaluator(ScriptedBackend(["{}"]), mode="forced")
    with pytest.raises(ConfigError, match="mode must be one of"):
        RubricEvaluator(ScriptedBackend(["{}"]), mode="fast")


# -- llama.cpp on the bundled model -------------------------------------------------------------


@pytest.fixture(scope="module")
def llama(model_path: Path) -> Iterator[Backend]:
    from care_sdk.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(model_path, n_ctx=2048, n_threads=1)
    yield backend
    backend.close()


def test_llamacpp_prompt_ids_are_the_chat_completion_prompt(llama: Backend) -> None:
    request = RubricEvaluator(llama, mode="decoded").request(CONTEXT, Rubric.uniform_fixed(), REPLIES[0])
    request = GenerationRequest(messages=request.messages, max_tokens=1)
    prompt = llama._prompt_ids(request)  # type: ignore[attr-defined]
    llama.generate([request])
    assert llama.llama.input_ids[: len(prompt)].tolist() == prompt  # type: ignore[attr-defined]


def test_llamacpp_candidates_of_one_context_share_one_prefill(llama: Backend) -> None:
    evaluator = RubricEvaluator(llama)
    assert evaluator.forced
    first = evaluator.evaluate(CONTEXT, Rubric.uniform_fixed(), REPLIES[0])
    before = llama.evaluated_tokens  # type: ignore[attr-defined]
    second = evaluator.evaluate(CONTEXT, Rubric.uniform_fixed(), REPLIES[1])
    spent = llama.evaluated_tokens - before  # type: ignore[attr-defined]
    prompt = llama._prompt_ids(evaluator.request(CONTEXT, Rubric.uniform_fixed(), REPLIES[1]))  # type: ignore[attr-defined]
    assert isinstance(first, Evaluation) and isinstance(second, Evaluation)
    assert spent < 120 < len(prompt)  # the reply's own tokens and the fixed text, not the shared prompt


@pytest.mark.slow
def test_llamacpp_scores_do_not_depend_on_what_the_cache_holds(model_path: Path) -> None:
    from care_sdk.backends.llamacpp import LlamaCppBackend

    with LlamaCppBackend(model_path, n_ctx=2048, n_threads=1) as backend:
        evaluator = RubricEvaluator(backend, use_logprobs=True)
        messages = [Message(**m) for m in CONTEXT]
        cold = evaluator.evaluate(CONTEXT, Rubric.uniform_fixed(), REPLIES[1])
        again = evaluator.evaluate(CONTEXT, Rubric.uniform_fixed(), REPLIES[1])  # its whole text cached now
        assert isinstance(cold, Evaluation) and isinstance(again, Evaluation)
        assert _dists(again) == _dists(cold)
        cold_reads = backend.reply_logprobs(messages, REPLIES[1])
        assert backend.reply_logprobs(messages, REPLIES[1]) == cold_reads  # the prompt cached this time


@pytest.mark.slow
def test_llamacpp_forced_distributions_equal_one_full_pass(llama: Backend, model_path: Path) -> None:
    from care_sdk.backends.llamacpp import LlamaCppBackend

    evaluator = RubricEvaluator(llama, use_logprobs=True)
    evaluation = evaluator.evaluate(CONTEXT, Rubric.uniform_fixed(), REPLIES[1])
    request = evaluator.request(CONTEXT, Rubric.uniform_fixed(), REPLIES[1])
    reply = forced_evaluation(6).text([str(round(max(range(5), key=lambda i: d[i]) + 1)) for d in _dists(evaluation)])
    with LlamaCppBackend(model_path, n_ctx=2048, n_threads=1, logprobs=True) as full:
        prompt = full._prompt_ids(request)
        ids = prompt + full._reply_tokens(reply)[0]
        full.llama.eval(ids)  # one pass, every position's logits kept
        digit_ids = [full._reply_tokens(d)[0][0] for d in DIGITS]
        c = full._reply_tokens("c")[0][0]
        positions = [i for i in range(len(prompt), len(ids)) if ids[i] in digit_ids and ids[i - 1] != c]
        assert len(positions) == 6
        for position, score in zip(positions, evaluation.scores, strict=True):
            logits = full.llama.scores[position - 1]
            weights = [math.exp(float(logits[t]) - float(logits.max())) for t in digit_ids]
            assert score.distribution == pytest.approx([w / sum(weights) for w in weights], abs=2e-3)


def _dists(evaluation: Evaluation) -> list[tuple[float, ...]]:
    return [s.distribution for s in evaluation.scores if s.distribution is not None]


NEAR_TIE = 0.05
"""Where forced and decoded greedy scores differ, the forced probabilities of the two digits differ by at most this."""


def assert_equal_up_to_ties(forced: Sequence[object], decoded: Sequence[object]) -> None:
    """Greedy forced scores equal greedy decoded ones, except at a near-tie between two digits (where the
    decoder's tokens of the fixed text, which may differ from the text's own tokenisation, tip the balance);
    after a difference the two replies are conditioned on different text and are not compared further."""
    for f, d in zip(forced, decoded, strict=True):
        assert isinstance(f, Evaluation) and isinstance(d, Evaluation)
        for fs, ds in zip(f.scores, d.scores, strict=True):
            dist = fs.distribution
            assert dist is not None  # scored with use_logprobs: the greedy pick is the distribution's argmax
            pick = max(SCORES, key=lambda v: dist[v - 1])
            if pick != ds.score:
                gap = dist[pick - 1] - dist[int(ds.score) - 1]
                assert 0 <= gap <= NEAR_TIE, (pick, ds.score, dist)
                break


def test_llamacpp_decodes_json_in_the_layout_forced_replies_use(llama: Backend) -> None:
    request = RubricEvaluator(llama, mode="decoded").request(CONTEXT, Rubric.uniform_fixed(), REPLIES[0])
    text = llama.generate([request])[0].text
    assert text == json.dumps(json.loads(text))
    assert text == forced_evaluation(6).text([str(v) for v in json.loads(text)["scores"].values()])


def test_llamacpp_json_layout_is_checked(model_path: Path) -> None:
    from care_sdk.backends.llamacpp import LlamaCppBackend

    with pytest.raises(ConfigError, match="json_layout"):
        LlamaCppBackend(model_path, json_layout="pretty")


@pytest.mark.slow
def test_llamacpp_greedy_forced_scores_equal_decoded_up_to_digit_ties(llama: Backend) -> None:
    items = [(CONTEXT, Rubric.uniform_fixed(), reply) for reply in REPLIES]
    forced = RubricEvaluator(llama, mode="forced", use_logprobs=False).evaluate_batch(items)
    with_distributions = RubricEvaluator(llama, mode="forced", use_logprobs=True).evaluate_batch(items)
    decoded = RubricEvaluator(llama, mode="decoded").evaluate_batch(items)
    for f, w in zip(forced, with_distributions, strict=True):  # the expectation does not change the greedy path
        assert isinstance(f, Evaluation) and isinstance(w, Evaluation)
        picks = [max(SCORES, key=lambda v, d=s.distribution: d[v - 1]) for s in w.scores]  # type: ignore[index]
        assert [s.score for s in f.scores] == picks
    assert_equal_up_to_ties(with_distributions, decoded)


@pytest.mark.slow
def test_llamacpp_forced_scoring_runs_through_a_lora_adapter(model_path: Path) -> None:
    from care_sdk.backends.llamacpp import LlamaCppBackend
    from care_sdk.bundled.adapters import bundled_adapter

    adapter = bundled_adapter("generator")
    if adapter is None:
        pytest.skip("this build ships no adapter")
    request = RubricEvaluator(ScriptedBackend(["{}"])).request(CONTEXT, Rubric.uniform_fixed(), REPLIES[0])
    assert isinstance(request, GenerationRequest)
    forced = ForcedRequest(messages=request.messages, reply=forced_evaluation(6))
    with LlamaCppBackend(model_path, n_ctx=2048, n_threads=1, adapter=adapter) as tuned:
        with_adapter = [*tuned.forced_replies([forced]), *tuned.generate([request])]
    with LlamaCppBackend(model_path, n_ctx=2048, n_threads=1) as base:
        without = base.forced_replies([forced])[0]
    rubric = Rubric.uniform_fixed()
    forced_completion = with_adapter[0].completions[0]
    with_distributions = expected_scores(parse_evaluation(forced_completion.text, rubric), forced_completion)
    assert_equal_up_to_ties([with_distributions], [parse_evaluation(with_adapter[1].text, rubric)])
    tops = [t.top for t in forced_completion.logprobs or () if t.top]
    base_tops = [t.top for t in without.completions[0].logprobs or () if t.top]
    assert len(tops) == 6 and tops != base_tops  # the adapter changes the distributions


def test_llamacpp_prompt_beyond_the_context_is_an_error_not_a_score(model_path: Path) -> None:
    from care_sdk.backends.llamacpp import LlamaCppBackend

    with LlamaCppBackend(model_path, n_ctx=256, n_threads=1) as small:
        results = RubricEvaluator(small).evaluate_batch([(CONTEXT, Rubric.uniform_fixed(), REPLIES[0])])
    assert isinstance(results[0], BackendError)
    assert "context window" in str(results[0])


# -- transformers --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_hf() -> Iterator[Backend]:
    """A 2-layer random model with SmolLM2's tokenizer (its scores mean nothing; its arithmetic is real)."""
    pytest.importorskip("torch", reason="needs the hf extra")
    pytest.importorskip("llguidance", reason="needs the hf extra")
    pytest.importorskip("trl", reason="the tiny model helper needs the train extra")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from care_lab.training.models import tiny_model_dir
    from care_sdk.backends.hf import HFBackend

    path = tiny_model_dir()
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    backend = HFBackend(model=model, tokenizer=tokenizer, n_threads=1)
    yield backend
    backend.close()


def test_hf_forced_distributions_equal_one_full_forward(tiny_hf: Backend) -> None:
    import torch

    evaluator = RubricEvaluator(tiny_hf, use_logprobs=True)
    assert evaluator.forced
    evaluation = evaluator.evaluate(CONTEXT, Rubric.uniform_fixed(), REPLIES[0])
    picks = [str(max(range(5), key=lambda i: d[i]) + 1) for d in _dists(evaluation)]
    request = evaluator.request(CONTEXT, Rubric.uniform_fixed(), REPLIES[0])
    prompt = tiny_hf._prompt_ids(request.messages)  # type: ignore[attr-defined]
    reply_ids = tiny_hf._reply_tokens(forced_evaluation(6).text(picks))[0]  # type: ignore[attr-defined]
    digit_ids = [tiny_hf._reply_tokens(d)[0][0] for d in DIGITS]  # type: ignore[attr-defined]
    ids = prompt + reply_ids
    with torch.inference_mode():
        logits = tiny_hf.model(input_ids=torch.tensor([ids])).logits[0]  # type: ignore[attr-defined]
    c = tiny_hf._reply_tokens("c")[0][0]  # type: ignore[attr-defined]
    positions = [i for i in range(len(prompt), len(ids)) if ids[i] in digit_ids and ids[i - 1] != c]
    assert len(positions) == 6
    for position, score in zip(positions, evaluation.scores, strict=True):
        restricted = torch.softmax(logits[position - 1, digit_ids].double(), dim=-1).tolist()
        assert score.distribution == pytest.approx(restricted, abs=1e-4)


def test_hf_candidates_of_one_context_share_one_prefill(tiny_hf: Backend) -> None:
    evaluator = RubricEvaluator(tiny_hf)
    evaluator.evaluate(CONTEXT, Rubric.uniform_fixed(), REPLIES[0])
    before = tiny_hf.evaluated_tokens  # type: ignore[attr-defined]
    evaluator.evaluate(CONTEXT, Rubric.uniform_fixed(), REPLIES[1])
    assert tiny_hf.evaluated_tokens - before < 120  # type: ignore[attr-defined]


@pytest.mark.slow
def test_hf_smollm2_greedy_forced_scores_equal_decoded_up_to_digit_ties() -> None:
    pytest.importorskip("torch", reason="needs the hf extra")
    pytest.importorskip("llguidance", reason="needs the hf extra")
    from care_sdk.backends.hf import HFBackend
    from care_sdk.backends.llamacpp import default_model_path

    items = [(CONTEXT, Rubric.uniform_fixed(), reply) for reply in REPLIES]
    with HFBackend.from_gguf(default_model_path(), n_threads=1) as smol:
        forced = RubricEvaluator(smol, mode="forced", use_logprobs=True).evaluate_batch(items)
        decoded = RubricEvaluator(smol, mode="decoded").evaluate_batch(items)
    assert_equal_up_to_ties(forced, decoded)


def test_compact_grammar_keeps_control_characters_out_of_strings() -> None:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    from care_sdk.backends.llamacpp import compact_grammar, grammar_schema
    from care_sdk.prompts import rubric_schema

    grammar = compact_grammar(json_schema_to_gbnf(json.dumps(grammar_schema(rubric_schema()))))
    (char,) = [line for line in grammar.splitlines() if line.startswith("char ::=")]
    assert char.startswith('char ::= [^"\\\\\\x00-\\x1F\\x7F]')
    assert " space" not in grammar.replace("space ::=", "")
