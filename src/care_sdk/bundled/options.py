"""``--add-on NAME[=SPEC]``: the one command-line option for the bundled add-ons, shared by ``care
score``, ``care serve`` and the lab's ``care bench`` commands.

Each add-on is outside the method and off unless asked for (see :mod:`care_sdk.addons`):

- ``weights-head`` (``=PATH.json``: a head of your own): the rubric's weights read by a weights head
  on the model's hidden states;
- ``expected-weights``: the weights read as expectations over 0-10 at their slots;
- ``context-fit`` (``=SPEC``: read on that backend instead of the bundled base model): each reward
  scaled by the reply's fit to its context.

Examples:
    >>> parser = argparse.ArgumentParser()
    >>> add_add_on_option(parser)
    >>> parser.parse_args(["--add-on", "context-fit=llamacpp:m.gguf", "--add-on", "weights-head"]).add_on
    [('context-fit', 'llamacpp:m.gguf'), ('weights-head', None)]
    >>> add_ons_of(parser.parse_args([]))
    AddOns(weight_reader=None, context_fit=None)
"""

from __future__ import annotations

import argparse
from typing import Any

from care_sdk.addons import ADD_ONS, AddOns, add_ons, parse_add_on
from care_sdk.errors import ConfigError

__all__ = [
    "add_add_on_option",
    "add_ons_of",
    "add_persona_option",
    "reward_from_args",
]


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
        >>> parser.parse_args(["--add-on", "expected-weights"]).add_on
        [('expected-weights', None)]
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


def add_persona_option(cmd: argparse.ArgumentParser) -> None:
    """Add ``--persona-criteria``: :class:`~care_sdk.RubricGenerator`'s ``persona_criteria`` (off by default),
    which :func:`reward_from_args` passes on.

    Examples:
        >>> parser = argparse.ArgumentParser(prog="care score")
        >>> add_persona_option(parser)
        >>> parser.parse_args(["--persona-criteria"]).persona_criteria
        True
    """
    cmd.add_argument(
        "--persona-criteria",
        action="store_true",
        help="add the persona-consistency criteria (one per dimension) to the rubric of every context that "
        "comes with a user profile (see care_sdk.profiles); off by default",
    )


def add_ons_of(args: argparse.Namespace) -> AddOns:
    """The add-ons the ``--add-on`` values of ``args`` ask for.

    Raises:
        ConfigError: a name given twice, ``weights-head`` with ``expected-weights``, or an add-on
            that cannot be built (its message starts with ``--add-on``).

    Examples:
        >>> add_ons_of(argparse.Namespace(add_on=[("weights-head", None), ("expected-weights", None)]))
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: --add-on: add-ons weights-head and expected-weights both read the rubric's ...
    """
    asked = getattr(args, "add_on", None) or []
    try:
        return add_ons([name if spec is None else f"{name}={spec}" for name, spec in asked])
    except ConfigError as exc:
        raise ConfigError(f"--add-on: {exc}") from None


def reward_from_args(args: argparse.Namespace) -> Any:
    """The reward that ``care score``'s (or ``care serve``'s) parsed options describe: variant,
    backends, seed, guards, ``--persona-criteria`` and the add-ons of ``--add-on``.

    Examples:
        >>> from care_sdk.cli import build_parser
        >>> args = build_parser().parse_args(["score", "in.jsonl", "--variant", "fixed_rubric"])
        >>> reward_from_args(args).variant  # doctest: +SKIP
        'fixed_rubric'
    """
    from care_sdk.guards import Guards
    from care_sdk.reward import build_reward
    from care_sdk.variants import variant_of

    extra = add_ons_of(args)
    return build_reward(
        args.variant or variant_of(args.weights, args.criteria),
        backend=args.backend,
        generator_backend=args.generator_backend,
        evaluator_backend=args.evaluator_backend,
        generator_options={
            "seed": args.seed,
            "persona_criteria": args.persona_criteria,
            **extra.generator_options(),
        },
        evaluator_options={"seed": args.seed},
        guards=None if args.guards == "off" else Guards(on_flag=args.guards),
        context_fit=extra.reward_context_fit(),
    )
