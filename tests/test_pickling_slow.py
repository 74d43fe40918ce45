"""Rewards in another process: a spawned child unpickles them, reopens their backends and scores as the parent does."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator
from care_sdk.testing import ScriptedBackend
from servers import LlamaServer, llama_server  # noqa: F401 - pytest fixture
from test_pickling import judge
from test_trl_integration import run_grpo

pytestmark = pytest.mark.slow

PROMPTS = [
    [{"role": "user", "content": "My sister stopped talking to me and I don't know why."}],
    [{"role": "user", "content": "I got the job, but I'm scared I'm not good enough."}],
]
REPLIES = ["That must hurt. What happened the last time you spoke?", "Congratulations! What worries you most?"]


def score_in_child(reward_funcs: list[Any], prompts: list[Any], completions: list[str]) -> dict[str, Any]:
    """What TRL's async rollout child does with the reward functions it was sent (``_score_group``)."""
    from trl.trainer.utils import get_callable_name, is_async_callable

    async def score(func: Any) -> list[float | None]:
        kwargs = {"prompts": prompts, "completions": completions}
        result: list[float | None] = await (
            func(**kwargs) if is_async_callable(func) else asyncio.to_thread(func, **kwargs)
        )
        return result

    return {
        "names": [get_callable_name(f) for f in reward_funcs],
        "identities": [(f.generator.identity, f.evaluator.backend.identity) for f in reward_funcs],
        "rewards": [asyncio.run(score(f)) for f in reward_funcs],
    }


def round_trip(rewards: list[AdaptiveReward]) -> dict[str, Any]:
    pytest.importorskip("trl")
    pickle.dumps({"reward_funcs": rewards})  # TRL's AsyncRolloutWorker.start checks this before it spawns
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(score_in_child, rewards, PROMPTS, REPLIES).result(timeout=600)


def check(rewards: list[AdaptiveReward], child: dict[str, Any]) -> None:
    assert child["names"] == [r.__name__ for r in rewards]
    assert child["identities"] == [(r.generator.identity, r.evaluator.backend.identity) for r in rewards]  # type: ignore[union-attr]
    assert child["rewards"] == [r(PROMPTS, REPLIES) for r in rewards]
    assert all(x is not None for row in child["rewards"] for x in row)


def test_bundled_model_reward_scores_the_same_in_a_spawned_process() -> None:
    reward = AdaptiveReward.from_backend("default", name="care_bundled")
    check([reward], round_trip([reward]))


def test_http_reward_scores_the_same_in_a_spawned_process(llama_server: LlamaServer) -> None:  # noqa: F811
    pytest.importorskip("openai")
    care = AdaptiveReward.from_backend(llama_server.spec)
    uniform = AdaptiveReward.from_backend(llama_server.spec, variant="uniform_weights", name="care_uniform")
    check([care, uniform], round_trip([care, uniform]))


def test_two_named_rewards_log_apart_in_one_grpo_run(tmp_path: Path) -> None:
    def reward(**options: Any) -> AdaptiveReward:
        backend = ScriptedBackend(judge)
        return AdaptiveReward(RubricGenerator(backend), RubricEvaluator(backend), **options)

    log_history, _ = run_grpo(
        tmp_path, [reward(), reward(variant="uniform_weights", name="care_uniform")], [{"prompt": p} for p in PROMPTS]
    )
    logged = next(h for h in log_history if "rewards/care_reward/mean" in h)
    assert "rewards/care_uniform/mean" in logged
    for prefix in ("care", "care_uniform"):
        assert logged[f"{prefix}/failed"] == 0.0
        assert {f"{prefix}/score/affective", f"{prefix}/weight/affective"} <= set(logged)
    assert logged["care_uniform/weight/affective"] == pytest.approx(1 / 3)
    assert logged["care/weight/affective"] == pytest.approx(0.5)
