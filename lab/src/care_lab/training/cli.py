"""``care train <stage> --config FILE``: the training subcommands (build-data, sft, pref-grpo, export-adapter,
weights-head).

The ``care`` command calls :func:`add_train_commands` on its subparsers.
"""

from __future__ import annotations

import argparse
from typing import Any

from care_lab.training._cli import add_stages, config_overrides, enforce_plan, trl_args

__all__ = ["add_train_commands"]


def _build_data(args: argparse.Namespace) -> int:
    from care_lab.training.build_data import build_data
    from care_lab.training.config import BuildDataConfig, load_config

    build_data(load_config(BuildDataConfig, args.config, config_overrides(args)))
    return 0


def _sft(args: argparse.Namespace) -> int:
    from care_lab.training._common import read_records
    from care_lab.training.config import SFTStageConfig, load_config
    from care_lab.training.sft import SFT_DEFAULTS, run_sft

    config = load_config(SFTStageConfig, args.config, config_overrides(args))
    rows = len(read_records(config.data, "sft", "train", config.max_examples))
    enforce_plan(args, "sft", rows, trl_args("sft", config, SFT_DEFAULTS, str(args.config)))
    result = run_sft(config, source=str(args.config))
    print(f"sft: {result.examples} examples, final loss {result.final_loss}, saved {result.saved}")
    return 0


def _pref_grpo(args: argparse.Namespace) -> int:
    from care_lab.training._common import read_records
    from care_lab.training.config import PrefGRPOConfig, load_config
    from care_lab.training.pref_grpo import GRPO_DEFAULTS, run_pref_grpo

    config = load_config(PrefGRPOConfig, args.config, config_overrides(args))
    rows = len(read_records(config.data, "pairs", "train", config.max_examples))
    enforce_plan(args, "grpo", rows, trl_args("grpo", config, GRPO_DEFAULTS, str(args.config)))
    result = run_pref_grpo(config, source=str(args.config))
    last = result.rewards[-1] if result.rewards else {}
    print(f"pref-grpo: {len(result.rewards)} logged steps, last {last}, saved {result.saved}")
    return 0


def _export_adapter(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from care_lab.training.config import PrefGRPOConfig, SFTStageConfig, load_config
    from care_lab.training.export_adapter import export_lora_gguf
    from care_lab.training.models import adapter_chain
    from care_sdk.backends.llamacpp import default_model_path
    from care_sdk.errors import ConfigError
    from care_sdk.prompts import EVALUATOR_PROMPT_VERSION, GENERATOR_PROMPT_VERSION

    config: SFTStageConfig | PrefGRPOConfig
    try:
        config = load_config(SFTStageConfig, args.config, config_overrides(args))
    except ConfigError as sft_error:
        try:
            config = load_config(PrefGRPOConfig, args.config, config_overrides(args))
        except ConfigError:
            raise sft_error from None
    role = config.role if isinstance(config, SFTStageConfig) else "generator"
    run = Path(config.output_dir)
    metrics_path = run / "metrics.json"
    metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.is_file() else {}
    history = metrics.get("log_history", [])
    summary: dict[str, Any] = next((h for h in reversed(history) if "train_runtime" in h), {})
    training = {
        "config": str(args.config),
        "start": config.model,
        "data": config.data,
        "records": metrics.get("examples"),
        "steps": summary.get("step") or max((h.get("step", 0) for h in history), default=0),
        "train_runtime_s": summary.get("train_runtime"),
        "losses": metrics.get("losses", []),
        "lora": config.lora.model_dump(mode="json"),
        "trl": config.trl,
    }
    out = Path(args.out) if args.out else run / f"{role}.gguf"
    chain = adapter_chain(config.model, run / "adapter")
    export_lora_gguf(
        chain,
        out,
        base_gguf=default_model_path(),
        role=role,
        prompt_version=GENERATOR_PROMPT_VERSION if role == "generator" else EVALUATOR_PROMPT_VERSION,
        max_context_messages=config.max_context_messages,
        training=training,
    )
    stacked = f", {len(chain)} adapters stacked" if len(chain) > 1 else ""
    print(f"export-adapter: wrote {out} ({out.stat().st_size / 1e6:.1f} MB{stacked})")
    return 0


def _weights_head(args: argparse.Namespace) -> int:
    from care_lab.training.config import WeightsHeadConfig, load_config
    from care_lab.training.weights_head import fit_weights_head

    fit_weights_head(load_config(WeightsHeadConfig, args.config, config_overrides(args)))
    return 0


def add_train_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``train`` with its stages (build-data, sft, pref-grpo, export-adapter, weights-head).

    Each stage takes ``--config FILE`` (YAML, see ``training/configs/``) and an optional
    ``--output-dir`` that overrides the file's; ``sft`` and ``pref-grpo`` print their plan
    (optimiser steps, samples per step, epochs) and refuse one under ``--min-steps`` (default 20).
    The parser's ``func`` default runs the stage and returns the exit code.

    Examples:
        >>> parser = argparse.ArgumentParser(prog="care")
        >>> add_train_commands(parser.add_subparsers(dest="command"))
        >>> args = parser.parse_args(["train", "sft", "--config", "training/configs/sft_smoke.yaml"])
        >>> args.func.__name__
        '_sft'
    """
    train = subparsers.add_parser("train", help="train the rubric generator (build-data, sft, pref-grpo)")
    stages = train.add_subparsers(dest="stage", required=True, metavar="STAGE")
    add_stages(
        stages,
        [
            ("build-data", _build_data, "build SFT rubric targets and preference pairs"),
            ("sft", _sft, "supervised fine-tuning on target rubrics (TRL SFTTrainer, LoRA or full)"),
            ("pref-grpo", _pref_grpo, "preference GRPO with format, r_pref and r_align rewards (TRL GRPOTrainer)"),
            (
                "export-adapter",
                _export_adapter,
                "write a trained LoRA adapter (sft, or pref-grpo with the adapter it started from) as a GGUF "
                "adapter file for llama.cpp",
            ),
            ("weights-head", _weights_head, "fit the generator's weights head on the base model's hidden states"),
        ],
        trainers=("sft", "pref-grpo"),
    )
    export = stages.choices["export-adapter"]
    export.add_argument("--out", default=None, help="the GGUF file to write (default: OUTPUT_DIR/ROLE.gguf)")
