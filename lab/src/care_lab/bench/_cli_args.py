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
    "add_run_options",
    "csv_list",
    "resolve_backends",
    "slug",
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


def add_run_options(
    cmd: argparse.ArgumentParser, *, out_dir: str, batch_size: int | None, batch_unit: str = ""
) -> None:
    """Add ``--out`` (default ``<out_dir>/<backend>``), ``--data-dir``, ``--batch-size`` (not for a command
    whose batches are fixed: ``batch_size=None``), ``--seed``, ``--resamples`` and ``--quiet``.

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
    if batch_size is not None:
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
