"""Each reward's provenance and cost: the arithmetic, on scripted backends (pure logic).

The costs a batch's results carry must add up to what the batch cost, counted independently by a
recording wrapper in front of each backend: every request (retries included), the tokens the backend
reported. The rubric's cost is shared by the replies of one context; a cached or fixed rubric costs
nothing; a reply the guards settle costs nothing.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from collections.abc import Sequence
from typing import Any

import pytest

from care_sdk import AdaptiveReward, BackendError, Rubric, RubricEvaluator, RubricGenerator
from care_sdk.backends.base import GenerationRequest, GenerationResult
from care_sdk.evaluator import forced_evaluation
from care_sdk.provenance import Cost, Provenance, mean_cost
from care_sdk.testing import RecordingBackend, ScriptedBackend, evaluation_json, rubric_json
from care_sdk.types import Context, RewardResult

RUBRIC = rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
SAD = [{"role": "user", "content": "I failed my exam."}]
LONELY = [{"role": "user", "content": "My friend moved away."}]


def evaluation(request: GenerationRequest) -> str:
    return evaluation_json([4, 4, 3, 3, 2, 2])


def recorded(script: Any) -> RecordingBackend:
    return RecordingBackend(ScriptedBackend(script))


def reward_on(gen_script: Any, ev_script: Any = evaluation, **options: Any) -> tuple[AdaptiveReward, Any, Any]:
    gen, ev = recorded(gen_script), recorded(ev_script)
    return AdaptiveReward(RubricGenerator(gen), RubricEvaluator(ev), **options), gen, ev


def total(results: Sequence[RewardResult]) -> Cost:
    return sum((r.provenance.cost for r in results if r.provenance is not None), Cost())


def prompt_chars(*backends: RecordingBackend) -> int:
    """What the scripted backend reports as prompt tokens: one per character of the messages."""
    return sum(len(m.content) for b in backends for r in b.requests for m in r.messages)


def test_the_rubric_is_shared_by_the_replies_of_its_context_and_the_sums_match_the_backends() -> None:
    reward, gen, ev = reward_on(lambda request: RUBRIC)
    items: list[tuple[Context, str]] = [(SAD, "a"), (SAD, "b"), (SAD, "c"), (LONELY, "d")]
    results = reward.score_batch(items)
    made = [r.provenance for r in results]
    assert all(m is not None for m in made)
    assert [m.rubric_shared_by for m in made] == [3, 3, 3, 1]  # type: ignore[union-attr]
    assert [m.rubric_source for m in made] == ["generated"] * 4  # type: ignore[union-attr]
    assert [m.rubric_cost.calls for m in made] == [1.0] * 4  # type: ignore[union-attr]  # recorded whole
    assert [r.provenance.cost.calls for r in results] == pytest.approx([1 + 1 / 3] * 3 + [2.0])  # type: ignore[union-attr]
    spent = total(results)
    assert spent.calls == pytest.approx(len(gen.requests) + len(ev.requests)) == 6
    assert spent.prompt_tokens == pytest.approx(prompt_chars(gen, ev))
    assert spent.completion_tokens == pytest.approx(sum(len(r.text) for r in gen.results + ev.results))
    assert made[0].rubric_hash == made[3].rubric_hash == results[0].rubric.content_hash  # type: ignore[union-attr]


def test_every_attempt_counts_a_call_and_a_failed_reward_keeps_its_cost() -> None:
    tries: dict[str, int] = {}

    def rubric(request: GenerationRequest) -> str:  # SAD's first reply does not parse; LONELY's never does
        sad = "exam" in request.messages[-1].content
        tries[str(sad)] = tries.get(str(sad), 0) + 1
        return RUBRIC if sad and tries[str(sad)] > 1 else "not json"

    reward, gen, ev = reward_on(rubric)
    ok, failed = reward.score_batch([(SAD, "a"), (LONELY, "b")])
    assert ok.provenance is not None and failed.provenance is not None
    assert ok.provenance.rubric_cost.calls == 2.0 and ok.provenance.cost.calls == 3.0
    assert failed.reward is None and failed.failure is not None and failed.failure.stage == "rubric"
    assert failed.provenance.rubric_cost.calls == 3.0 and failed.provenance.evaluation_cost.calls == 0.0
    assert (failed.provenance.rubric_hash, failed.provenance.rubric_source) == (None, "generated")
    assert total([ok, failed]).calls == len(gen.requests) + len(ev.requests) == 6


def test_criteria_asked_again_count_as_calls_of_their_rubric() -> None:
    unreadable = {"cognitive": ["Asks about the the test."], "affective": ["Names it."], "proactive": ["Plans."]}
    replies = iter([rubric_json({"cognitive": 1, "affective": 1, "proactive": 1}, unreadable), RUBRIC])
    reward, gen, _ = reward_on(lambda request: next(replies))
    [result] = reward.score_batch([(SAD, "a")])
    assert result.rubric is not None and result.rubric.repairs  # the criterion came from the retry
    assert result.provenance is not None and result.provenance.rubric_cost.calls == len(gen.requests) == 2


def test_cached_and_fixed_rubrics_cost_no_call_and_say_so() -> None:
    reward, gen, _ = reward_on(lambda request: RUBRIC)
    first = reward.score_batch([(SAD, "a")])[0].provenance
    again = reward.score_batch([(SAD, "b"), (SAD, "c")])
    assert first is not None and first.rubric_source == "generated" and len(gen.requests) == 1
    for result in again:
        made = result.provenance
        assert made is not None and made.rubric_source == "cached" and made.rubric_hash == first.rubric_hash
        assert made.rubric_cost == Cost() and made.cost.calls == 1.0  # its evaluation alone
    fixed = AdaptiveReward(evaluator=RubricEvaluator(recorded(evaluation)), rubric=Rubric.uniform_fixed())
    made = fixed.score(SAD, "a").provenance
    assert made is not None and (made.rubric_source, made.generator, made.generator_prompt) == ("fixed", None, None)
    assert made.rubric_hash == Rubric.uniform_fixed().content_hash and made.cost.calls == 1.0


def test_a_reply_the_guards_settle_costs_nothing() -> None:
    reward, _, ev = reward_on(lambda request: RUBRIC)
    settled, scored = reward.score_batch([(SAD, ""), (SAD, "I'm here.")])
    assert settled.reward == 0.0 and settled.provenance is not None
    assert (settled.provenance.rubric_hash, settled.provenance.rubric_source) == (None, None)
    assert settled.provenance.cost == Cost() and settled.provenance.evaluator == reward.evaluator.identity
    assert scored.provenance is not None and scored.provenance.rubric_shared_by == 1  # the settled one shares nothing
    assert len(ev.requests) == 1


def test_identities_and_prompt_versions_are_the_components() -> None:
    reward, _, _ = reward_on(lambda request: RUBRIC, evaluation)
    made = reward.score(SAD, "a").provenance
    assert made is not None and reward.generator is not None
    assert (made.generator, made.generator_prompt) == (reward.generator.identity, reward.generator.prompt_version)
    assert (made.evaluator, made.evaluator_prompt) == (reward.evaluator.identity, reward.evaluator.prompt_version)
    assert "prompt=generator-v2" in made.generator and made.evaluator.endswith("|prompt=v2")


def test_seconds_are_each_batch_s_wall_time_split_among_its_requests() -> None:
    def slow_evaluation(request: GenerationRequest) -> str:
        time.sleep(0.05)
        return evaluation(request)

    reward, _, _ = reward_on(lambda request: RUBRIC, slow_evaluation)
    started = time.perf_counter()
    results = reward.score_batch([(SAD, "a"), (SAD, "b"), (SAD, "c"), (SAD, "d")])
    wall = time.perf_counter() - started
    seconds = [r.provenance.evaluation_cost.seconds for r in results]  # type: ignore[union-attr]
    assert min(seconds) >= 0.05 and max(seconds) - min(seconds) < 1e-5  # one batch of four requests, split evenly
    assert 0.2 <= total(results).seconds <= wall


def test_a_backend_that_reports_no_tokens_leaves_them_unknown() -> None:
    class Quiet(ScriptedBackend):
        def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
            return [GenerationResult(r.completions, r.error) for r in super().generate(requests)]  # usage dropped

    reward = AdaptiveReward(evaluator=RubricEvaluator(Quiet(evaluation)), rubric=Rubric.uniform_fixed())
    made = reward.score(SAD, "a").provenance
    assert made is not None and made.cost.calls == 1.0
    assert (made.cost.prompt_tokens, made.cost.completion_tokens) == (None, None)


def test_forced_scores_count_like_decoded_ones() -> None:
    backend = recorded(lambda request: RUBRIC)
    forced = ScriptedBackend([], forced=lambda text, chars: [0.0 if c == "4" else -2.0 for c in chars])
    evaluator = RubricEvaluator(RecordingBackend(forced))
    assert evaluator.forced
    reward = AdaptiveReward(RubricGenerator(backend), evaluator)
    results = reward.score_batch([(SAD, "a"), (SAD, "b")])
    assert [r.reward for r in results] == [0.75, 0.75]
    for result in results:
        cost = result.provenance.evaluation_cost  # type: ignore[union-attr]
        assert cost.calls == 1.0 and cost.prompt_tokens
        assert cost.completion_tokens == len(forced_evaluation(6).text(["4"] * 6))  # one token a character


def test_context_fit_time_is_recorded_per_reply() -> None:
    class SlowFit:
        identity = "slow-fit"

        def score_batch(self, items: Sequence[tuple[Context, str]]) -> list[float | BackendError]:
            time.sleep(0.04)
            return [0.5] * len(items)

        async def ascore_batch(self, items: Sequence[tuple[Context, str]]) -> list[float | BackendError]:
            return self.score_batch(items)

        def combine(self, rubric_reward: float, fit: float) -> float:
            return rubric_reward * fit

    reward, _, _ = reward_on(lambda request: RUBRIC, context_fit=SlowFit())
    results = reward.score_batch([(SAD, "a"), (SAD, "b")])
    fits = [r.provenance.context_fit_seconds for r in results]  # type: ignore[union-attr]
    assert fits[0] == fits[1] and fits[0] is not None and fits[0] >= 0.02
    made = results[0].provenance
    assert made is not None and made.cost.seconds == pytest.approx(
        made.rubric_cost.seconds / 2 + made.evaluation_cost.seconds + fits[0]
    )


def test_async_scoring_counts_the_same() -> None:
    reward, gen, ev = reward_on(lambda request: RUBRIC)
    results = asyncio.run(reward.ascore_batch([(SAD, "a"), (SAD, "b"), (LONELY, "c")]))
    assert [r.provenance.cost.calls for r in results] == [1.5, 1.5, 2.0]  # type: ignore[union-attr]
    assert total(results).calls == len(gen.requests) + len(ev.requests)


def test_provenance_round_trips_through_json_and_pickle_and_averages() -> None:
    reward, _, _ = reward_on(lambda request: RUBRIC)
    results = reward.score_batch([(SAD, "a"), (SAD, "b")])
    for result in results:
        assert RewardResult.model_validate_json(result.model_dump_json()) == result
        assert pickle.loads(pickle.dumps(result)) == result
    mean = mean_cost(results)
    assert mean is not None and mean.calls == 1.5 and mean_cost([RewardResult(reward=0.5)]) is None
    old = json.loads(results[0].model_dump_json())
    del old["provenance"]
    assert RewardResult.model_validate(old).provenance is None  # a result written before it carried one
    with pytest.raises(ValueError, match="rubric_shared_by"):
        Provenance(evaluator="e", evaluator_prompt="v2", rubric_shared_by=0)
