"""The lab's ``care`` commands: ``care train``, ``care bench``, ``care eval``, ``care plot``.

The ``care`` command line (:mod:`care_sdk.cli`) finds :func:`add_lab_commands` through the
``care_sdk.commands`` entry point this package declares; the SDK never imports the lab.

Examples:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="care")
    >>> add_lab_commands(parser.add_subparsers(dest="command"))
    >>> parser.parse_args(["bench", "quality", "--variants", "care"]).command
    'bench'
"""

from __future__ import annotations

import argparse

from care_lab.bench.cli import add_bench_commands
from care_lab.evals.cli import add_eval_commands
from care_lab.plots.cli import add_plot_commands
from care_lab.training.cli import add_train_commands
from care_lab.training.policy.cli import add_policy_commands

__all__ = ["add_lab_commands"]


def add_lab_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register the lab's command groups on the ``care`` parser's subcommands."""
    add_train_commands(subparsers)
    add_policy_commands(subparsers)
    add_bench_commands(subparsers)
    add_plot_commands(subparsers)
    add_eval_commands(subparsers)
