"""Competence-boundary sampling: the weights and their rehearsal floor, pass rates from the rolled-out
groups, the sampler's RepeatSampler layout and its draws, and real GRPO steps that use it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from care_lab.training.policy.config import CurriculumSettings, PolicyGRPOConfig
from care_lab.training.policy.curriculum import BoundaryCurriculum, BoundarySampler


def expected(pass_rates: dict[str, float | None], settings: CurriculumSettings) -> dict[str, float]:
    """The documented formula, written out again from the pass rates."""
    span = max(settings.target, 1 - settings.target)
    score = {
        k: 1.0 if p is None else max(0.0, 1 - abs(p - settings.target) / span) ** settings.sharpness
        for k, p in pass_rates.items()
    }
    total = sum(score.values())
    return {k: (1 - settings.rehearsal) * s / total + settings.rehearsal / len(score) for k, s in score.items()}


def test_weights_favour_the_boundary_and_keep_the_rehearsal_floor() -> None:
    settings = CurriculumSettings(target=0.5, rehearsal=0.1, sharpness=2.0)
    curriculum = BoundaryCurriculum(["solved", "hopeless", "edge", "near", "unseen"], settings)
    curriculum.observe(["solved"] * 4 + ["hopeless"] * 4, [1.0, 0.9, 0.8, 0.7, 0.0, 0.1, 0.2, 0.3])
    curriculum.observe(["edge"] * 4 + ["near"] * 4, [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    assert curriculum.pass_rates == {"solved": 1.0, "hopeless": 0.0, "edge": 0.5, "near": 0.75}
    probabilities = dict(zip(curriculum.keys, curriculum.probabilities(), strict=True))
    assert probabilities == pytest.approx(expected(dict(curriculum.pass_rates, unseen=None), settings))
    assert sum(probabilities.values()) == pytest.approx(1.0)
    assert probabilities["solved"] == probabilities["hopeless"] == pytest.approx(0.1 / 5)  # the floor, not 0
    assert probabilities["edge"] == probabilities["unseen"] > probabilities["near"] > probabilities["solved"]
    # the newest group replaces a scenario's pass rate; a reward of None is left out
    curriculum.observe(["solved", "solved", "solved"], [0.0, 1.0, None])
    assert curriculum.pass_rates["solved"] == 0.5
    # all solved: no boundary left, the draws fall back to uniform
    everything = BoundaryCurriculum(["a", "b"], settings)
    everything.observe(["a", "b"], [1.0, 1.0])
    assert everything.probabilities() == [0.5, 0.5]
    uniform = BoundaryCurriculum(["a", "b", "c"], CurriculumSettings(rehearsal=1.0))
    uniform.observe(["a"], [1.0])
    assert uniform.probabilities() == pytest.approx([1 / 3] * 3)
    with pytest.raises(ValueError, match="unique"):
        BoundaryCurriculum(["a", "a"], settings)
    with pytest.raises(ValueError, match="2 keys for 1 rewards"):
        curriculum.observe(["a", "b"], [1.0])


def test_the_sampler_keeps_the_repeat_layout_and_draws_by_the_current_weights(tmp_path: Path) -> None:
    keys = [f"s{i}" for i in range(6)]
    curriculum = BoundaryCurriculum(keys, CurriculumSettings(rehearsal=0.12), tmp_path / "curriculum.jsonl")
    sampler = BoundarySampler(curriculum, mini_repeat_count=2, batch_size=3, repeat_count=2, seed=0, step=lambda: 7)
    first = list(sampler)
    assert len(first) == len(sampler) == 2 * 3 * 2 * 2  # 2 batches of 3 scenarios, 2 generations, 2 repeats
    batch = first[:12]
    chosen = batch[0:6:2]
    assert len(set(chosen)) == 3 and batch == [i for i in chosen for _ in range(2)] * 2
    # everything but s0 and s1 solved: the boundary mass goes to those two, the rest keeps the floor
    curriculum.observe(keys[2:], [1.0] * 4)
    counts: Counter[int] = Counter()
    for _ in range(200):
        for k, index in enumerate(sampler):
            if k % 12 < 6 and k % 2 == 0:  # the draw itself, once per scenario and batch
                counts[index] += 1
    draws = sum(counts.values())
    # s0 and s1 are in nearly every batch of 3; the four solved share the third place
    assert counts[0] / 400 > 0.9 and counts[1] / 400 > 0.9 and draws == 1200
    lines = [json.loads(x) for x in (tmp_path / "curriculum.jsonl").read_text().splitlines()]
    draw = [x for x in lines if x["event"] == "draw"]
    assert draw[0]["step"] == 7 and draw[0]["probabilities"] == {k: pytest.approx(1 / 6, abs=1e-6) for k in keys}
    assert (
        draw[-1]["probabilities"]["s0"] == pytest.approx(0.88 / 2 + 0.02, abs=1e-6)
        and draw[-1]["pass_rates"]["s2"] == 1.0
    )
    assert [x["event"] for x in lines].count("observe") == 1
    with pytest.raises(ValueError, match="only 6 exist"):
        BoundarySampler(curriculum, mini_repeat_count=2, batch_size=7, repeat_count=1)


def test_the_reward_feeds_the_curriculum_and_logs_its_metrics() -> None:
    from care_lab.training.policy.rewards import PolicyReward
    from care_sdk import AdaptiveReward, Rubric, RubricEvaluator
    from care_sdk.testing import ScriptedBackend, evaluation_json

    def score(request: Any) -> str:
        return evaluation_json([5] * 6 if "PASS" in request.messages[-1].content else [1] * 6)

    care = AdaptiveReward(evaluator=RubricEvaluator(ScriptedBackend(score)), rubric=Rubric.uniform_fixed())
    curriculum = BoundaryCurriculum(["c1", "c2"], CurriculumSettings())
    reward = PolicyReward(care, multi_turn=False, curriculum=curriculum, scenario_key="id")
    logged: dict[str, float] = {}
    context = [{"role": "user", "content": "I lost my job."}]
    rewards = reward(
        [context] * 4,
        ["PASS", "no", "no", "no"],
        context=[context] * 4,
        id=["c1", "c1", "c2", "c2"],
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert rewards == [1.0, 0.0, 0.0, 0.0] and curriculum.pass_rates == {"c1": 0.5, "c2": 0.0}
    assert logged["care/curriculum/mean_pass_rate"] == 0.25 and logged["care/curriculum/near_boundary"] == 0.5
    with pytest.raises(ValueError, match="dataset column 'id'"):
        reward([context], ["PASS"], context=[context])


def test_config_takes_the_curriculum_and_checks_it() -> None:
    config = PolicyGRPOConfig(model="tiny", output_dir="runs/x", curriculum={"target": 0.3})
    assert config.curriculum is not None and config.curriculum.rehearsal == 0.2
    with pytest.raises(ValueError, match="rehearsal"):
        PolicyGRPOConfig(model="tiny", output_dir="runs/x", curriculum={"rehearsal": 0.0})


@pytest.mark.slow
def test_grpo_steps_sample_by_the_pass_rates_of_the_groups_rolled_out(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    from care_lab.data.roles import write_roles
    from care_lab.training.policy import run_policy_grpo
    from care_sdk.backends import BackendPool, GenerationRequest
    from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json

    data = tmp_path / "data"
    data.mkdir()
    marks = {"p1": "pass", "p2": "pass", "f1": "fail", "f2": "fail"}
    with (data / "prompts.jsonl").open("w") as fh:
        for name, mark in marks.items():
            messages = [{"role": "user", "content": f"[{mark}] I feel lost."}, {"role": "assistant", "content": "Hm."}]
            fh.write(json.dumps({"id": name, "messages": messages}) + "\n")
    write_roles(data, {"prompts.jsonl": "train"})

    def evaluate(request: GenerationRequest) -> str:  # the context decides: a scenario passes or fails always
        return evaluation_json([5] * 6 if "[pass]" in request.messages[-1].content else [1] * 6)

    dims = ("cognitive", "affective", "proactive")
    pool = BackendPool(
        {
            "gen": ScriptedBackend(
                lambda r: rubric_json(dict.fromkeys(dims, 1), {d: ["Names it.", "Specific."] for d in dims})
            ),
            "eval": ScriptedBackend(evaluate),
        }
    )
    settings = CurriculumSettings(rehearsal=0.2)
    config = PolicyGRPOConfig(
        model="tiny",
        lora={"r": 4, "alpha": 8, "dropout": 0.0},
        merge=False,
        output_dir=str(tmp_path / "run"),
        prompts={"source": "jsonl", "path": str(data / "prompts.jsonl"), "turns_per_dialogue": 1},
        reward={"generator": "gen", "evaluator": "eval"},
        curriculum=settings.model_dump(),
        trl={"max_steps": 4, "num_generations": 2, "per_device_train_batch_size": 4, "max_completion_length": 8},
    )
    result = run_policy_grpo(config, pool=pool, log=lambda s: None)
    assert result.curriculum is not None
    summary = json.loads((tmp_path / "run" / "curriculum.json").read_text())
    observed = [e for e in summary["events"] if e["event"] == "observe"]
    draws = [e for e in summary["events"] if e["event"] == "draw"]
    assert len(observed) == 4 and len(draws) == 4  # one group batch scored and one drawn per step
    for event in observed:  # pass rates straight from the rewards of the groups rolled out
        assert event["pass_rates"] == {k: 1.0 if marks[k.split(":")[0]] == "pass" else 0.0 for k in event["pass_rates"]}
    for draw in draws:
        assert draw["probabilities"] == pytest.approx(expected(draw["pass_rates"], settings), abs=1e-6)
        assert min(draw["probabilities"].values()) >= 0.2 / 4 - 1e-9
    assert any(len(set(d["probabilities"].values())) > 1 for d in draws)  # the weights moved off uniform
    assert all(isinstance(r["care/curriculum/seen"], float) for r in result.rewards) and len(result.rewards) == 4
    assert (tmp_path / "run" / "curriculum.jsonl").read_text().count('"event": "draw"') == 4
