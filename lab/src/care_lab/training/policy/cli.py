"""``care train policy-grpo`` and ``care train eval-policy``: policy training and evaluation with CARE.

:func:`add_policy_commands` adds both stages to the ``train`` group that
:func:`care_lab.training.cli.add_train_commands` creates (call it after that one); when no
``train`` group exists yet it creates one.
"""

from __future__ import annotations

import argparse

from care_lab.training._cli import add_stages, config_overrides, enforce_plan, trl_args

__all__ = ["add_policy_commands"]


def _policy_grpo(args: argparse.Namespace) -> int:
    from care_lab.simulation.profiles import load_profiles
    from care_lab.training._common import GRPO_DEFAULTS
    from care_lab.training.config import load_config
    from care_lab.training.policy.components import prompt_rows
    from care_lab.training.policy.config import PolicyGRPOConfig
    from care_lab.training.policy.runner import run_policy_grpo

    config = load_config(PolicyGRPOConfig, args.config, config_overrides(args))
    if config.mode == "multi_turn":
        rows = len(load_profiles(config.users, "train", config.data_dir))
    else:
        rows = len(prompt_rows(config.prompts, config.system_prompt, config.data_dir))
    enforce_plan(args, "grpo", rows, trl_args("grpo", config, GRPO_DEFAULTS, str(args.config)))
    result = run_policy_grpo(config, source=str(args.config))
    last = result.rewards[-1] if result.rewards else {}
    print(f"policy-grpo: {len(result.rewards)} logged steps, last {last}")
    print(f"policy-grpo: saved {result.saved}; scored dialogues in {result.dialogues}, turns in {result.turns}")
    return 0


def _eval_policy(args: argparse.Namespace) -> int:
    from care_lab.training.config import load_config
    from care_lab.training.policy.config import EvalPolicyConfig
    from care_lab.training.policy.evaluate import evaluate_policy

    summary = evaluate_policy(load_config(EvalPolicyConfig, args.config, config_overrides(args)))
    print(summary.table())
    return 0 if summary.dialogues and not summary.failed_episodes else 1


def _train_stages(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    train: argparse.ArgumentParser | None = subparsers.choices.get("train")
    if train is None:
        train = subparsers.add_parser("train", help="training recipes")
    for action in train._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    stages: argparse._SubParsersAction = train.add_subparsers(dest="stage", required=True, metavar="STAGE")  # type: ignore[type-arg]
    return stages


def add_policy_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register the ``train`` stages ``policy-grpo`` and ``eval-policy``.

    Each takes ``--config FILE`` (YAML, see ``training/configs/policy_*.yaml``) and an optional
    ``--output-dir`` overriding the file's.

    Examples:
        >>> parser = argparse.ArgumentParser(prog="care")
        >>> add_policy_commands(parser.add_subparsers(dest="command"))
        >>> parser.parse_args(["train", "eval-policy", "--config", "e.yaml"]).func.__name__
        '_eval_policy'
    """
    stages = _train_stages(subparsers)
    add_stages(
        stages,
        [
            ("policy-grpo", _policy_grpo, "GRPO of a dialogue policy with the CARE reward, single- or multi-turn"),
            (
                "eval-policy",
                _eval_policy,
                "run a policy against the simulated user on held-out profiles, judged by CARE",
            ),
        ],
        trainers=("policy-grpo",),
    )
