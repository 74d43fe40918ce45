"""The lab's ``care`` commands: ``care train``, ``care bench``, ``care eval``, ``care plot``.

The ``care`` command line (:mod:`care_sdk.cli`) finds each of them through the ``care_sdk.commands``
entry point of the same name that care-lab declares, and loads only the one a command line names;
the SDK never imports the lab.

Examples:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="care")
    >>> add_lab_commands(parser.add_subparsers(dest="command"))
    >>> parser.parse_args(["bench", "quality", "--variants", "care"]).command
    'bench'
"""

from __future__ import annotations

import argparse

__all__ = ["add_bench", "add_eval", "add_lab_commands", "add_plot", "add_train"]


def add_train(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``care train``: the rubric generator's stages and the policy recipe's."""
    from care_lab.training.cli import add_train_commands
    from care_lab.training.policy.cli import add_policy_commands

    add_train_commands(subparsers)
    add_policy_commands(subparsers)


def add_bench(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``care bench``: benchmarks of reward quality."""
    from care_lab.bench.cli import add_bench_commands

    add_bench_commands(subparsers)


def add_eval(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``care eval``: the method's evaluation protocol."""
    from care_lab.evals.cli import add_eval_commands

    add_eval_commands(subparsers)


def add_plot(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``care plot``: figures from results files."""
    from care_lab.plots.cli import add_plot_commands

    add_plot_commands(subparsers)


def add_lab_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register every lab command group on the ``care`` parser's subcommands."""
    for add in (add_train, add_bench, add_plot, add_eval):
        add(subparsers)
