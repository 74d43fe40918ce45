"""Real GRPO steps on a tiny policy with the CARE reward: single-turn, multi-turn episodes, reward variants,
a failing simulated user, and the evaluation command. The bundled SmolLM2 (llama.cpp) plays the
simulated user, the generator and the evaluator wherever the test is about the real loop."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

from care_lab.simulation import load_profiles
from care_lab.training.policy import EvalPolicyConfig, PolicyGRPOConfig, evaluate_policy, run_policy_grpo
from care_sdk.backends import BackendPool, GenerationRequest
from care_sdk.dialogues import read_dialogues
from care_sdk.report.records import read_records
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
from care_sdk.types import fixed_criteria

pytestmark = pytest.mark.slow

TRL_ONE_STEP = {
    "max_steps": 1,
    "num_generations": 2,
    "per_device_train_batch_size": 4,  # 2 prompts x 2 generations
    "max_completion_length": 16,
    "learning_rate": 1e-3,
}
TINY = {"model": "tiny", "lora": {"r": 4, "alpha": 8, "dropout": 0.0}, "merge": False}


def _lines(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def _check_step(result: Any, out: Path) -> dict[str, float]:
    assert len(result.rewards) == 1
    step = result.rewards[0]
    assert math.isfinite(step["care_reward"]) and 0.0 <= step["care_reward"] <= 1.0
    for dim in ("cognitive", "affective", "proactive"):
        assert 0.0 <= step[f"care/score/{dim}"] <= 1.0 and 0.0 <= step[f"care/weight/{dim}"] <= 1.0
    losses = [e["loss"] for e in json.loads((out / "metrics.json").read_text())["log_history"] if "loss" in e]
    assert losses and all(math.isfinite(x) for x in losses)
    assert (out / "adapter" / "adapter_config.json").exists()
    return step  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def real_pool(llama_backend: Any) -> BackendPool:
    """``default`` is the session's real llama.cpp backend (loaded once)."""
    return BackendPool({"default": llama_backend})


def test_single_turn_step_with_full_care(tmp_path: Path, data_dir: Path, real_pool: BackendPool) -> None:
    config = PolicyGRPOConfig(
        **TINY,
        output_dir=str(tmp_path / "single"),
        data_dir=str(data_dir),
        mode="single_turn",
        prompts={"source": "esconv", "max_dialogues": 2, "turns_per_dialogue": 1, "max_context_messages": 2},
        reward={"variant": "full", "generator_max_tokens": 320, "evaluator_max_tokens": 64, "max_attempts": 2},
        trl=TRL_ONE_STEP,
    )
    result = run_policy_grpo(config, pool=real_pool, log=lambda s: None)
    _check_step(result, tmp_path / "single")
    samples = _lines(result.dialogues)
    assert len(samples) == 4 and all(s["messages"][-1]["role"] == "assistant" for s in samples)
    assert all(s["messages"][0]["role"] != "system" for s in samples)  # CARE judges the context, not the prompt
    turns = read_records(result.turns)
    assert not turns.issues and len(turns.records) == 4
    scored = [r for r in turns.records if r["reward"] is not None]
    assert scored, [r["error"] for r in turns.records]


def test_multi_turn_episodes_with_the_bundled_model_as_simulated_user(
    tmp_path: Path, data_dir: Path, real_pool: BackendPool
) -> None:
    out = tmp_path / "multi"
    config = PolicyGRPOConfig(
        **TINY,
        output_dir=str(out),
        data_dir=str(data_dir),
        mode="multi_turn",
        users={"source": "esconv", "path": str(data_dir / "esconv" / "train.jsonl"), "max_profiles": 2},
        simulator={"max_tokens": 48, "max_reply_chars": 120, "max_profile_chars": 300, "max_attempts": 2},
        episode={"max_turns": 2, "turn_max_tokens": 8},
        reward={"variant": "full", "generator_max_tokens": 320, "evaluator_max_tokens": 64, "max_attempts": 2},
        trl=TRL_ONE_STEP,
    )
    result = run_policy_grpo(config, pool=real_pool, log=lambda s: None)
    step = _check_step(result, out)
    assert 1.0 <= step["care/episode/turns"] <= 2.0
    assert sum(step[f"care/episode/{r}"] for r in ("user_ended", "max_turns", "simulator_error")) == pytest.approx(1)
    episodes = _lines(result.dialogues)
    assert len(episodes) == 4
    assert len({e["profile_id"] for e in episodes}) == 2  # 2 profiles x 2 episodes each
    for episode in episodes:
        roles = [m["role"] for m in episode["messages"]]
        assert roles[:2] == ["user", "assistant"]
        assert episode["end_reason"] in ("user_ended", "max_turns", "simulator_error")
        assert (episode["end_error"] is not None) == (episode["end_reason"] == "simulator_error")
        assert len(episode["turn_rewards"]) == roles.count("assistant")
        if episode["end_reason"] == "max_turns":
            assert roles.count("assistant") == 2 and roles[-1] == "assistant"
        if episode["end_reason"] == "user_ended":
            assert roles[-1] == "user"
    assert all(x.error is None for x in read_dialogues(result.dialogues))  # care score reads the episodes


def test_a_failing_simulated_user_ends_its_episodes_and_the_batch_still_trains(tmp_path: Path, data_dir: Path) -> None:
    esconv = str(data_dir / "esconv" / "train.jsonl")
    users = {"source": "esconv", "path": esconv, "max_profiles": 2}
    broken = load_profiles(PolicyGRPOConfig(model="tiny", output_dir="x", users=users).users, "train")[0]

    def simulate(request: GenerationRequest) -> str:
        if broken.situation[:60] in request.messages[0].content:
            return "I don't want to answer in JSON"
        return json.dumps({"reply": "I guess that makes sense.", "end": False, "emotion": 55})

    sim = ScriptedBackend(simulate, name="sim")
    pool = BackendPool({"sim": sim, "eval": ScriptedBackend(lambda r: evaluation_json([4, 4, 3, 3, 2, 2]))})
    out = tmp_path / "failing"
    config = PolicyGRPOConfig(
        **TINY,
        output_dir=str(out),
        data_dir=str(data_dir),
        mode="multi_turn",
        users=users,
        simulator={"backend": "sim", "max_attempts": 2},
        episode={"max_turns": 2, "turn_max_tokens": 8},
        reward={"variant": "fixed_rubric", "evaluator": "eval", "generator": "unused"},
        trl=TRL_ONE_STEP,
    )
    result = run_policy_grpo(config, pool=pool, log=lambda s: None)
    step = _check_step(result, out)
    assert step["care/episode/simulator_error"] == 0.5 and step["care/episode/max_turns"] == 0.5
    episodes = _lines(result.dialogues)
    failed = [e for e in episodes if e["profile_id"] == broken.id]
    others = [e for e in episodes if e["profile_id"] != broken.id]
    assert len(failed) == 2 and len(others) == 2
    for episode in failed:
        assert episode["end_reason"] == "simulator_error" and "OutputError" in episode["end_error"]
        assert episode["reward"] == pytest.approx(0.5) and len(episode["turn_rewards"]) == 1
    for episode in others:
        assert episode["end_reason"] == "max_turns" and episode["reward"] == pytest.approx(0.5)
        assert [m["role"] for m in episode["messages"]] == ["user", "assistant", "user", "assistant"]


@pytest.mark.parametrize("variant", ["full", "uniform_weights", "fixed_criteria", "fixed_rubric"])
def test_each_reward_variant_runs_one_step(tmp_path: Path, data_dir: Path, variant: str) -> None:
    generated = {
        d: [f"The reply names the {d} side of the problem.", f"The reply is specific ({d})."]
        for d in ("cognitive", "affective", "proactive")
    }

    def write_rubric(request: GenerationRequest) -> str:
        assert variant != "fixed_rubric", "the fixed-rubric variant must not call a generator"
        return rubric_json({"cognitive": 3, "affective": 1, "proactive": 0}, generated)

    pool = BackendPool(
        {"gen": ScriptedBackend(write_rubric), "eval": ScriptedBackend(lambda r: evaluation_json([5, 5, 3, 3, 1, 1]))}
    )
    out = tmp_path / variant
    config = PolicyGRPOConfig(
        **TINY,
        output_dir=str(out),
        data_dir=str(data_dir),
        prompts={"source": "esconv", "max_dialogues": 2, "turns_per_dialogue": 1},
        reward={"variant": variant, "generator": "gen", "evaluator": "eval"},
        trl=TRL_ONE_STEP,
    )
    step = _check_step(run_policy_grpo(config, pool=pool, log=lambda s: None), out)
    rubric = read_records(out / "turns.jsonl").records[0]["rubric"]
    fixed = [c.text for c in fixed_criteria()]
    texts = [c["text"] for c in rubric["criteria"]]
    weights = rubric["weights"]
    expected_weights = {
        "full": {"cognitive": 0.75, "affective": 0.25, "proactive": 0.0},
        "fixed_criteria": {"cognitive": 0.75, "affective": 0.25, "proactive": 0.0},
        "uniform_weights": {d: 1 / 3 for d in ("cognitive", "affective", "proactive")},
        "fixed_rubric": {d: 1 / 3 for d in ("cognitive", "affective", "proactive")},
    }[variant]
    assert weights == pytest.approx(expected_weights)
    assert (texts == fixed) == (variant in ("fixed_criteria", "fixed_rubric"))
    dimension_scores = {"cognitive": 1.0, "affective": 0.5, "proactive": 0.0}  # from the scores 5 5 3 3 1 1
    expected_reward = sum(expected_weights[d] * s for d, s in dimension_scores.items())
    assert step["care_reward"] == pytest.approx(expected_reward)


def test_eval_policy_on_held_out_profiles(tmp_path: Path, data_dir: Path, real_pool: BackendPool) -> None:
    out = tmp_path / "eval"
    config = EvalPolicyConfig(
        policy="default",  # the bundled model as the policy under evaluation
        output_dir=str(out),
        data_dir=str(data_dir),
        label="smollm2",
        policy_max_tokens=24,
        users={"source": "sage", "max_profiles": 2},
        simulator={"max_tokens": 48, "max_reply_chars": 80, "max_profile_chars": 120, "max_attempts": 2},
        episode={"max_turns": 2, "trajectory": "discounted", "gamma": 0.5},
        reward={"variant": "fixed_rubric", "evaluator_max_tokens": 64, "max_attempts": 2},
        judge={"kind": "training_reward"},
    )
    summary = evaluate_policy(config, pool=real_pool, log=lambda s: None)
    assert summary.dialogues == 2 and sum(summary.end_reasons.values()) == 2
    held_out = {p.id for p in load_profiles(config.users, "held_out", str(data_dir))}
    dialogues = _lines(out / "dialogues.jsonl")
    assert {d["profile_id"] for d in dialogues} <= held_out
    assert all(x.error is None for x in read_dialogues(out / "dialogues.jsonl"))
    turns = read_records(out / "turns.jsonl")
    assert not turns.issues and {r["variant"] for r in turns.records} == {"smollm2"}
    assert sum(len(d["turn_rewards"]) for d in dialogues) == len(turns.records)
    saved = json.loads((out / "summary.json").read_text())
    assert saved["dialogues"] == 2 and saved["trajectory"] == "discounted"
    assert "mean training reward" in summary.table() and "blind to reward hacking" in summary.table()
    assert saved["judge_kind"] == "training_reward"
