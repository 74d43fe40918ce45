"""What every ``care train`` stage's command line shares: ``--config FILE`` and ``--output-dir``;
trainer stages also take ``--min-steps`` and print their plan before training."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from care_lab.training.plan import DEFAULT_MIN_STEPS, TrainingPlan, check_plan, plan_from_args

__all__ = ["add_stages", "config_overrides", "enforce_plan", "trl_args"]


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config keys the command line replaces: ``output_dir`` when ``--output-dir`` is given.

    Examples:
        >>> config_overrides(argparse.Namespace(output_dir="runs/x")), config_overrides(argparse.Namespace())
        ({'output_dir': 'runs/x'}, {})
    """
    return {"output_dir": args.output_dir} if getattr(args, "output_dir", None) else {}


def trl_args(kind: Literal["sft", "grpo"], config: Any, defaults: dict[str, Any], source: str) -> Any:
    """The TRL config a trainer stage will run with (built as the stage builds it, nothing written)."""
    from care_lab.training._common import build_trl_config
    from care_lab.training.models import require_train

    require_train()
    if kind == "sft":
        from trl.trainer.sft_config import SFTConfig as config_class
    else:
        from trl.trainer.grpo_config import GRPOConfig as config_class  # type: ignore[assignment]
    values = {**defaults, "output_dir": str(Path(config.output_dir) / "trainer"), "bf16": config.dtype == "bfloat16"}
    return build_trl_config(config_class, values, config.trl, source)


def enforce_plan(args: argparse.Namespace, kind: Literal["sft", "grpo"], rows: int, trl: Any) -> TrainingPlan:
    """Print the run's plan; refuse it when it plans fewer than ``--min-steps`` optimiser steps.

    Raises:
        ConfigError: too few planned steps (the message says how to override).
    """
    plan = plan_from_args(kind, rows, trl)
    print(plan.describe())
    check_plan(plan, getattr(args, "min_steps", DEFAULT_MIN_STEPS), str(args.config))
    return plan


def add_stages(
    stages: argparse._SubParsersAction[argparse.ArgumentParser],
    table: Iterable[tuple[str, Callable[[argparse.Namespace], int], str]],
    *,
    trainers: Iterable[str] = (),
) -> None:
    """Add a parser per ``(name, run, help)``, each with ``--config FILE`` and ``--output-dir``
    (and ``--min-steps`` for the stages in ``trainers``); its ``func`` default is ``run`` (the
    stage, returning the exit code).

    Examples:
        >>> parser = argparse.ArgumentParser(prog="train")
        >>> table = [("demo", lambda args: 0, "a demo stage")]
        >>> add_stages(parser.add_subparsers(dest="stage"), table, trainers=["demo"])
        >>> args = parser.parse_args(["demo", "--config", "d.yaml"])
        >>> args.config, args.min_steps
        (PosixPath('d.yaml'), 20)
    """
    trainers = set(trainers)
    for name, func, text in table:
        stage = stages.add_parser(name, help=text, description=text)
        stage.add_argument("--config", required=True, type=Path, help="the stage's YAML config")
        stage.add_argument("--output-dir", default=None, help="override the config's output_dir")
        if name in trainers:
            stage.add_argument(
                "--min-steps",
                type=int,
                default=DEFAULT_MIN_STEPS,
                help=f"refuse a run that plans fewer optimiser steps (default {DEFAULT_MIN_STEPS}; 0: run anything)",
            )
        stage.set_defaults(func=func)
