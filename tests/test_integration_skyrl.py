"""CARE in SkyRL (skyrl-gym 0.4.x): the environment made with ``skyrl_gym.make`` and stepped the way
SkyRL's generator steps it (``skyrl_train/generators/skyrl_gym_generator.py``: ``init(prompt)``, then
``step(reply)`` per turn, envs stepped from a thread pool), with a scripted backend."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

from care_sdk import AdaptiveReward, TrajectoryReward  # noqa: E402
from care_sdk.backends.base import GenerationRequest  # noqa: E402
from care_sdk.errors import CareError, ConfigError  # noqa: E402
from care_sdk.integrations import skyrl  # noqa: E402
from care_sdk.testing import ScriptedBackend, candidate_reply, evaluation_json, rubric_json  # noqa: E402

PROMPT = [
    {"role": "system", "content": "You are a supportive listener."},
    {"role": "user", "content": "My exam is tomorrow and I can't focus."},
]


def scripted(scores: dict[str, list[int]] | None = None, broken: str | None = None, delay: float = 0.0) -> Any:
    def answer(request: GenerationRequest) -> str:
        if request.purpose == "rubric":
            time.sleep(delay)
            return rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
        reply = candidate_reply(request)
        if reply == broken:
            return "no JSON"
        return evaluation_json((scores or {}).get(reply, [5, 5, 5, 5, 1, 1]))

    return ScriptedBackend(answer)


def make(reward: AdaptiveReward, env_config: dict[str, Any] | None = None, **extras: Any) -> Any:
    skyrl.register_env()
    return skyrl_gym.make("care_support", env_config=env_config or {}, extras=extras, reward=reward)


def rollout(env: Any, replies: list[str]) -> list[dict[str, Any]]:
    """SkyRL's agent loop, without the model: init, then step each reply until done."""
    chat, _ = env.init([dict(m) for m in PROMPT])
    outputs = []
    for reply in replies:
        out = env.step(reply)
        outputs.append(out)
        chat += [{"role": "assistant", "content": reply}, *out["observations"]]
        if out["done"]:
            break
    env.close()
    return outputs


def test_each_step_returns_its_turns_care_reward() -> None:
    backend = scripted({"Since when?": [2, 2, 2, 2, 2, 2]})
    env = make(AdaptiveReward.from_backend(backend), user_replies=["Since the layoff."], max_turns=3)
    outs = rollout(env, ["Since when?", "That is a lot to carry."])
    assert [o["reward"] for o in outs] == [0.25, 0.75]
    assert [o["done"] for o in outs] == [False, True]  # the scripted user has nothing more to say
    assert outs[0]["observations"] == [{"role": "user", "content": "Since the layoff."}]
    assert outs[1]["metadata"]["care_weight_affective"] == 0.5 and outs[1]["metadata"]["care_proactive"] == 0.0
    # the second turn was judged on the whole dialogue before it, without the policy's system prompt
    rubric_prompts = [r.messages[-1].content for r in backend.requests if r.purpose == "rubric"]
    assert "Since the layoff." in rubric_prompts[1] and "supportive listener" not in " ".join(rubric_prompts)
    metrics = env.get_metrics()
    assert metrics["care/turns"] == 2.0 and metrics["care/mean_turn_reward"] == 0.5
    assert metrics["care/cost/calls"] == 4.0  # the episode's two turns, a rubric and an evaluation each
    from skyrl_gym.metrics import aggregate_for_environment

    assert aggregate_for_environment("care_support", [metrics])["care/turns"] == 2.0


@pytest.mark.parametrize("how", ["mean", "discounted", "last"])
def test_episode_options_return_the_trajectory_reward_at_the_end(how: str) -> None:
    scores = {"Since when?": [2, 2, 2, 2, 2, 2]}
    env = make(AdaptiveReward.from_backend(scripted(scores)), {"how": how, "gamma": 0.5},
               user_replies=["Since the layoff."], max_turns=2)  # fmt: skip
    outs = rollout(env, ["Since when?", "That is a lot to carry."])
    dialogue = [PROMPT[1], {"role": "assistant", "content": "Since when?"},
                {"role": "user", "content": "Since the layoff."},
                {"role": "assistant", "content": "That is a lot to carry."}]  # fmt: skip
    expected = TrajectoryReward(AdaptiveReward.from_backend(scripted(scores)), how=how, gamma=0.5).score(dialogue)  # type: ignore[arg-type]
    assert outs[0]["reward"] is None  # SkyRL skips a None reward: nothing on the first turn
    assert outs[1]["reward"] == pytest.approx(expected.reward)
    assert env.get_metrics()["care/turns"] == (1.0 if how == "last" else 2.0)


def test_max_turns_ends_the_episode() -> None:
    env = make(AdaptiveReward.from_backend(scripted()), user_replies=["a", "b", "c"], max_turns=1)
    outs = rollout(env, ["One.", "Two."])
    assert len(outs) == 1 and outs[0]["done"] and outs[0]["observations"] == []


def test_a_chat_completion_user_answers_and_ends_the_conversation() -> None:
    seen: list[GenerationRequest] = []

    def user(request: GenerationRequest) -> str:
        seen.append(request)
        return "I just feel stuck." if len(seen) == 1 else "[END]"

    user_model = ScriptedBackend(user)  # env_config.user: a backend object, or a spec such as openai:MODEL@URL
    env = make(AdaptiveReward.from_backend(scripted()), {"user": user_model}, max_turns=5, persona="A student.")
    outs = rollout(env, ["What's on your mind?", "Let's take it one page at a time."])
    assert outs[0]["observations"] == [{"role": "user", "content": "I just feel stuck."}] and outs[1]["done"]
    first = seen[0].messages
    assert "A student." in first[0].content and first[0].role == "system"
    assert [m.role for m in first[1:]] == ["assistant", "user"]  # roles swapped: the user model answers the policy


def test_eight_replies_to_one_context_cost_one_rubric_and_eight_evaluations() -> None:
    backend = scripted(delay=0.05)
    reward = AdaptiveReward.from_backend(backend)
    envs = [make(reward, user_replies=[], max_turns=1) for _ in range(8)]
    for env in envs:
        env.init([dict(m) for m in PROMPT])
    with ThreadPoolExecutor(8) as pool:  # SkyRL steps envs from a thread pool (max_env_workers)
        outs = list(pool.map(lambda pair: pair[0].step(f"Reply {pair[1]}: breathe."), zip(envs, range(8), strict=True)))
    assert [o["reward"] for o in outs] == [0.75] * 8
    purposes = [r.purpose for r in backend.requests]
    assert purposes.count("rubric") == 1 and purposes.count("evaluation") == 8
    assert threading.active_count() >= 1


def test_an_unscorable_turn_raises_or_returns_none() -> None:
    env = make(AdaptiveReward.from_backend(scripted(broken="Whatever.")), user_replies=[], max_turns=1)
    env.init([dict(m) for m in PROMPT])
    with pytest.raises(CareError, match="turn 1"):
        env.step("Whatever.")
    env = make(AdaptiveReward.from_backend(scripted(broken="Whatever.")), {"on_error": "none"},
               user_replies=[], max_turns=1)  # fmt: skip
    env.init([dict(m) for m in PROMPT])
    out = env.step("Whatever.")
    assert out["reward"] is None and out["done"] and "evaluation" in (out["metadata"]["care_error"] or "")
    assert env.get_metrics()["care/failed_turns"] == 1.0


def test_bad_options_are_refused() -> None:
    reward = AdaptiveReward.from_backend(scripted())
    with pytest.raises(ConfigError, match="user"):
        make(reward)
    with pytest.raises(ConfigError):
        make(reward, {"how": "sum"}, user_replies=[])
    with pytest.raises(ConfigError):
        make(reward, {"on_error": "zero"}, user_replies=[])
