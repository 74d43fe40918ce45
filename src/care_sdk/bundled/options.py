"""Command-line options for the bundled add-ons, shared by ``care score``, ``care serve`` and the lab's commands.

Each add-on is outside the method and off unless asked for (see the add-ons guide).

Examples:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> add_weight_reader_option(parser)
    >>> weights_options(parser.parse_args([]))
    {'weights_head': False, 'expected_weights': False}
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["WEIGHT_READERS", "add_context_fit_options", "add_weight_reader_option", "context_fit_of", "weights_options"]


WEIGHT_READERS = {
    "decoded": {"weights_head": False, "expected_weights": False},
    "head": {"weights_head": True, "expected_weights": False},
    "expected": {"weights_head": False, "expected_weights": True},
}
"""The ``--weight-reader`` choices and the :class:`~care_sdk.RubricGenerator` arguments each stands for."""


def add_weight_reader_option(cmd: argparse.ArgumentParser) -> None:
    """Add ``--weight-reader decoded|head|expected``: how the rubric generator reads its weights.

    ``decoded`` (the default, the method's) keeps the weights the model wrote; ``head`` (an opt-in
    add-on) asks for the bundled weights head, ``expected`` (another) for expectations over 0-10.
    :func:`weights_options` turns the value into the generator's arguments.

    Examples:
        >>> parser = argparse.ArgumentParser()
        >>> add_weight_reader_option(parser)
        >>> parser.parse_args([]).weight_reader, parser.parse_args(["--weight-reader", "head"]).weight_reader
        ('decoded', 'head')
    """
    cmd.add_argument(
        "--weight-reader",
        choices=tuple(WEIGHT_READERS),
        default="decoded",
        help="how the generator reads rubric weights: the weights it wrote (decoded, the method's), or one of "
        "two add-ons outside the method: the bundled weights head on the model's hidden states (head), the "
        "model's expected values over 0-10 (expected) (default: %(default)s)",
    )


def weights_options(args: argparse.Namespace) -> dict[str, bool]:
    """The :class:`~care_sdk.RubricGenerator` arguments for the ``--weight-reader`` option.

    Examples:
        >>> weights_options(argparse.Namespace(weight_reader="decoded"))
        {'weights_head': False, 'expected_weights': False}
        >>> weights_options(argparse.Namespace(weight_reader="head"))
        {'weights_head': True, 'expected_weights': False}
    """
    return dict(WEIGHT_READERS[args.weight_reader])


def add_context_fit_options(cmd: argparse.ArgumentParser) -> None:
    """Add ``--context-fit SPEC``, ``--context-fit-baselines NAME`` and ``--context-fit-check
    auto|off|JSON``: whether and how each reward is scaled by the reply's fit to its context (see
    :func:`~care_sdk.bundled.context_fit.context_fit_for`).

    The baseline names are :data:`~care_sdk.bundled.context_fit.BASELINE_NAMES` (see
    :func:`~care_sdk.bundled.context_fit.named_baselines`), each read with its bundled gate; the default is
    :data:`~care_sdk.bundled.context_fit.DEFAULT_BASELINES`. :func:`context_fit_of` turns the values into
    the reward's ``context_fit``.

    Examples:
        >>> from care_sdk.bundled.context_fit import DEFAULT_BASELINES
        >>> parser = argparse.ArgumentParser()
        >>> add_context_fit_options(parser)
        >>> args = parser.parse_args([])
        >>> args.context_fit, args.context_fit_baselines == DEFAULT_BASELINES, args.context_fit_check
        ('off', True, 'off')
    """
    from care_sdk.bundled.context_fit import BASELINE_NAMES, DEFAULT_BASELINES

    cmd.add_argument(
        "--context-fit",
        default="off",
        metavar="SPEC",
        help="an add-on outside the method: scale each reward by how likely the reply was written for its "
        "context: off (the method's reward), on (read on the bundled base model), or a backend spec to read "
        "it on (llamacpp and hf specs work) (default: %(default)s)",
    )
    cmd.add_argument(
        "--context-fit-baselines",
        choices=BASELINE_NAMES,
        default=DEFAULT_BASELINES,
        help='what context fit compares a reply against: the one message "Hi." (neutral), eight support '
        "conversations written for the package (support) or four ESConv train contexts read from the data "
        "directory (esconv); more baselines, more reads a reply; see the context fit guide (default: %(default)s)",
    )
    cmd.add_argument(
        "--context-fit-check",
        default="off",
        metavar="auto|off|JSON",
        help="the shift check, which lowers the fit of a reply it doubts was written for its context: auto (the "
        'bundled check, on the bundled base model against "Hi."; none otherwise), off (the fit from the PMI '
        "alone), or a check file of your own (ShiftCheck.save, bench_fit_probe.py --export; read with the "
        "neutral baselines on a llama.cpp model) (default: %(default)s)",
    )


def context_fit_of(args: argparse.Namespace) -> Any:
    """The reward's ``context_fit`` for the options of :func:`add_context_fit_options`.

    Examples:
        >>> context_fit_of(argparse.Namespace(context_fit="off", context_fit_baselines="neutral",
        ...                                   context_fit_check="auto", backend="default",
        ...                                   evaluator_backend=None)) is None
        True
        >>> context_fit_of(argparse.Namespace(context_fit="on", context_fit_baselines="neutral",
        ...                                   context_fit_check="mine.json", backend="default",
        ...                                   evaluator_backend=None))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: --context-fit-check: shift check mine.json: cannot be read (...)
    """
    from care_sdk.bundled.context_fit import AUTO, context_fit_for, named_baselines
    from care_sdk.bundled.shift_check import ShiftCheck
    from care_sdk.errors import ConfigError

    baselines = named_baselines(args.context_fit_baselines, where="--context-fit-baselines")
    choice = args.context_fit_check.strip()
    check: ShiftCheck | str | None = AUTO if choice.lower() == AUTO else None
    if choice.lower() not in (AUTO, "off"):
        try:
            check = ShiftCheck.load(choice)
        except ConfigError as exc:
            raise ConfigError(f"--context-fit-check: {exc}") from None
    return context_fit_for(args.context_fit, baselines=baselines, check=check)
