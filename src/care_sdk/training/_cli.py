"""What every ``care train`` stage's command line shares: ``--config FILE`` and ``--output-dir``."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["add_stages", "config_overrides"]


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config keys the command line replaces: ``output_dir`` when ``--output-dir`` is given.

    Examples:
        >>> config_overrides(argparse.Namespace(output_dir="runs/x")), config_overrides(argparse.Namespace())
        ({'output_dir': 'runs/x'}, {})
    """
    return {"output_dir": args.output_dir} if getattr(args, "output_dir", None) else {}


def add_stages(
    stages: argparse._SubParsersAction[argparse.ArgumentParser],
    table: Iterable[tuple[str, Callable[[argparse.Namespace], int], str]],
) -> None:
    """Add a parser per ``(name, run, help)``, each with ``--config FILE`` and ``--output-dir``;
    its ``func`` default is ``run`` (the stage, returning the exit code).

    Examples:
        >>> parser = argparse.ArgumentParser(prog="train")
        >>> add_stages(parser.add_subparsers(dest="stage"), [("demo", lambda args: 0, "a demo stage")])
        >>> parser.parse_args(["demo", "--config", "d.yaml"]).config
        PosixPath('d.yaml')
    """
    for name, func, text in table:
        stage = stages.add_parser(name, help=text, description=text)
        stage.add_argument("--config", required=True, type=Path, help="the stage's YAML config")
        stage.add_argument("--output-dir", default=None, help="override the config's output_dir")
        stage.set_defaults(func=func)
