"""The reward's command-line options, shared by ``care score``, ``care serve`` and the lab's commands.

:func:`add_reward_options` adds them; :func:`reward_recipe` turns the parsed values into the keyword
arguments of :meth:`care_sdk.AdaptiveReward.from_backend`, the one factory behind every command (a
picklable recipe: ``care score --ray`` sends it to each actor). The options:

- ``--backend``, ``--generator-backend``, ``--evaluator-backend``: backend specs;
- ``--variant``: CARE or one of the paper's ablations (:mod:`care_sdk.variants`);
- ``--guards``: what a flagged reply gets;
- ``--add-on NAME[=SPEC]`` (repeatable): an opt-in add-on outside the method (see
  :mod:`care_sdk.addons`): ``weights-head`` (``=PATH.json``: a head of your own) and
  ``expected-weights`` read the rubric's weights another way; ``context-fit`` (``=SPEC``: read on
  that backend instead of the bundled base model) scales each reward by the reply's fit to its context;
- ``--persona-criteria``: the generator's ``persona_criteria`` (off by default);
- ``--seed``: the sampling seed of generator and evaluator.

Examples:
    >>> parser = argparse.ArgumentParser(prog="care score")
    >>> add_reward_options(parser)
    >>> recipe = reward_recipe(parser.parse_args(["--variant", "fixed_criteria", "--add-on", "expected-weights"]))
    >>> recipe["backend"], recipe["variant"], recipe["add_ons"], recipe["evaluator_options"]
    ('default', 'fixed_criteria', ('expected-weights',), {'seed': 0})
"""

from __future__ import annotations

import argparse
from typing import Any

from care_sdk.addons import ADD_ONS, AddOns, add_ons, check_add_ons, parse_add_on
from care_sdk.errors import ConfigError
from care_sdk.variants import VARIANTS

__all__ = ["add_add_on_option", "add_ons_of", "add_reward_options", "reward_recipe"]


def _add_on(value: str) -> tuple[str, str | None]:
    try:
        return parse_add_on(value)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_add_on_option(cmd: argparse.ArgumentParser) -> None:
    """Add the repeatable ``--add-on NAME[=SPEC]`` (see the module docstring); :func:`add_ons_of`
    builds what it names.

    Examples:
        >>> parser = argparse.ArgumentParser(prog="care score")
        >>> add_add_on_option(parser)
        >>> parser.parse_args(["--add-on", "context-fit=llamacpp:m.gguf", "--add-on", "weights-head"]).add_on
        [('context-fit', 'llamacpp:m.gguf'), ('weights-head', None)]
    """
    cmd.add_argument(
        "--add-on",
        action="append",
        type=_add_on,
        default=[],
        metavar="NAME[=SPEC]",
        help=f"an opt-in add-on outside the method, repeatable: {', '.join(ADD_ONS)}. weights-head (=PATH.json: "
        "your own head) and expected-weights read the rubric's weights another way (choose one); context-fit "
        "scales each reward by the reply's fit to its context, read on the bundled base model or on the backend "
        "=SPEC names (a llamacpp or hf spec). Default: none, the method's reward",
    )


def _asked(args: argparse.Namespace) -> tuple[str, ...]:
    """The ``--add-on`` values of ``args`` as ``NAME[=SPEC]`` strings, checked (nothing built)."""
    asked = getattr(args, "add_on", None) or []
    try:
        return check_add_ons([name if spec is None else f"{name}={spec}" for name, spec in asked])
    except ConfigError as exc:
        raise ConfigError(f"--add-on: {exc}") from None


def add_ons_of(args: argparse.Namespace) -> AddOns:
    """The add-ons the ``--add-on`` values of ``args`` ask for, built.

    Raises:
        ConfigError: a name given twice, ``weights-head`` with ``expected-weights``, or an add-on
            that cannot be built (its message starts with ``--add-on``).

    Examples:
        >>> add_ons_of(argparse.Namespace(add_on=[])) == AddOns()
        True
        >>> add_ons_of(argparse.Namespace(add_on=[("weights-head", None), ("expected-weights", None)]))
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: --add-on: add-ons weights-head and expected-weights both read the rubric's ...
    """
    asked = _asked(args)
    try:
        return add_ons(asked)
    except ConfigError as exc:
        raise ConfigError(f"--add-on: {exc}") from None


def add_reward_options(cmd: argparse.ArgumentParser) -> None:
    """Add the reward's options (see the module docstring) to a command.

    Examples:
        >>> parser = argparse.ArgumentParser(prog="care serve")
        >>> add_reward_options(parser)
        >>> args = parser.parse_args(["--evaluator-backend", "openai:judge@http://127.0.0.1:8000/v1"])
        >>> args.backend, args.variant, args.guards, args.seed
        ('default', 'care', 'zero', 0)
    """
    cmd.add_argument(
        "--backend", default="default", help="backend spec for generator and evaluator (default: %(default)s)"
    )
    cmd.add_argument("--generator-backend", help="backend spec for the rubric generator only")
    cmd.add_argument("--evaluator-backend", help="backend spec for the evaluator only")
    cmd.add_argument(
        "--variant",
        choices=VARIANTS,
        default="care",
        help="CARE or one of the paper's ablations: uniform_weights (generated criteria, weights 1/3 each), "
        "fixed_criteria (generated weights, the fixed six criteria), fixed_rubric (both fixed; no generator) "
        "(default: %(default)s)",
    )
    cmd.add_argument(
        "--guards",
        choices=["zero", "penalise", "report", "off"],
        default="zero",
        help="flagged replies (empty, forged turns, text aimed at the evaluator): reward 0, a penalty, "
        "flags only, or no guards at all (default: %(default)s)",
    )
    add_add_on_option(cmd)
    cmd.add_argument(
        "--persona-criteria",
        action="store_true",
        help="add the persona-consistency criteria (one per dimension) to the rubric of every context that "
        "comes with a user profile (see care_sdk.profiles); off by default",
    )
    cmd.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")


def reward_recipe(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :meth:`~care_sdk.AdaptiveReward.from_backend` that the options of
    :func:`add_reward_options` describe; picklable (spec strings, names and a frozen ``Guards``).

    Raises:
        ConfigError: ``--add-on`` values that cannot go together (checked here, before anything is built).

    Examples:
        >>> parser = argparse.ArgumentParser()
        >>> add_reward_options(parser)
        >>> recipe = reward_recipe(parser.parse_args(["--guards", "off", "--seed", "3"]))
        >>> recipe["guards"], recipe["generator_options"]
        (None, {'seed': 3, 'persona_criteria': False})
    """
    from care_sdk.guards import Guards

    return {
        "backend": args.backend,
        "generator_backend": args.generator_backend,
        "evaluator_backend": args.evaluator_backend,
        "variant": args.variant,
        "add_ons": _asked(args),
        "generator_options": {"seed": args.seed, "persona_criteria": args.persona_criteria},
        "evaluator_options": {"seed": args.seed},
        "guards": None if args.guards == "off" else Guards(on_flag=args.guards),
    }
