"""Public names of care_lab.data, care_lab.simulation and care_lab.training; importing them stays light."""

from __future__ import annotations

import subprocess
import sys

import care_lab.data
import care_lab.simulation
import care_lab.training


def test_exports_are_sorted_and_resolve() -> None:
    for module in (care_lab.data, care_lab.simulation, care_lab.training):
        names = module.__all__
        # isort-style, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions
        assert names == sorted(names, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n))
        assert all(hasattr(module, n) for n in names)


def test_documented_entry_points_are_exported() -> None:
    assert {
        "load_esconv",
        "load_lend_an_ear",
        "load_judged_turns",
        "load_mint_conversations",
        "load_sage_profiles",
        "load_sage_rollouts",
        "StrategyMap",
        "LoadIssue",
        "Loaded",
        "SupportDialogue",
        "SupportTurn",
        "data_role",
        "require_role",
        "require_trainable",
        "record_test_read",
    } <= set(care_lab.data.__all__)
    assert {"SimulatedUser", "UserProfile", "load_profiles", "run_episodes", "DialogueJudge"} <= set(
        care_lab.simulation.__all__
    )
    assert {
        "r_align",
        "r_pref",
        "format_reward",
        "AlignReward",
        "FormatReward",
        "PrefReward",
        "PrefGRPORewards",
        "plan_training",
        "build_data",
        "run_sft",
        "run_pref_grpo",
        "tiny_model_dir",
        "load_trained_generator",
    } <= set(care_lab.training.__all__)


def test_importing_data_and_training_does_not_import_heavy_modules() -> None:
    code = (
        "import sys, care_lab.data, care_lab.simulation, care_lab.training; "
        "print(sorted(m for m in ('torch', 'transformers', 'trl', 'peft', 'datasets', 'llama_cpp', 'openai', 'vllm')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
