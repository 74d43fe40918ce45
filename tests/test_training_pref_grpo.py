"""Preference GRPO on a tiny random model: a real TRL step with all three reward terms reported."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

from care_lab.training.config import PrefGRPOConfig
from care_lab.training.pref_grpo import REWARD_TERMS, grpo_rows, run_pref_grpo
from care_sdk import RubricEvaluator
from care_sdk.testing import ScriptedBackend, candidate_reply, evaluation_json

pytestmark = pytest.mark.slow  # real trainer steps (a tiny model, but TRL + PEFT end to end)


@pytest.fixture(scope="module")
def pairs_file(small_build_data: Callable[[int], Path]) -> Path:
    return small_build_data(3) / "pairs" / "train.jsonl"


def test_grpo_rows_carry_the_reward_columns(pairs_file: Path) -> None:
    records = [json.loads(line) for line in pairs_file.read_text().splitlines()]
    rows = grpo_rows(records, keep=2, criteria_per_dimension=2)
    assert len(rows) == len(records) > 0
    assert len(rows[0]["context"]) <= 2 and rows[0]["prompt"][0]["role"] == "system"
    assert set(rows[0]["chosen_strategy_counts"]) == {"cognitive", "affective", "proactive"}


def test_pref_grpo_step_reports_all_three_reward_terms(tmp_path: Path, pairs_file: Path) -> None:
    evaluator = RubricEvaluator(ScriptedBackend(lambda request: evaluation_json([4] * 6)), max_attempts=1)
    config = PrefGRPOConfig(
        data=str(pairs_file),
        model="tiny",
        output_dir=str(tmp_path / "grpo"),
        evaluator="unused",
        max_examples=2,
        max_context_messages=2,
        lora={"r": 4, "alpha": 8, "dropout": 0.0},
        trl={
            "max_steps": 1,
            "num_generations": 2,
            "per_device_train_batch_size": 2,
            "max_completion_length": 16,
            "learning_rate": 1e-3,
        },
    )
    result = run_pref_grpo(config, evaluator=evaluator, log=lambda s: None)
    assert len(result.rewards) == 1
    step = result.rewards[0]
    for term in REWARD_TERMS:
        assert term in step and math.isfinite(step[term]) and 0.0 <= step[term] <= 1.0
    # a random tiny model writes no valid rubric in 16 tokens: format and the other terms are 0, not missing
    assert step["format"] == 0.0
    saved = tmp_path / "grpo"
    assert (saved / "adapter" / "adapter_config.json").exists() and (saved / "merged" / "config.json").exists()
    logged = [json.loads(line) for line in (saved / "rewards.jsonl").read_text().splitlines()]
    assert logged == result.rewards


def test_a_failing_evaluator_masks_the_whole_completion_in_a_real_grpo_step(tmp_path: Path) -> None:
    """Two pairs x 2 rubrics; the evaluator fails on the second pair's rejected reply. TRL logs that
    pair's completions as NaN in every term (masked, advantage 0), never as a 0 term."""
    import torch

    from care_lab.training._common import load_model, make_trainer, stage_setup
    from care_lab.training.plan import plan_from_args
    from care_lab.training.pref_grpo import GRPO_DEFAULTS
    from care_lab.training.rewards import PrefGRPORewards
    from care_sdk.errors import BackendError
    from care_sdk.testing import rubric_json

    def evaluate(request: Any) -> str | BackendError:
        reply = candidate_reply(request)
        if reply == "DOWN":
            return BackendError("evaluator down", provider="scripted")
        return evaluation_json([5] * 6 if reply == "GOOD" else [1] * 6)

    evaluator = RubricEvaluator(ScriptedBackend(evaluate), max_attempts=1)
    counts = {"cognitive": 2, "affective": 1, "proactive": 0}
    records = [
        {
            "context": [{"role": "user", "content": f"I lost my job ({k})."}],
            "chosen": "GOOD",
            "rejected": bad,
            "chosen_strategy_counts": counts,
        }
        for k, bad in enumerate(["BAD", "DOWN"])
    ]
    rows = grpo_rows(records, keep=None, criteria_per_dimension=2)
    config = PrefGRPOConfig(
        data="unused",
        model="tiny",
        output_dir=str(tmp_path),
        evaluator="unused",
        lora={"r": 4, "alpha": 8},
        trl={"num_train_epochs": 1, "num_generations": 2, "per_device_train_batch_size": 4, "shuffle_dataset": False},
    )
    _, args = stage_setup("grpo", config, GRPO_DEFAULTS, "test")
    model, tokenizer, _ = load_model("tiny", "float32")
    rubric = rubric_json({"cognitive": 3, "affective": 2, "proactive": 1})  # aligned with the counts
    text_ids = tokenizer(rubric, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:  # every completion is the same valid rubric
        texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts]
        prompt_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        return {"prompt_ids": prompt_ids, "completion_ids": [list(text_ids) for _ in prompts], "logprobs": None}

    rewards = PrefGRPORewards(evaluator)
    trainer = make_trainer(
        "grpo", config, model, tokenizer, args, rows, reward_funcs=rewards.terms(), rollout_func=rollout
    )
    trainer.train()
    # the printed plan is the trainer's: 2 pairs, 2 pairs x 2 rubrics per step -> one optimiser step
    assert plan_from_args("grpo", len(rows), args).steps == trainer.state.max_steps == 1
    logged = trainer._logs  # TRL's completions table: per completion, every term and the advantage
    table = {name: list(logged["rewards"][name]) for name in REWARD_TERMS}
    contexts = [str(p) for p in logged["prompt"]]
    failed = [i for i, p in enumerate(contexts) if "(1)" in p]
    ok = [i for i, p in enumerate(contexts) if "(0)" in p]
    assert len(failed) == len(ok) == 2
    for name in REWARD_TERMS:
        assert all(math.isnan(table[name][i]) for i in failed), (name, table[name])  # masked, not 0
        assert all(table[name][i] == 1.0 for i in ok), (name, table[name])
    assert all(list(logged["advantages"])[i] == 0.0 for i in failed)
    step = next(h for h in trainer.state.log_history if "rewards/format/mean" in h)
    # the means cover the scorable completions only: a 0 for the failed ones would give 0.5
    assert step["rewards/format/mean"] == step["rewards/r_pref/mean"] == step["rewards/r_align/mean"] == 1.0
    assert step["reward"] == 3.0 and rewards.unscorable == 2
    assert torch.isfinite(torch.tensor(step["loss"]))
