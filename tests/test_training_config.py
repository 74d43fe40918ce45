"""Recipe configs: every shipped YAML validates; unknown keys and bad YAML are errors naming file and key."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from care_lab.training.config import BuildDataConfig, PrefGRPOConfig, SFTStageConfig, WeightsHeadConfig, load_config
from care_lab.training.policy.config import EvalPolicyConfig, PolicyGRPOConfig
from care_sdk.errors import ConfigError

pytest.importorskip("yaml")

CONFIGS = Path(__file__).resolve().parents[1] / "training" / "configs"
CLASSES = {
    "build_data": BuildDataConfig,
    "sft": SFTStageConfig,
    "pref_grpo": PrefGRPOConfig,
    "policy_grpo": PolicyGRPOConfig,
    "policy_eval": EvalPolicyConfig,
}


OTHER = {  # configs of the bundled adapters
    "generator_data": BuildDataConfig,
    "generator_sft": SFTStageConfig,
    "generator_pref_grpo": PrefGRPOConfig,
    "evaluator_data": BuildDataConfig,
    "evaluator_sft": SFTStageConfig,
    "generator_weights_head": WeightsHeadConfig,
}


def _class_for(path: Path) -> type:
    prefixes = sorted({**CLASSES, **OTHER}.items(), key=lambda item: -len(item[0]))  # the longest prefix first
    return next(cls for prefix, cls in prefixes if path.stem.startswith(prefix))


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_validate(path: Path) -> None:
    config = load_config(_class_for(path), path)
    assert config.model_config.get("frozen") is True


def test_each_stage_has_smoke_and_paper_configs() -> None:
    names = {p.stem for p in CONFIGS.glob("*.yaml")}
    for stage in CLASSES:
        assert {f"{stage}_smoke", f"{stage}_paper"} <= names


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "sft.yaml"
    path.write_text("data: d\nmodel: tiny\noutput_dir: o\nlora:\n  rank: 8\n")
    with pytest.raises(ConfigError, match=r"sft.yaml: lora.rank: unknown key"):
        load_config(SFTStageConfig, path)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("output_dir: o\non_misaligned: ignore\n", r"b\.yaml: on_misaligned"),
        ("output_dir: o\n  bad: [\n", r"b.yaml:line \d+: not valid YAML"),
        ("output_dir: o\nteacher: !include shared.yaml#model\n", r"b.yaml: !include shared.yaml#model: no key 'model'"),
        ("output_dir: o\nteacher: !include missing.yaml\n", r"b.yaml: no such config file to include: .*missing"),
        ("output_dir: o\nteacher: !include b.yaml#teacher\n", "includes itself"),
    ],
)
def test_invalid_values_bad_yaml_and_bad_includes_are_named(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / "shared.yaml").write_text("backend: x\n")
    path = tmp_path / "b.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=error):
        load_config(BuildDataConfig, path)
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(BuildDataConfig, tmp_path / "missing.yaml")


def test_overrides_replace_file_values(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text("output_dir: o\n")
    assert load_config(BuildDataConfig, path, {"output_dir": "x"}).output_dir == "x"


def test_configs_are_frozen() -> None:
    config = BuildDataConfig(output_dir="o")
    with pytest.raises(ValueError):
        config.seed = 3  # type: ignore[misc]


def test_trl_section_unknown_key_is_named() -> None:
    trl = pytest.importorskip("trl")
    from care_lab.training._common import build_trl_config

    with pytest.raises(ConfigError, match=r"sft.yaml: trl.max_stepz: unknown key for SFTConfig"):
        build_trl_config(trl.SFTConfig, {"output_dir": "o"}, {"max_stepz": 3}, "sft.yaml")


def test_cli_registers_the_three_stages() -> None:
    from care_lab.training.cli import add_train_commands

    parser = argparse.ArgumentParser(prog="care")
    add_train_commands(parser.add_subparsers(dest="command"))
    for stage in ("build-data", "sft", "pref-grpo"):
        args = parser.parse_args(["train", stage, "--config", "x.yaml", "--output-dir", "o"])
        assert callable(args.func) and args.output_dir == "o"
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "sft"])  # --config is required


# -- shared definitions, sizes and the planned-steps gate -------------------------------------------


def test_one_evaluator_definition_serves_pref_grpo_and_policy_grpo() -> None:
    import yaml

    shared = yaml.safe_load((CONFIGS / "shared" / "evaluator_paper.yaml").read_text())
    pref = [load_config(PrefGRPOConfig, p) for p in sorted(CONFIGS.glob("pref_grpo_paper*.yaml"))]
    policy = [load_config(PolicyGRPOConfig, p) for p in sorted(CONFIGS.glob("policy_grpo_paper*.yaml"))]
    evals = [load_config(EvalPolicyConfig, p) for p in sorted(CONFIGS.glob("policy_eval_paper*.yaml"))]
    assert len(pref) == 2 and len(policy) == 7 and len(evals) == 2
    expected = (shared["backend"], shared["max_tokens"], shared["max_attempts"])
    assert {(c.evaluator, c.evaluator_max_tokens, c.evaluator_max_attempts) for c in pref} == {expected}
    assert {(r.evaluator, r.evaluator_max_tokens, r.max_attempts) for r in [c.reward for c in policy + evals]} == {
        expected
    }


def _trl_plan(config: PrefGRPOConfig | SFTStageConfig | PolicyGRPOConfig, kind: str, rows: int, processes: int) -> int:
    from care_lab.training.plan import plan_training

    t = config.trl
    return plan_training(
        kind,  # type: ignore[arg-type]
        rows,
        batch=t["per_device_train_batch_size"],
        grad_acc=t.get("gradient_accumulation_steps", 1),
        processes=processes,
        epochs=t.get("num_train_epochs", 1),
        max_steps=t.get("max_steps", -1),
        num_generations=t.get("num_generations", 1),
    ).steps


def test_paper_configs_plan_enough_steps_and_consistent_lora_rates(data_dir: Path) -> None:
    from care_lab.simulation import load_profiles
    from care_lab.training.plan import DEFAULT_MIN_STEPS

    policy = load_config(PolicyGRPOConfig, CONFIGS / "policy_grpo_paper.yaml")
    users = len(load_profiles(policy.users, "train", str(data_dir)))
    assert users == 910  # ESConv's train split
    assert _trl_plan(policy, "grpo", users, processes=7) == 130  # the arithmetic in the file's header
    # the generator stages, at the low end of the documented data sizes, on 8 processes
    sft = load_config(SFTStageConfig, CONFIGS / "sft_paper.yaml")
    pref = load_config(PrefGRPOConfig, CONFIGS / "pref_grpo_paper.yaml")
    assert _trl_plan(sft, "sft", 5000, processes=8) >= 150
    assert _trl_plan(pref, "grpo", 4000, processes=8) >= 250
    assert min(_trl_plan(sft, "sft", 5000, 8), _trl_plan(pref, "grpo", 4000, 8)) >= DEFAULT_MIN_STEPS
    # LoRA at 10x the full fine-tuning rate in both generator stages
    assert sft.finetune == pref.finetune == "lora"
    assert sft.trl["learning_rate"] == pytest.approx(10 * pref.trl["learning_rate"])
    assert pref.trl["learning_rate"] >= 1e-5


def test_care_train_prints_the_plan_and_refuses_a_short_run(
    tmp_path: Path, small_build_data: object, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("trl")
    from care_sdk.cli import main

    data = small_build_data(2)  # type: ignore[operator]
    config = tmp_path / "sft.yaml"
    config.write_text(
        f"data: {data}\nmodel: tiny\noutput_dir: {tmp_path / 'out'}\n"
        "trl: {max_steps: 3, per_device_train_batch_size: 2, gradient_accumulation_steps: 2}\n"
    )
    assert main(["train", "sft", "--config", str(config)]) == 2
    out, err = capsys.readouterr()
    assert "sft plan: " in out and "4 samples per optimiser step" in out and "-> 3 optimiser steps" in out
    assert "the run plans 3 optimiser steps, fewer than the minimum of 20" in err and "--min-steps 0" in err
    assert not (tmp_path / "out" / "adapter").exists()  # refused before training
    assert main(["train", "sft", "--config", str(config), "--min-steps", "4"]) == 2


def test_export_refuses_a_run_without_an_adapter_or_from_a_full_model(tmp_path: Path) -> None:
    """``care train export-adapter`` writes the adapters a run's model is made of, and names what it cannot write."""
    from care_lab.training.models import adapter_chain

    run = tmp_path / "run" / "adapter"
    assert adapter_chain("bundled", run) == [run]  # a run from the bundled base is its own adapter
    with pytest.raises(ConfigError, match="saved no LoRA adapter"):
        adapter_chain(str(tmp_path), run)
    run.mkdir(parents=True)
    (run / "adapter_config.json").write_text("{}")
    full = tmp_path / "full"
    (full / "merged").mkdir(parents=True)
    (full / "merged" / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="started from a full model"):
        adapter_chain(str(full), run)
    start = tmp_path / "sft" / "adapter"
    start.mkdir(parents=True)
    (start / "adapter_config.json").write_text("{}")
    assert adapter_chain(str(start), run) == [start, run]
