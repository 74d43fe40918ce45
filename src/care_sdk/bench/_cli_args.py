"""What the ``care bench`` commands share: backend and run options, the backends they name, a progress bar.

Importing this module is light: backends and ``tqdm`` are imported when a command runs.

Examples:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> add_backend_options(parser)
    >>> add_run_options(parser, out_dir="care-quality", batch_size=8, batch_unit="items per backend batch")
    >>> args = parser.parse_args(["--evaluator-backend", "openai:judge", "--seed", "3"])
    >>> args.backend, args.evaluator_backend, args.seed, args.batch_size
    ('default', 'openai:judge', 3, 8)
"""

from __future__ import annotations

import argparse
import re
import sys
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from care_sdk.backends.base import Backend

__all__ = [
    "ProgressBar",
    "add_backend_options",
    "add_context_fit_options",
    "add_run_options",
    "add_weight_reader_option",
    "context_fit_of",
    "csv_list",
    "resolve_backends",
    "slug",
    "weights_options",
]


def csv_list(value: str) -> tuple[str, ...]:
    """A comma-separated option value as a tuple, blanks dropped.

    Examples:
        >>> csv_list("empty, score_json,,")
        ('empty', 'score_json')
    """
    return tuple(part.strip() for part in value.split(",") if part.strip())


def slug(spec: str) -> str:
    """A backend spec as a directory name.

    Examples:
        >>> slug("openai:http://127.0.0.1:8080/v1")
        'openai_http_127.0.0.1_8080_v1'
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "_", spec).strip("_") or "backend"


def add_backend_options(cmd: argparse.ArgumentParser) -> None:
    """Add ``--backend`` (shared by generator and evaluator), ``--generator-backend`` and ``--evaluator-backend``.

    Examples:
        >>> parser = argparse.ArgumentParser()
        >>> add_backend_options(parser)
        >>> parser.parse_args([]).generator_backend is None
        True
    """
    cmd.add_argument(
        "--backend", default="default", help="backend spec for generator and evaluator (default: %(default)s)"
    )
    cmd.add_argument("--generator-backend", help="backend spec for the rubric generator only")
    cmd.add_argument("--evaluator-backend", help="backend spec for the evaluator only")


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
    :func:`~care_sdk.context_fit.context_fit_for`).

    The baseline names are :data:`~care_sdk.context_fit.BASELINE_NAMES` (see
    :func:`~care_sdk.context_fit.named_baselines`), each read with its bundled gate; the default is
    :data:`~care_sdk.context_fit.DEFAULT_BASELINES`. :func:`context_fit_of` turns the values into
    the reward's ``context_fit``.

    Examples:
        >>> from care_sdk.context_fit import DEFAULT_BASELINES
        >>> parser = argparse.ArgumentParser()
        >>> add_context_fit_options(parser)
        >>> args = parser.parse_args([])
        >>> args.context_fit, args.context_fit_baselines == DEFAULT_BASELINES, args.context_fit_check
        ('off', True, 'off')
    """
    from care_sdk.context_fit import BASELINE_NAMES, DEFAULT_BASELINES

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
    from care_sdk.context_fit import AUTO, context_fit_for, named_baselines
    from care_sdk.errors import ConfigError
    from care_sdk.shift_check import ShiftCheck

    baselines = named_baselines(args.context_fit_baselines, where="--context-fit-baselines")
    choice = args.context_fit_check.strip()
    check: ShiftCheck | str | None = AUTO if choice.lower() == AUTO else None
    if choice.lower() not in (AUTO, "off"):
        try:
            check = ShiftCheck.load(choice)
        except ConfigError as exc:
            raise ConfigError(f"--context-fit-check: {exc}") from None
    return context_fit_for(args.context_fit, baselines=baselines, check=check)


def add_run_options(cmd: argparse.ArgumentParser, *, out_dir: str, batch_size: int, batch_unit: str) -> None:
    """Add ``--out`` (default ``<out_dir>/<backend>``), ``--data-dir``, ``--batch-size``, ``--seed``,
    ``--resamples`` and ``--quiet``.

    Examples:
        >>> parser = argparse.ArgumentParser()
        >>> add_run_options(parser, out_dir="care-robustness", batch_size=4, batch_unit="contexts per batch")
        >>> args = parser.parse_args(["--quiet"])
        >>> args.quiet, args.resamples, args.out
        (True, 1000, None)
    """
    cmd.add_argument("--out", help=f"output directory (default: {out_dir}/<backend>); an existing run is resumed")
    cmd.add_argument(
        "--data-dir", help="the data directory (default: $CARE_DATA_DIR; see the docs' data page for its layout)"
    )
    cmd.add_argument("--batch-size", type=int, default=batch_size, help=f"{batch_unit} (default: %(default)s)")
    cmd.add_argument(
        "--seed", type=int, default=0, help="selection, sampling and bootstrap seed (default: %(default)s)"
    )
    cmd.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default: %(default)s)")
    cmd.add_argument("--quiet", action="store_true", help="no progress bar")


def resolve_backends(args: argparse.Namespace) -> tuple[Backend, Backend]:
    """The generator's and the evaluator's backends: each its own spec when given, else ``--backend``'s.

    ``default`` gives each component its bundled adapter; any other spec is loaded once and shared.

    Examples:
        >>> args = argparse.Namespace(backend="default", generator_backend=None, evaluator_backend=None)
        >>> generator, evaluator = resolve_backends(args)  # doctest: +SKIP
        >>> [b.identity.partition("+")[2] for b in (generator, evaluator)]  # doctest: +SKIP
        ['generator.gguf', 'evaluator.gguf']
    """
    from care_sdk.backends import BackendPool

    pool = BackendPool()
    generator = pool.get(args.generator_backend or args.backend, role="generator")
    evaluator = pool.get(args.evaluator_backend or args.backend, role="evaluator")
    return generator, evaluator


class ProgressBar:
    """A progress bar on stderr that opens when a run knows its total (``start``) and closes on exit.

    Examples:
        >>> with ProgressBar("scoring items", "item", quiet=True) as bar:
        ...     bar.start(3)
        ...     bar.update(2)
    """

    def __init__(self, desc: str, unit: str, *, quiet: bool) -> None:
        self.desc = desc
        self.unit = unit
        self.quiet = quiet
        self._bar: Any = None

    def start(self, total: int) -> None:
        """Open the bar for ``total`` steps."""
        from tqdm import tqdm

        self.close()
        self._bar = tqdm(total=total, desc=self.desc, unit=self.unit, file=sys.stderr, disable=self.quiet)

    def update(self, n: int) -> None:
        """Advance the bar by ``n`` steps."""
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        """Close the bar, if open."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
