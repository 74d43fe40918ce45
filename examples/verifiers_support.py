"""A verifiers taskset for emotional-support dialogue, rewarded by CARE.

Each task is one supporter turn of a logged dialogue: the policy sees the conversation so far and
writes the next reply; CARE writes a rubric for that context and scores the reply against it. Run it
with verifiers' own CLI from this directory (``PYTHONPATH=examples``), or import it:

    vf-eval verifiers_support --env.taskset.path examples/dialogues.jsonl ...

Set ``CARE_BACKEND`` (e.g. ``openai:judge@http://127.0.0.1:8000/v1``) and ``CARE_RUBRIC_CACHE`` for
the judge; by default it is the bundled CPU model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import verifiers.v1 as vf

from care_sdk.integrations.verifiers import CareJudge, CareJudgeConfig

SYSTEM_PROMPT = "You are a supportive listener. Reply to the user's last message in a few sentences."


class SupportData(vf.TaskData):
    """One supporter turn: the dialogue so far is the prompt."""

    dialogue_id: str = ""


class SupportTaskConfig(vf.TaskConfig):
    """The CARE judge's options, under ``--env.taskset.task.care.*``."""

    care: CareJudgeConfig = CareJudgeConfig()


_JUDGES: dict[str, CareJudge] = {}


def judge_for(config: CareJudgeConfig) -> CareJudge:
    """One judge per option set, shared by every task of the process (so rollouts share rubrics)."""
    key = config.model_dump_json()
    if key not in _JUDGES:
        _JUDGES[key] = CareJudge(config)
    return _JUDGES[key]


class SupportTask(vf.Task[SupportData, vf.State, SupportTaskConfig]):
    """Rewarded by CARE: ``trace.rewards["care"]``, with ``care/<dimension>`` metrics."""

    @vf.reward
    async def care(self, task: SupportData, trace: vf.Trace) -> float:
        return await judge_for(self.config.care).score(task, trace)


class SupportTasksetConfig(vf.TasksetConfig):
    task: SupportTaskConfig = SupportTaskConfig()
    """Passed to every task."""
    path: Path = Path(__file__).with_name("dialogues.jsonl")
    """Logged dialogues, JSONL: ``{"id": ..., "messages": [...]}`` per line."""


class SupportTaskset(vf.Taskset[SupportTask, SupportTasksetConfig]):
    """One task per user turn that a supporter answered in the logged dialogues."""

    def load(self) -> Iterator[SupportTask]:
        for line in self.config.path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            messages = record["messages"]
            for i, message in enumerate(messages):
                if message["role"] == "user" and i + 1 < len(messages) and messages[i + 1]["role"] == "assistant":
                    prompt = [
                        vf.UserMessage(content=m["content"])
                        if m["role"] == "user"
                        else vf.AssistantMessage(content=m["content"])
                        for m in messages[: i + 1]
                    ]
                    data = SupportData(
                        id=f"{record['id']}:{i}", prompt=prompt, system_prompt=SYSTEM_PROMPT, dialogue_id=record["id"]
                    )
                    yield SupportTask(data, self.config.task)


__all__ = ["SupportTaskset"]
