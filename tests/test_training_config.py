"""Recipe configs: every shipped YAML validates; unknown keys and bad YAML are errors naming file and key."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from care_sdk.errors import ConfigError
from care_sdk.training.config import BuildDataConfig, PrefGRPOConfig, SFTStageConfig, load_config
from care_sdk.training.policy.config import EvalPolicyConfig, PolicyGRPOConfig

pytest.importorskip("yaml")

CONFIGS = Path(__file__).resolve().parents[1] / "training" / "configs"
CLASSES = {
    "build_data": BuildDataConfig,
    "sft": SFTStageConfig,
    "pref_grpo": PrefGRPOConfig,
    "policy_grpo": PolicyGRPOConfig,
    "policy_eval": EvalPolicyConfig,
}


def _class_for(path: Path) -> type:
    return next(cls for prefix, cls in CLASSES.items() if path.stem.startswith(prefix))


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


def test_invalid_value_and_bad_yaml_are_named(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text("output_dir: o\non_misaligned: ignore\n")
    with pytest.raises(ConfigError, match=r"b\.yaml: on_misaligned"):
        load_config(BuildDataConfig, path)
    path.write_text("output_dir: o\n  bad: [\n")
    with pytest.raises(ConfigError, match=r"b.yaml:line \d+: not valid YAML"):
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
    from care_sdk.training._common import build_trl_config

    with pytest.raises(ConfigError, match=r"sft.yaml: trl.max_stepz: unknown key for SFTConfig"):
        build_trl_config(trl.SFTConfig, {"output_dir": "o"}, {"max_stepz": 3}, "sft.yaml")


def test_cli_registers_the_three_stages() -> None:
    from care_sdk.training.cli import add_train_commands

    parser = argparse.ArgumentParser(prog="care")
    add_train_commands(parser.add_subparsers(dest="command"))
    for stage in ("build-data", "sft", "pref-grpo"):
        args = parser.parse_args(["train", stage, "--config", "x.yaml", "--output-dir", "o"])
        assert callable(args.func) and args.output_dir == "o"
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "sft"])  # --config is required
