"""Episode rewards over whole dialogues: aggregation rules, failures, and a real-model run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from care_sdk import AdaptiveReward, GenerationRequest, Rubric, RubricEvaluator, RubricGenerator
from care_sdk.errors import InputError
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
from care_sdk.trajectory import TrajectoryResult, TrajectoryReward, aggregate_turn_rewards

DIALOGUE = [
    {"role": "system", "content": "You are a supportive listener."},
    {"role": "user", "content": "I failed my driving test again."},
    {"role": "assistant", "content": "SCORE2 That is frustrating."},
    {"role": "user", "content": "Third time now."},
    {"role": "assistant", "content": "SCORE4 Three tries takes persistence. What tripped you up?"},
    {"role": "user", "content": "Parallel parking."},
    {"role": "assistant", "content": "SCORE5 Want to plan a few practice sessions for it?"},
]


def by_marker(request: GenerationRequest) -> str:
    """Evaluator script: every criterion gets the score written after SCOREn in the candidate."""
    text = request.messages[-1].content
    score = int(text.rsplit("SCORE", 1)[1][0])
    return evaluation_json([score] * 6)


def fixed_reward(script: Any = by_marker) -> AdaptiveReward:
    return AdaptiveReward(evaluator=RubricEvaluator(ScriptedBackend(script)), rubric=Rubric.uniform_fixed())


@pytest.mark.parametrize(
    ("how", "gamma", "expected"),
    [
        ("mean", 0.9, (0.25 + 0.75 + 1.0) / 3),
        ("last", 0.9, 1.0),
        ("discounted", 0.5, (0.25 * 0.25 + 0.5 * 0.75 + 1.0) / 1.75),
        ("discounted", 1.0, (0.25 + 0.75 + 1.0) / 3),
        ("discounted", 0.0, 1.0),
    ],
)
def test_aggregations(how: Any, gamma: float, expected: float) -> None:
    result = TrajectoryReward(fixed_reward(), how=how, gamma=gamma).score(DIALOGUE)
    assert [t.reward for t in result.turns] == [0.25, 0.75, 1.0]
    assert result.turn_indices == (2, 4, 6)
    assert result.reward == pytest.approx(expected)
    assert TrajectoryResult.model_validate_json(result.model_dump_json()) == result


def test_each_turn_is_judged_against_its_own_context() -> None:
    gen = ScriptedBackend(lambda req: rubric_json({"cognitive": 1, "affective": 1, "proactive": 1}))
    ev = ScriptedBackend(by_marker)
    episode = TrajectoryReward(AdaptiveReward(RubricGenerator(gen), RubricEvaluator(ev)))
    episode.score(DIALOGUE)
    transcripts = [r.messages[-1].content for r in gen.requests]
    assert len(transcripts) == 3  # one rubric per turn context
    assert "Third time now." not in transcripts[0] and "Third time now." in transcripts[1]
    assert all("Parallel parking." not in r.messages[-1].content.split("Candidate reply:")[0] for r in ev.requests[:2])


def test_a_failed_turn_fails_the_episode_only_when_it_carries_weight() -> None:
    def script(request: GenerationRequest) -> str:
        candidate = request.messages[-1].content.rsplit("Candidate reply:", 1)[1]
        return "garbage" if "SCORE2" in candidate else by_marker(request)

    mean = TrajectoryReward(fixed_reward(script), how="mean").score(DIALOGUE)
    assert mean.reward is None
    assert mean.error is not None and mean.error.startswith("turn at message 2: evaluation failed")
    assert [t.reward for t in mean.turns] == [None, 0.75, 1.0]
    last = TrajectoryReward(fixed_reward(script), how="last").score(DIALOGUE)
    assert last.reward == 1.0


def test_batches_mix_dialogues_and_report_empty_ones() -> None:
    episode = TrajectoryReward(fixed_reward(), how="last")
    results = episode.score_batch([DIALOGUE, DIALOGUE[:3], [{"role": "user", "content": "hello?"}]])
    assert [r.reward for r in results] == [1.0, 0.25, None]
    assert results[2].error is not None and "no assistant turn" in results[2].error


async def test_each_dialogues_profile_reaches_every_turn_of_it_and_only_it() -> None:
    gen = ScriptedBackend(lambda req: rubric_json({"cognitive": 1, "affective": 1, "proactive": 1}))
    ev = ScriptedBackend(by_marker)
    episode = TrajectoryReward(AdaptiveReward(RubricGenerator(gen), RubricEvaluator(ev)))
    results = await episode.ascore_batch([DIALOGUE, DIALOGUE[:3]], [{"traits": ["proud"]}, None])
    assert [r.reward for r in results] == [pytest.approx(2 / 3), 0.25]
    marked = ["Traits: proud" in r.messages[1].content for r in (*gen.requests, *ev.requests)]
    assert marked.count(True) == 6 and marked.count(False) == 2  # 3 turns x (rubric, evaluation) of the first
    with pytest.raises(InputError, match="profiles: 1 values for 2 items"):
        episode.score_batch([DIALOGUE, DIALOGUE], ["A student."])


async def test_async_batch_matches_sync() -> None:
    episode = TrajectoryReward(fixed_reward(), how="discounted", gamma=0.7)
    assert [r.reward for r in await episode.ascore_batch([DIALOGUE])] == [episode.score(DIALOGUE).reward]


def test_bad_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="how"):
        TrajectoryReward(fixed_reward(), how="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gamma"):
        aggregate_turn_rewards([0.5], "discounted", gamma=1.5)
    with pytest.raises(ValueError, match="no turn"):
        aggregate_turn_rewards([])


@pytest.mark.slow
def test_real_model_scores_an_esconv_episode(llama_backend: Any, data_dir: Path) -> None:
    from care_lab.data import load_esconv

    messages = [m.model_dump() for m in load_esconv(data_dir / "esconv" / "valid.jsonl", strict=True)[0].messages]
    first_user = next(i for i, m in enumerate(messages) if m["role"] == "user")
    episode_msgs = messages[first_user : first_user + 4]  # user, assistant, user, assistant
    assert [m["role"] for m in episode_msgs] == ["user", "assistant", "user", "assistant"]
    reward = AdaptiveReward.from_backend(llama_backend)
    result = TrajectoryReward(reward, how="mean").score(episode_msgs)
    # The bundled model decodes under the JSON schemas, so every turn must be scored.
    assert result.error is None, result.error
    assert result.turn_indices == (1, 3)
    assert [t.error for t in result.turns] == [None, None]
    assert all(t.rubric is not None and t.evaluation is not None for t in result.turns)
    assert result.reward is not None and 0.0 <= result.reward <= 1.0
    assert result.reward == pytest.approx(sum(t.reward for t in result.turns if t.reward is not None) / 2)
    # each turn was judged against its own context: the second rubric saw the second user message
    assert result.turns[0].rubric != result.turns[1].rubric or result.turns[0].evaluation != result.turns[1].evaluation
