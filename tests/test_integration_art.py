"""CARE in ART (openpipe-art 0.5.x): real ``Trajectory``/``TrajectoryGroup`` objects, ART's own
``gather_trajectory_groups(after_each=...)`` and parquet log, a scripted backend."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

art = pytest.importorskip("art")

from openai.types.chat.chat_completion import Choice  # noqa: E402
from openai.types.chat.chat_completion_message import ChatCompletionMessage  # noqa: E402

from care_sdk import AdaptiveReward  # noqa: E402
from care_sdk.backends.base import GenerationRequest  # noqa: E402
from care_sdk.errors import CareError, ConfigError  # noqa: E402
from care_sdk.integrations.art import CareGroupScorer, care_score_group, trajectory_dialogue  # noqa: E402
from care_sdk.testing import ScriptedBackend, candidate_reply, evaluation_json, rubric_json  # noqa: E402
from care_sdk.types import as_messages  # noqa: E402

SYSTEM = {"role": "system", "content": "You are a supportive listener."}
USER = {"role": "user", "content": "My exam is tomorrow and I can't focus."}


def scripted(scores: dict[str, list[int]] | None = None, broken: str | None = None) -> ScriptedBackend:
    """Rubric 1:2:1; each reply scored by its text (default 5,5,5,5,1,1); ``broken`` gets no JSON."""

    def answer(request: GenerationRequest) -> str:
        if request.purpose == "rubric":
            return rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
        reply = candidate_reply(request)
        if broken is not None and reply == broken:
            return "I would rather not say."
        return evaluation_json((scores or {}).get(reply, [5, 5, 5, 5, 1, 1]))

    return ScriptedBackend(answer)


def choice(text: str) -> Choice:
    """A sampled assistant turn, as ART's rollouts record it (an OpenAI ``Choice``)."""
    return Choice(index=0, finish_reason="stop", message=ChatCompletionMessage(role="assistant", content=text))


def group_of(n: int = 8, *, reward: float = 0.0) -> Any:
    return art.TrajectoryGroup(
        art.Trajectory(messages_and_choices=[SYSTEM, USER, choice(f"Reply {i}: let's plan tonight.")], reward=reward)
        for i in range(n)
    )


def purposes(backend: ScriptedBackend) -> list[str]:
    return [r.purpose for r in backend.requests]


def test_gather_with_care_after_each_scores_eight_replies_with_one_rubric() -> None:
    backend = scripted({"Reply 1: let's plan tonight.": [1, 1, 1, 1, 1, 1]})
    scorer = CareGroupScorer(AdaptiveReward.from_backend(backend))

    async def rollout_group() -> Any:
        return group_of(8, reward=0.25)

    groups = asyncio.run(art.gather_trajectory_groups([rollout_group()], after_each=scorer, pbar_desc=None))

    assert len(groups) == 1 and isinstance(groups[0], art.TrajectoryGroup)
    scored = groups[0]
    assert [t.reward for t in scored] == [0.75, 0.0] + [0.75] * 6
    assert purposes(backend).count("rubric") == 1 and purposes(backend).count("evaluation") == 8
    first = scored.trajectories[0]
    assert first.metrics["independent_reward"] == 0.25  # the reward before CARE, as RULER keeps it
    assert first.metrics["care/reward"] == 0.75 and first.metrics["care/turns"] == 1
    assert first.metrics["care/affective"] == 1.0 and first.metrics["care/proactive"] == 0.0
    assert first.metrics["care/weight/affective"] == 0.5 and first.metrics["care/weight/cognitive"] == 0.25
    assert 1.0 < first.metrics["care/cost/calls"] < 2.0  # its evaluation and its share of the group's rubric
    assert first.logs[-1].startswith("CARE reward 0.750")
    assert isinstance(first.messages_and_choices[-1], Choice)  # the sampled turn stays trainable
    assert scored.exceptions == []


def test_the_original_group_is_left_as_it_was() -> None:
    group = group_of(2, reward=0.5)
    scored = asyncio.run(care_score_group(group, AdaptiveReward.from_backend(scripted())))
    assert [t.reward for t in group] == [0.5, 0.5] and all("care/reward" not in t.metrics for t in group)
    assert [t.reward for t in scored] == [0.75, 0.75]


def test_the_system_prompt_and_tool_messages_are_not_judged() -> None:
    trajectory = art.Trajectory(
        messages_and_choices=[SYSTEM, USER, {"role": "tool", "content": "{}", "tool_call_id": "1"}, choice("Breathe.")]
    )
    assert trajectory_dialogue(trajectory) == as_messages([USER, {"role": "assistant", "content": "Breathe."}])
    backend = scripted()
    asyncio.run(care_score_group(art.TrajectoryGroup([trajectory]), AdaptiveReward.from_backend(backend)))
    rubric_prompt = " ".join(m.content for m in backend.requests[0].messages)
    assert "I can't focus" in rubric_prompt and "supportive listener" not in rubric_prompt


def dialogue(replies: list[str]) -> Any:
    messages: list[Any] = [SYSTEM]
    for i, reply in enumerate(replies):
        messages += [{"role": "user", "content": f"User turn {i}."}, choice(reply)]
    return art.Trajectory(messages_and_choices=messages)


@pytest.mark.parametrize(
    ("how", "expected", "evaluations"),
    [("mean", 0.5, 2), ("discounted", (0.5 * 0.25 + 0.75) / 1.5, 2), ("last", 0.75, 1)],
)
def test_multi_turn_trajectories_fold_their_turn_rewards(how: str, expected: float, evaluations: int) -> None:
    backend = scripted({"First.": [2, 2, 2, 2, 2, 2]})  # 0.25, then the default 0.75
    scorer = CareGroupScorer(AdaptiveReward.from_backend(backend), how=how, gamma=0.5)  # type: ignore[arg-type]
    scored = asyncio.run(scorer(art.TrajectoryGroup([dialogue(["First.", "Second."])])))
    assert scored.trajectories[0].reward == pytest.approx(expected)
    assert scored.trajectories[0].metrics["care/turns"] == evaluations
    assert purposes(backend).count("evaluation") == evaluations
    assert purposes(backend).count("rubric") == evaluations  # each turn has its own context


def test_an_unscorable_trajectory_is_an_exception_of_the_group_not_a_zero() -> None:
    backend = scripted(broken="Reply 3: let's plan tonight.")
    group = group_of(8)
    scored = asyncio.run(care_score_group(group, AdaptiveReward.from_backend(backend)))
    assert len(scored.trajectories) == 7 and all(t.reward == 0.75 for t in scored)
    assert len(scored.exceptions) == 1
    failure = scored.exceptions[0]
    assert "CareError" in failure.type and "trajectory 3 of the group" in failure.message
    assert scored.logs[-1] == "CARE: 1 of 8 trajectories could not be scored"


def test_arts_model_log_records_care_metrics_and_the_failure_as_exception_rate(tmp_path: Path) -> None:
    import json

    backend = scripted(broken="Reply 3: let's plan tonight.")
    scored = asyncio.run(care_score_group(group_of(8), AdaptiveReward.from_backend(backend)))
    model = art.Model(name="policy", project="care", base_path=str(tmp_path))
    asyncio.run(model.log([scored], split="train", step=1))
    history = next(tmp_path.rglob("history.jsonl")).read_text().splitlines()
    row = json.loads(history[-1])
    assert row["train/exception_rate"] == 0.125 and row["data/step_num_trajectories"] == 8.0
    assert row["train/reward"] == 0.75 and row["train/care/weight/affective"] == 0.5
    assert row["train/care/proactive"] == 0.0


def test_on_error_raise_and_skip_group_follow_ruler() -> None:
    def broken() -> AdaptiveReward:
        return AdaptiveReward.from_backend(scripted(broken="Reply 0: let's plan tonight."))

    with pytest.raises(CareError, match="trajectory 0 of the group"):
        asyncio.run(care_score_group(group_of(2), broken(), on_error="raise"))

    async def rollout_group() -> Any:
        return group_of(2)

    skip = CareGroupScorer(broken(), on_error="skip_group")
    assert asyncio.run(art.gather_trajectory_groups([rollout_group()], after_each=skip, pbar_desc=None)) == []


def test_a_trajectory_without_a_reply_is_an_exception() -> None:
    empty = art.Trajectory(messages_and_choices=[SYSTEM, USER])
    scored = asyncio.run(care_score_group(art.TrajectoryGroup([empty]), AdaptiveReward.from_backend(scripted())))
    assert scored.trajectories == [] and "no assistant reply" in scored.exceptions[0].message


def test_scored_groups_are_written_to_arts_parquet_log(tmp_path: Path) -> None:
    import json

    import pyarrow.parquet as pq
    from art.utils.trajectory_logging import write_trajectory_groups_parquet

    scored = asyncio.run(care_score_group(group_of(3), AdaptiveReward.from_backend(scripted())))
    path = tmp_path / "0000.parquet"
    write_trajectory_groups_parquet([scored], str(path))  # what ART's model.log writes per step
    rows = pq.read_table(path).to_pylist()  # ART's reader needs duckdb, not among ART's dependencies
    assert [row["reward"] for row in rows] == [0.75] * 3
    assert json.loads(rows[0]["metrics"])["care/weight/affective"] == 0.5
    assert rows[0]["logs"][-1].startswith("CARE reward 0.750")


def test_bad_options_are_refused() -> None:
    with pytest.raises(ConfigError):
        CareGroupScorer(how="sum")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        CareGroupScorer(on_error="zero")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        CareGroupScorer(gamma=2.0)


def test_the_adapter_does_not_import_art() -> None:
    code = "import sys, care_sdk.integrations.art; print('art' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
