"""CARE in verifiers (``verifiers.v1``, 0.4.x): real tasks, traces and ``Task.score``, a scripted backend."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest

vf = pytest.importorskip("verifiers.v1")

from verifiers.v1.errors import TaskError, boundary  # noqa: E402
from verifiers.v1.trace import AgentInfo, TraceTask  # noqa: E402

from care_sdk import AdaptiveReward  # noqa: E402
from care_sdk.backends.base import GenerationRequest  # noqa: E402
from care_sdk.integrations import verifiers as care_vf  # noqa: E402
from care_sdk.provenance import COST_FIELDS  # noqa: E402
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json  # noqa: E402
from care_sdk.types import as_messages  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import verifiers_support  # noqa: E402


def judge_script(rubric_delay: float = 0.0) -> ScriptedBackend:
    def answer(request: GenerationRequest) -> str:
        if request.purpose == "rubric":
            time.sleep(rubric_delay)
            return rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
        return evaluation_json([5, 5, 5, 5, 1, 1])

    return ScriptedBackend(answer)


def first_task() -> Any:
    return next(iter(verifiers_support.SupportTaskset(verifiers_support.SupportTasksetConfig())))


def rollout_trace(task: Any, reply: str) -> Any:
    """A trace as a verifiers rollout leaves it: the task's prompt, then the policy's sampled reply."""
    trace = vf.Trace(
        task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=AgentInfo(config=vf.AgentConfig()),
    )
    system = [vf.SystemMessage(content=task.data.system_prompt)] if task.data.system_prompt else []
    messages = [*system, *task.data.prompt]
    for i, message in enumerate(messages):
        trace.nodes.append(vf.MessageNode(parent=i - 1 if i else None, message=message))
    trace.nodes.append(
        vf.MessageNode(parent=len(messages) - 1, message=vf.AssistantMessage(content=reply), sampled=True)
    )
    return trace


@pytest.fixture
def scripted_judge(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(backend: ScriptedBackend) -> care_vf.CareJudge:
        judge = care_vf.CareJudge(reward=AdaptiveReward.from_backend(backend))
        monkeypatch.setattr(verifiers_support, "judge_for", lambda config: judge)
        return judge

    return install


async def test_task_score_records_reward_and_dimension_metrics(scripted_judge: Any) -> None:
    scripted_judge(judge_script())
    task = first_task()
    trace = rollout_trace(task, "Being walked out after twelve years would shake anyone. What hurts most right now?")
    await task.score(trace)
    assert trace.rewards["care"] == vf.Reward(score=0.75, weight=1.0)
    assert trace.reward == 0.75
    cost = {k: trace.metrics.pop(k) for k in list(trace.metrics) if k.startswith("care/cost/")}
    assert sorted(cost) == sorted(f"care/cost/{f}" for f in COST_FIELDS) and cost["care/cost/calls"] == 2.0
    assert trace.metrics == {
        "care/cognitive": 1.0,
        "care/affective": 1.0,
        "care/proactive": 0.0,
        "care/weight/cognitive": 0.25,
        "care/weight/affective": 0.5,
        "care/weight/proactive": 0.25,
    }


async def test_group_of_eight_replies_costs_one_rubric_and_eight_evaluations(scripted_judge: Any) -> None:
    backend = judge_script()
    scripted_judge(backend)
    task = first_task()
    traces = [rollout_trace(task, f"Reply number {i}: that sounds really hard.") for i in range(8)]
    await asyncio.gather(*(task.score(t) for t in traces))
    purposes = [r.purpose for r in backend.requests]
    assert (purposes.count("rubric"), purposes.count("evaluation")) == (1, 8)
    assert all(t.rewards["care"].score == 0.75 for t in traces)


async def test_group_arriving_in_two_waves_still_shares_one_rubric(scripted_judge: Any) -> None:
    backend = judge_script(rubric_delay=0.2)  # the second wave arrives while the rubric is being written
    scripted_judge(backend)
    task = first_task()
    traces = [rollout_trace(task, f"Reply {i}.") for i in range(8)]

    async def late(trace: Any) -> None:
        await asyncio.sleep(0.08)
        await task.score(trace)

    await asyncio.gather(*(task.score(t) for t in traces[:4]), *(late(t) for t in traces[4:]))
    purposes = [r.purpose for r in backend.requests]
    assert (purposes.count("rubric"), purposes.count("evaluation")) == (1, 8)


async def test_a_reply_that_cannot_be_scored_fails_the_rollout_not_a_zero(scripted_judge: Any) -> None:
    def broken(request: GenerationRequest) -> str:
        if request.purpose == "rubric":
            return rubric_json({"cognitive": 1, "affective": 1, "proactive": 1})
        return "not json"

    scripted_judge(ScriptedBackend(broken))
    task = first_task()
    trace = rollout_trace(task, "I hear you.")
    try:  # what a verifiers rollout does around scoring (Rollout: boundary, then fail -> record_error)
        async with boundary(TaskError, "scoring"):
            await task.score(trace)
    except TaskError as exc:
        trace.record_error(exc)
    assert trace.rewards["care"] is None  # seeded, never scored
    assert trace.last_error is not None and trace.last_error.type == "TaskError"
    assert "CARE could not score the reply: evaluation failed" in trace.last_error.message
    assert trace.stop_condition == "task_error"


async def test_care_reward_plugs_by_import_path_with_a_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = judge_script()
    monkeypatch.setattr(care_vf, "_JUDGE", [care_vf.CareJudge(reward=AdaptiveReward.from_backend(backend))])
    config = vf.TaskConfig(rewards={"empathy": {"fn": "care_sdk.integrations.verifiers:care_reward", "weight": 0.5}})
    data = vf.TaskData(prompt=[vf.UserMessage(content="My dog died this morning.")])
    task = vf.Task(data, config)
    trace = rollout_trace(task, "I'm so sorry. What was your dog's name?")
    await task.score(trace)
    assert trace.rewards["empathy"] == vf.Reward(score=0.75, weight=0.5)
    assert trace.reward == 0.375
    assert trace.metrics["care/affective"] == 1.0


def test_multi_turn_context_is_the_dialogue_before_the_final_reply() -> None:
    task = next(
        t for t in verifiers_support.SupportTaskset(verifiers_support.SupportTasksetConfig()) if len(t.data.prompt) > 1
    )
    trace = rollout_trace(task, "A new reply.")
    context = care_vf.judged_context(task.data, trace)
    assert [m.role for m in context] == [m.role for m in task.data.prompt]
    assert context[-1].content == task.data.prompt[-1].content
    assert care_vf.judged_context({"history": "I can't sleep."}, trace, "history") == as_messages("I can't sleep.")
