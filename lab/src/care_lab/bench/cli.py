"""``care bench quality``: the reward's agreement with people, on public data, for any backend.

Importing this module is light; the runner and the data loaders are imported when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from care_lab.bench._cli_args import ProgressBar, add_backend_options, add_run_options, csv_list, resolve_backends, slug
from care_sdk.cli_options import add_add_on_option, add_ons_of
from care_sdk.variants import VARIANTS

if TYPE_CHECKING:
    from care_lab.bench.variants import VariantScorer

__all__ = ["add_bench_commands"]

_TASK_NAMES = ("alignment", "pairwise", "experts", "success", "simulated")
_VARIANT_NAMES = (*VARIANTS, "length")


def _cmd_quality(args: argparse.Namespace) -> int:
    from care_lab.bench.quality import QualityRunner
    from care_lab.bench.tasks import DataPaths, Settings, TaskData
    from care_lab.data import data_dir
    from care_sdk import RubricEvaluator, RubricGenerator

    for name, values, valid in (("task", args.tasks, _TASK_NAMES), ("variant", args.variants, _VARIANT_NAMES)):
        bad = [v for v in values if v not in valid]
        if bad:
            print(
                f"care bench quality: unknown {name} {', '.join(bad)}; choose from {', '.join(valid)}", file=sys.stderr
            )
            return 2
    root = data_dir(args.data_dir)  # a ConfigError that says where to get the data, when unset
    paths = DataPaths(
        root=root,
        esconv=Path(args.esconv) if args.esconv else None,
        failed_esconv=Path(args.failed_esconv) if args.failed_esconv else None,
        lend_an_ear=Path(args.lend_an_ear) if args.lend_an_ear else None,
        judged=Path(args.judged) if args.judged else None,
        sage=tuple(Path(p) for p in args.sage or ()),
    )
    settings = Settings(
        limit=args.limit,
        max_turns=args.max_turns,
        margin=args.margin,
        systems=args.systems,
        seed=args.seed,
        resamples=args.resamples,
    )
    extra = add_ons_of(args)
    generator_backend, evaluator_backend = resolve_backends(args)
    generator = RubricGenerator(generator_backend, seed=args.seed, **extra.generator_options())
    evaluator = RubricEvaluator(evaluator_backend, seed=args.seed)
    spec = (
        args.backend
        if not (args.generator_backend or args.evaluator_backend)
        else (f"{args.generator_backend or args.backend}+{args.evaluator_backend or args.backend}")
    )
    out = Path(args.out) if args.out else Path("care-quality") / slug(spec)
    runner = QualityRunner(
        generator,
        evaluator,
        out_dir=out,
        variants=args.variants,
        batch_size=args.batch_size,
        context_fit=extra.context_fit,
        score_batches=None if args.ray is None else _ray_batches(args),
    )

    def loaded(name: str, data: TaskData) -> None:
        print(
            f"care bench quality: {name}: {data.units} of {data.available} units, {len(data.items)} items",
            file=sys.stderr,
        )
        if data.issues:
            print(f"care bench quality: {name}: {len(data.issues)} data issue(s), e.g.:", file=sys.stderr)
            for issue in data.issues[:5]:
                print(f"    {issue}", file=sys.stderr)

    with ProgressBar("scoring items", "item", quiet=args.quiet) as bar:
        report = runner.run(args.tasks, paths, settings, on_load=loaded, on_start=bar.start, progress=bar.update)
    print(report.markdown())
    print(
        f"\ncare bench quality: {report.scored} items scored, {report.reused} reused; reports in {out}", file=sys.stderr
    )
    missing = sum(sum(r.failed.values()) for r in report.results)
    if missing:
        print(
            f"care bench quality: {missing} item results missing (errors are in {out / 'records.jsonl'})",
            file=sys.stderr,
        )
        return 1
    return 0


@dataclass(frozen=True)
class _ScorerFromArgs:
    """Builds the run's :class:`VariantScorer` from its options, in a Ray actor: one thread per model."""

    args: argparse.Namespace

    def __call__(self) -> VariantScorer:
        from care_lab.bench.variants import VariantScorer
        from care_sdk import RubricEvaluator, RubricGenerator
        from care_sdk.ray_scoring import one_thread

        args = self.args
        extra = add_ons_of(args)
        generator = RubricGenerator(
            one_thread(args.generator_backend or args.backend, "generator"),
            seed=args.seed,
            **extra.generator_options(),
        )
        evaluator = RubricEvaluator(one_thread(args.evaluator_backend or args.backend, "evaluator"), seed=args.seed)
        return VariantScorer(generator, evaluator, args.variants, extra.context_fit)


def _ray_batches(args: argparse.Namespace) -> Any:
    from care_lab.bench.ray_items import ray_item_batches

    return ray_item_batches(
        _ScorerFromArgs(args),
        address=None if args.ray == "local" else args.ray,
        workers=args.ray_workers,
        batch_size=args.batch_size,
    )


def add_bench_commands(subparsers: Any) -> None:
    """Register ``care bench quality``, ``care bench robustness`` and ``care bench contrast`` on the ``care``
    command's subparsers.

    Examples:
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> add_bench_commands(parser.add_subparsers(dest="command"))
        >>> parser.parse_args(["bench", "quality", "--limit", "5"]).limit
        5
    """
    bench = subparsers.add_parser("bench", help="benchmarks of reward quality")
    sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    quality = sub.add_parser(
        "quality",
        help="agreement with people on public data: five tasks, five variants side by side",
        description=(
            "Run the quality tasks (priority alignment on ESConv, pairwise preference vs the MINT judge, "
            "expert agreement on Lend-an-Ear, ESConv success vs failure, SAGE simulated-user signal) for "
            "full CARE, uniform weights, fixed criteria, a fixed rubric and a length-only baseline. "
            "Prints a markdown table; writes records.jsonl, quality.json and quality.md to --out. "
            "A re-run with the same --out reuses finished items."
        ),
    )
    add_backend_options(quality)
    quality.add_argument(
        "--limit", type=int, help="units per task (turns, judged turns, conversations, dialogues per class)"
    )
    quality.add_argument(
        "--max-turns", type=int, help="dialogue-level tasks: score at most this many supporter turns per dialogue"
    )
    quality.add_argument(
        "--tasks", type=csv_list, default=_TASK_NAMES, help=f"comma-separated subset of {','.join(_TASK_NAMES)}"
    )
    quality.add_argument(
        "--variants",
        type=csv_list,
        default=_VARIANT_NAMES,
        help=f"comma-separated subset of {','.join(_VARIANT_NAMES)}",
    )
    add_add_on_option(quality)
    quality.add_argument(
        "--margin", type=float, default=1.0, help="pairwise: minimum judge-score gap of a pair (default: %(default)s)"
    )
    quality.add_argument(
        "--systems",
        type=csv_list,
        default=(),
        help="pairwise: comma-separated judged systems to compare (default: all)",
    )
    quality.add_argument("--esconv", help="ESConv file for alignment and success (default: esconv/test.jsonl)")
    quality.add_argument("--failed-esconv", help="FailedESConv.json (default: esconv/FailedESConv.json)")
    quality.add_argument("--lend-an-ear", help="the mint_lend_an_ear directory")
    quality.add_argument("--judged", help="judged responses JSONL (default: under mint_lend_an_ear/judged_turns)")
    quality.add_argument(
        "--sage", action="append", help="a SAGE rollout file (repeatable; default: all under sage_rlver)"
    )
    quality.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="score the items on a Ray cluster with Ray Data (needs care-sdk[ray]): 'auto' (the cluster this "
        "machine belongs to), 'local' (start one here) or the cluster's address; records are kept by this process",
    )
    quality.add_argument(
        "--ray-workers",
        type=int,
        default=2,
        help="with --ray: actors, one CPU and one model each (default: %(default)s)",
    )
    add_run_options(quality, out_dir="care-quality", batch_size=8, batch_unit="items per backend batch")
    quality.set_defaults(func=_cmd_quality)

    from care_lab.bench.contrast_cli import add_contrast_command
    from care_lab.bench.robustness_cli import add_robustness_command

    add_robustness_command(sub)
    add_contrast_command(sub)
