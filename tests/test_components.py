"""Logic of generator, evaluator and reward on the scripted backend (pure logic, no model)."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Sequence

import pytest

from care_sdk import (
    AdaptiveReward,
    BackendError,
    ContextOverflowError,
    Dimension,
    GenerationRequest,
    OutputError,
    RewardResult,
    Rubric,
    RubricEvaluator,
    RubricGenerator,
)
from care_sdk.backends.base import GenerationResult
from care_sdk.testing import ScriptedBackend, candidate_reply, evaluation_json, rubric_json
from care_sdk.types import fixed_criteria

CONTEXT = [{"role": "user", "content": "My exam went terribly and I feel stupid."}]
GOOD_RUBRIC = rubric_json({"cognitive": 1, "affective": 3, "proactive": 1})


def scripted_pair(rubrics: list[object], scores: list[int] | None = None) -> tuple[ScriptedBackend, ScriptedBackend]:
    gen = ScriptedBackend(rubrics)  # type: ignore[arg-type]
    ev = ScriptedBackend(lambda req: evaluation_json(scores or [5, 5, 3, 3, 1, 1]))
    return gen, ev


def test_generator_retries_invalid_replies_then_succeeds() -> None:
    backend = ScriptedBackend(["not json", rubric_json({"cognitive": 0, "affective": 0, "proactive": 0}), GOOD_RUBRIC])
    rubric = RubricGenerator(backend).generate(CONTEXT)
    assert rubric.top_dimension is Dimension.AFFECTIVE
    assert len(backend.requests) == 3
    seeds = [r.seed for r in backend.requests]
    assert seeds == [0, 1, 2]
    assert backend.requests[0].temperature == 0.0 and backend.requests[1].temperature > 0


def test_generator_reports_after_bounded_retries() -> None:
    backend = ScriptedBackend(["{}"] * 3)
    with pytest.raises(OutputError) as info:
        RubricGenerator(backend, max_attempts=3).generate(CONTEXT)
    assert info.value.attempts == 3
    assert "criteria" in str(info.value)
    assert info.value.raw == "{}"


def test_a_reply_cut_off_by_a_full_context_window_is_sent_again_with_fewer_messages() -> None:
    """A backend that holds the model starts a prompt that fits and stops where its window ends:
    the reply cannot finish there at any budget, so older messages are dropped, at no attempt's cost."""
    from care_sdk.backends.base import Completion

    def script(request: GenerationRequest) -> Completion:
        if "Earlier" in request.messages[-1].content:  # the window fills up 20 tokens into the rubric
            return Completion(text=GOOD_RUBRIC[:20], finish_reason="length")
        return Completion(text=GOOD_RUBRIC, finish_reason="stop")

    context = [
        {"role": "user", "content": "Earlier: my sister and I argued about money for weeks."},
        {"role": "assistant", "content": "That sounds draining. What happened?"},
        *CONTEXT,
    ]
    backend = ScriptedBackend(script)
    rubric = RubricGenerator(backend, max_attempts=1).generate(context)
    assert rubric.top_dimension is Dimension.AFFECTIVE
    assert len(backend.requests) == 2 and "Earlier" not in backend.requests[-1].messages[-1].content
    budget = ScriptedBackend([Completion(text=GOOD_RUBRIC[:20], finish_reason="length")])  # the budget, not the window
    with pytest.raises(OutputError, match=r"hit max_tokens"):
        RubricGenerator(budget, max_attempts=1, max_tokens=20).generate(context)
    full = ScriptedBackend(lambda request: Completion(text=GOOD_RUBRIC[:20], finish_reason="length"))
    with pytest.raises(OutputError, match=r"filled the context window\) \(after 2 attempts\)"):
        RubricGenerator(full, max_attempts=2).generate(context)  # nothing left to drop: attempts as usual
    assert len(full.requests) == 4  # three messages shown, two, one, then one again: the second attempt


def test_backend_error_is_typed_and_not_retried_by_the_parser() -> None:
    backend = ScriptedBackend([BackendError("unauthorized", status_code=401, provider="openai")])
    with pytest.raises(BackendError, match="401"):
        RubricGenerator(backend).generate(CONTEXT)
    assert len(backend.requests) == 1


LONG = [
    {"role": "user", "content": "First, a very long story. " * 40},
    {"role": "assistant", "content": "I hear you."},
    {"role": "user", "content": "And now my exam went terribly."},
]


def window(limit: int, reply: object) -> ScriptedBackend:
    """A backend whose context window holds ``limit`` characters of prompt."""

    def answer(request: GenerationRequest) -> object:
        size = sum(len(m.content) for m in request.messages)
        return ContextOverflowError(size, limit, provider="scripted") if size > limit else reply

    return ScriptedBackend(answer)  # type: ignore[arg-type]


def test_a_context_that_does_not_fit_is_cut_from_its_oldest_message_not_failed() -> None:
    gen = window(1500, GOOD_RUBRIC)
    rubric = RubricGenerator(gen, max_attempts=1).generate(LONG)
    assert rubric.top_dimension is Dimension.AFFECTIVE
    assert len(gen.requests) == 2  # the whole context, then without the long first message
    assert "very long story" in gen.requests[0].messages[1].content
    shown = gen.requests[1].messages[1].content
    assert "very long story" not in shown and "exam went terribly" in shown
    assert shown.startswith("Position: supporter turn 2, after 3 messages (the first 1 not shown).")
    ev = window(2000, evaluation_json([4, 4, 4, 4, 4, 4]))
    evaluation = RubricEvaluator(ev, max_attempts=1).evaluate(LONG, Rubric.uniform_fixed(), "That sounds hard.")
    assert [s.score for s in evaluation.scores] == [4] * 6
    assert len(ev.requests) == 2 and "very long story" not in ev.requests[1].messages[1].content


def test_a_reply_that_does_not_fit_with_any_context_is_the_overflow_error() -> None:
    ev = window(2000, evaluation_json([4, 4, 4, 4, 4, 4]))
    results = RubricEvaluator(ev).evaluate_batch(
        [(LONG, Rubric.uniform_fixed(), "Far too long. " * 200), (LONG, Rubric.uniform_fixed(), "Short.")]
    )
    assert isinstance(results[0], ContextOverflowError)
    assert not isinstance(results[1], ContextOverflowError)
    assert len(ev.requests) == 3 + 2  # three context sizes for the first, two for the second
    with pytest.raises(ContextOverflowError):
        RubricGenerator(window(10, GOOD_RUBRIC)).generate(LONG)


def test_one_rubric_per_context_in_a_batch_and_across_calls() -> None:
    gen_backend, ev_backend = scripted_pair([GOOD_RUBRIC])
    reward = AdaptiveReward(RubricGenerator(gen_backend), RubricEvaluator(ev_backend))
    rewards = reward([CONTEXT] * 8, [f"reply {i}" for i in range(8)])
    assert len(gen_backend.requests) == 1
    assert len(ev_backend.requests) == 8
    assert len(set(rewards)) == 1 and rewards[0] is not None
    reward([CONTEXT] * 8, [f"again {i}" for i in range(8)])
    assert len(gen_backend.requests) == 1
    assert reward.generator is not None and reward.generator.cache is not None
    assert reward.generator.cache.stats.hits == 1


def test_cache_key_includes_generator_identity() -> None:
    backend = ScriptedBackend([GOOD_RUBRIC, GOOD_RUBRIC])
    from care_sdk.cache import MemoryCache

    cache = MemoryCache()
    RubricGenerator(backend, cache=cache, seed=0).generate(CONTEXT)
    RubricGenerator(backend, cache=cache, seed=1).generate(CONTEXT)
    assert len(backend.requests) == 2


def test_batch_failures_become_none_with_error_not_zero() -> None:
    gen = ScriptedBackend(lambda req: GOOD_RUBRIC if "fine" in req.messages[-1].content else "garbage")
    ev = ScriptedBackend(lambda req: evaluation_json([4] * 6))
    reward = AdaptiveReward(RubricGenerator(gen, max_attempts=2), RubricEvaluator(ev))
    results = reward.score_batch([("I'm fine, just tired.", "ok"), ("Everything is awful.", "ok")])
    assert results[0].reward == pytest.approx(0.75)
    assert results[1].reward is None
    assert results[1].error is not None and "rubric generation failed" in results[1].error
    assert reward(["Everything is awful."], ["ok"]) == [None]


def test_single_call_raises_the_typed_error() -> None:
    reward = AdaptiveReward(evaluator=RubricEvaluator(ScriptedBackend(["{}"] * 3)), rubric=Rubric.uniform_fixed())
    with pytest.raises(OutputError, match="scores"):
        reward.score(CONTEXT, "hello")


def test_evaluator_rejects_missing_and_out_of_range_scores() -> None:
    rubric = Rubric.uniform_fixed()
    replies = [
        evaluation_json([5, 5, 5, 5, 5]),
        json.dumps({"scores": {f"c{i}": 9 for i in range(1, 7)}}),
        evaluation_json([2] * 6),
    ]
    backend = ScriptedBackend(replies)
    evaluation = RubricEvaluator(backend).evaluate(CONTEXT, rubric, "hi")
    assert [s.score for s in evaluation.scores] == [2.0] * 6
    assert len(backend.requests) == 3


def test_evaluator_prompt_puts_the_candidate_last_and_shares_the_prefix() -> None:
    evaluator = RubricEvaluator(ScriptedBackend([]))
    a = evaluator.request(CONTEXT, Rubric.uniform_fixed(), "First candidate.")
    b = evaluator.request(CONTEXT, Rubric.uniform_fixed(), "Second candidate.")
    assert candidate_reply(a) == "First candidate." and a.messages[-1].content.rstrip().endswith(">>>")
    shared = a.messages[-1].content.split("<<<REPLY-")[0]
    assert b.messages[-1].content.startswith(shared) and "Rubric:" in shared
    assert a.messages[0] == b.messages[0]


@pytest.mark.parametrize(
    ("variant", "weights", "criteria_source"),
    [
        ("uniform_weights", (1 / 3, 1 / 3, 1 / 3), "generated"),
        ("fixed_criteria", (0.2, 0.6, 0.2), "fixed"),
        ("fixed_rubric", (1 / 3, 1 / 3, 1 / 3), "fixed"),
    ],
)
def test_ablations(variant: str, weights: tuple[float, ...], criteria_source: str) -> None:
    gen_backend, ev_backend = scripted_pair([GOOD_RUBRIC])
    reward = AdaptiveReward(RubricGenerator(gen_backend), RubricEvaluator(ev_backend), variant=variant)
    result = reward.score(CONTEXT, "That sounds painful.")
    assert result.rubric is not None
    assert tuple(result.rubric.weights.values()) == pytest.approx(weights)
    fixed = result.rubric.criteria == fixed_criteria()
    assert fixed == (criteria_source == "fixed")
    if variant == "fixed_rubric":
        assert gen_backend.requests == []


def test_score_dialogue_judges_each_turn_against_its_context() -> None:
    gen_backend, ev_backend = scripted_pair([GOOD_RUBRIC, GOOD_RUBRIC])
    reward = AdaptiveReward(RubricGenerator(gen_backend), RubricEvaluator(ev_backend))
    messages = [
        {"role": "user", "content": "I lost my dog."},
        {"role": "assistant", "content": "I'm so sorry."},
        {"role": "user", "content": "He was 14."},
        {"role": "assistant", "content": "Fourteen years is a lifetime together."},
    ]
    results = reward.score_dialogue(messages)
    assert len(results) == 2
    assert "I'm so sorry." not in gen_backend.requests[0].messages[-1].content
    assert "I'm so sorry." in gen_backend.requests[1].messages[-1].content
    assert candidate_reply(ev_backend.requests[1]) == "Fourteen years is a lifetime together."


def test_trl_conversational_form() -> None:
    gen_backend, ev_backend = scripted_pair([GOOD_RUBRIC])
    reward = AdaptiveReward(RubricGenerator(gen_backend), RubricEvaluator(ev_backend))
    completions = [
        [{"role": "assistant", "content": "I hear you."}],
        [{"role": "assistant", "content": "Tell me more."}],
    ]
    assert len(reward([CONTEXT, CONTEXT], completions)) == 2
    assert candidate_reply(ev_backend.requests[1]) == "Tell me more."
    with pytest.raises(ValueError, match="2 prompts but 1 completions"):
        reward([CONTEXT, CONTEXT], completions[:1])


def test_the_trl_call_reaches_the_backend_within_five_frames_one_batch_per_stage() -> None:
    depths: list[int] = []

    class Deep(ScriptedBackend):
        def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
            depths.append(len(inspect.stack()))
            return super().generate(requests)

    def script(request: GenerationRequest) -> str:
        return GOOD_RUBRIC if request.purpose == "rubric" else evaluation_json([5, 5, 3, 3, 1, 1])

    backend = Deep(script)
    reward = AdaptiveReward(RubricGenerator(backend), RubricEvaluator(backend))
    here = len(inspect.stack())
    trl_kwargs = {"completion_ids": [[1], [2]], "trainer_state": None, "log_metric": lambda name, value: None}
    assert reward(prompts=[CONTEXT] * 2, completions=["I hear you.", "Tell me more."], **trl_kwargs) == [0.5] * 2
    # __call__, the engine's driver, the generator's public batch method, its driver, the backend
    assert [d - here for d in depths] == [5, 5]
    assert [r.purpose for r in backend.requests] == ["rubric", "evaluation", "evaluation"]  # one batch per stage


def test_async_gives_the_same_results_as_sync() -> None:
    def make() -> AdaptiveReward:
        gen_backend, ev_backend = scripted_pair([GOOD_RUBRIC])
        return AdaptiveReward(RubricGenerator(gen_backend), RubricEvaluator(ev_backend))

    def timeless(results: list[RewardResult]) -> list[RewardResult]:  # wall times differ between runs
        return [r.model_copy(update={"provenance": None}) for r in results]

    items = [(CONTEXT, "a"), (CONTEXT, "b")]
    sync = make().score_batch(items)
    asynchronous = asyncio.run(make().ascore_batch(items))
    assert timeless(sync) == timeless(asynchronous)
    assert [r.provenance.cost.calls for r in sync] == [r.provenance.cost.calls for r in asynchronous] == [1.5, 1.5]
    assert timeless([asyncio.run(make().ascore(CONTEXT, "a"))]) == timeless(sync[:1])


def test_sync_api_works_inside_a_running_event_loop() -> None:
    gen_backend, ev_backend = scripted_pair([GOOD_RUBRIC])
    reward = AdaptiveReward(RubricGenerator(gen_backend), RubricEvaluator(ev_backend))

    async def inside() -> float | None:
        return reward.score(CONTEXT, "hi").reward

    assert asyncio.run(inside()) is not None


def test_requests_carry_schema_and_sampling() -> None:
    gen = RubricGenerator(ScriptedBackend([]), criteria_per_dimension=3, temperature=0.5, seed=7)
    request: GenerationRequest = gen.request(CONTEXT)
    assert request.json_schema is not None
    assert request.json_schema["properties"]["criteria"]["properties"]["cognitive"]["minItems"] == 3
    assert (request.temperature, request.seed) == (0.5, 7)
    assert "and 3 criteria C" in request.messages[0].content
