"""Preference GRPO on a tiny random model: a real TRL step with all three reward terms reported."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

from care_sdk import RubricEvaluator
from care_sdk.testing import ScriptedBackend, evaluation_json
from care_sdk.training.config import PrefGRPOConfig
from care_sdk.training.grpo import REWARD_TERMS, grpo_rows, run_pref_grpo

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
