"""slime's custom reward functions and remote reward, tested against slime's documented types.

slime is not on PyPI (the ``slime`` package there is another project) and needs Megatron and
SGLang, so it is not installed here. ``Sample`` below copies the fields of ``slime.utils.types.Sample``
that a reward function touches; the calls follow ``slime/rollout/rm_hub/__init__.py``: ``await
rm(args, sample)``, ``await rm(args, samples)`` with ``--group-rm``, and ``remote_rm``'s POST of
``{"prompt", "response", "label"}`` whose JSON answer becomes ``sample.reward``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from types import SimpleNamespace
from typing import Any

import pytest

from care_sdk import AdaptiveReward
from care_sdk.backends.base import GenerationRequest
from care_sdk.integrations import slime
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
from care_sdk.types import as_messages


@dataclass
class Sample:
    """The fields of slime.utils.types.Sample (slime main) that a reward function reads or writes."""

    group_index: int | None = None
    index: int | None = None
    prompt: str | list[dict[str, str]] = ""
    response: str = ""
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    remove_sample: bool = False

    class Status(Enum):
        COMPLETED = "completed"

    status: Status = Status.COMPLETED
    metadata: dict[str, Any] = field(default_factory=dict)


CHATML_PROMPT = (
    "<|im_start|>system\nYou are a supportive listener.<|im_end|>\n"
    "<|im_start|>user\nMy exam is tomorrow and I can't focus.<|im_end|>\n<|im_start|>assistant\n"
)
ARGS = SimpleNamespace(custom_rm_path="care_sdk.integrations.slime.rm", group_rm=False, reward_key=None)


def scripted(evaluation: str | None = None) -> ScriptedBackend:
    def answer(request: GenerationRequest) -> str:
        if request.purpose == "rubric":
            return rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
        return evaluation or evaluation_json([5, 5, 5, 5, 1, 1])

    return ScriptedBackend(answer)


@pytest.fixture
def backend() -> Iterator[Any]:
    def install(evaluation: str | None = None) -> ScriptedBackend:
        made = scripted(evaluation)
        slime.use_reward(AdaptiveReward.from_backend(made))
        return made

    yield install
    slime.use_reward(None)


def group(n: int = 8) -> list[Sample]:
    return [
        Sample(group_index=0, index=i, prompt=CHATML_PROMPT, response=f"Reply {i}: let's plan tonight.<|im_end|>")
        for i in range(n)
    ]


def counts(backend: ScriptedBackend) -> tuple[int, int]:
    purposes = [r.purpose for r in backend.requests]
    return purposes.count("rubric"), purposes.count("evaluation")


async def test_per_sample_rm_on_a_group_of_eight(backend: Any) -> None:
    made = backend()
    samples = group()
    rewards = await asyncio.gather(*(slime.rm(ARGS, s) for s in samples))  # what slime's async_rm does
    assert rewards == [0.75] * 8
    assert counts(made) == (1, 8)
    care = samples[0].metadata["care"]
    assert care["affective"] == 1.0 and care["weights"] == {"cognitive": 0.25, "affective": 0.5, "proactive": 0.25}
    assert care["error"] is None and not samples[0].remove_sample
    assert 1.0 < care["cost"]["calls"] < 2.0  # its evaluation and its share of the group's rubric


async def test_group_rm_scores_one_prompts_samples_with_one_rubric(backend: Any) -> None:
    made = backend()
    samples = group()
    assert await slime.group_rm(ARGS, samples) == [0.75] * 8
    assert counts(made) == (1, 8)


async def test_unscorable_sample_is_removed_not_scored(backend: Any) -> None:
    backend("not json")
    sample = group(1)[0]
    assert await slime.rm(ARGS, sample) == 0.0
    assert sample.remove_sample is True  # slime masks its loss
    assert sample.metadata["care"]["reward"] is None
    assert sample.metadata["care"]["error"].startswith("evaluation failed")


def test_templated_prompt_and_messages_give_the_same_context() -> None:
    templated = slime.sample_item(group(1)[0])
    messages = slime.sample_item(
        Sample(
            prompt=[
                {"role": "system", "content": "You are a supportive listener."},
                {"role": "user", "content": "My exam is tomorrow and I can't focus."},
            ],
            response="Reply 0: let's plan tonight.",
        )
    )
    assert (
        templated == messages == (as_messages("My exam is tomorrow and I can't focus."), "Reply 0: let's plan tonight.")
    )


def test_remote_reward_route_answers_a_number_per_sample() -> None:
    from starlette.testclient import TestClient

    from care_sdk.serve import create_app

    made = scripted()
    with TestClient(create_app(AdaptiveReward.from_backend(made))) as client:
        payloads = [{"prompt": s.prompt, "response": s.response, "label": s.label} for s in group()]  # remote_rm's
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda p: client.post("/slime/reward", json=p), payloads))
        assert [a.json() for a in answers] == [0.75] * 8
        assert counts(made) == (1, 8)
        assert client.post("/slime/reward", json={"response": "x"}).json()["field"] == "prompt"
    with TestClient(create_app(AdaptiveReward.from_backend(scripted("not json")))) as client:
        failed = client.post("/slime/reward", json=payloads[0])
        assert failed.status_code == 500  # remote_rm raises for it after its retries: never a number
        assert failed.json()["error"].startswith("CARE could not score the reply: evaluation failed")
