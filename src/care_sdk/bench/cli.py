"""``care bench quality``: the reward's agreement with people, on public data, for any backend.

Importing this module is light; the runner and the data loaders are imported when the command runs.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from care_sdk.variants import VARIANTS

__all__ = ["add_bench_commands"]

_TASK_NAMES = ("alignment", "pairwise", "experts", "success", "simulated")
_VARIANT_NAMES = (*VARIANTS, "length")


def _csv(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _slug(spec: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", spec).strip("_") or "backend"


def _cmd_quality(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from care_sdk import RubricEvaluator, RubricGenerator, resolve_backend
    from care_sdk.bench.quality import QualityRunner
    from care_sdk.bench.tasks import DataPaths, Settings, TaskData
    from care_sdk.data import data_dir

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
    shared = resolve_backend(args.backend)
    generator = RubricGenerator(
        resolve_backend(args.generator_backend) if args.generator_backend else shared, seed=args.seed
    )
    evaluator = RubricEvaluator(
        resolve_backend(args.evaluator_backend) if args.evaluator_backend else shared, seed=args.seed
    )
    spec = (
        args.backend
        if not (args.generator_backend or args.evaluator_backend)
        else (f"{args.generator_backend or args.backend}+{args.evaluator_backend or args.backend}")
    )
    out = Path(args.out) if args.out else Path("care-quality") / _slug(spec)
    runner = QualityRunner(generator, evaluator, out_dir=out, variants=args.variants, batch_size=args.batch_size)
    bar: Any = None

    def loaded(name: str, data: TaskData) -> None:
        print(
            f"care bench quality: {name}: {data.units} of {data.available} units, {len(data.items)} items",
            file=sys.stderr,
        )
        if data.issues:
            print(f"care bench quality: {name}: {len(data.issues)} data issue(s), e.g.:", file=sys.stderr)
            for issue in data.issues[:5]:
                print(f"    {issue}", file=sys.stderr)

    def start(total: int) -> None:
        nonlocal bar
        bar = tqdm(total=total, desc="scoring items", unit="item", file=sys.stderr, disable=args.quiet)

    try:
        report = runner.run(
            args.tasks, paths, settings, on_load=loaded, on_start=start, progress=lambda n: bar.update(n)
        )
    finally:
        if bar is not None:
            bar.close()
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


def add_bench_commands(subparsers: Any) -> None:
    """Register ``care bench quality`` and ``care bench robustness`` on the ``care`` command's subparsers.

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
    quality.add_argument(
        "--backend", default="default", help="backend spec for generator and evaluator (default: %(default)s)"
    )
    quality.add_argument("--generator-backend", help="backend spec for the rubric generator only")
    quality.add_argument("--evaluator-backend", help="backend spec for the evaluator only")
    quality.add_argument(
        "--limit", type=int, help="units per task (turns, judged turns, conversations, dialogues per class)"
    )
    quality.add_argument(
        "--max-turns", type=int, help="dialogue-level tasks: score at most this many supporter turns per dialogue"
    )
    quality.add_argument(
        "--tasks", type=_csv, default=_TASK_NAMES, help=f"comma-separated subset of {','.join(_TASK_NAMES)}"
    )
    quality.add_argument(
        "--variants", type=_csv, default=_VARIANT_NAMES, help=f"comma-separated subset of {','.join(_VARIANT_NAMES)}"
    )
    quality.add_argument(
        "--margin", type=float, default=1.0, help="pairwise: minimum judge-score gap of a pair (default: %(default)s)"
    )
    quality.add_argument(
        "--systems", type=_csv, default=(), help="pairwise: comma-separated judged systems to compare (default: all)"
    )
    quality.add_argument("--out", help="output directory (default: care-quality/<backend>); an existing run is resumed")
    quality.add_argument(
        "--data-dir", help="the data directory (default: $CARE_DATA_DIR; see the docs' data page for its layout)"
    )
    quality.add_argument("--esconv", help="ESConv file for alignment and success (default: esconv/test.jsonl)")
    quality.add_argument("--failed-esconv", help="FailedESConv.json (default: esconv/FailedESConv.json)")
    quality.add_argument("--lend-an-ear", help="the mint_lend_an_ear directory")
    quality.add_argument("--judged", help="judged responses JSONL (default: under mint_lend_an_ear/judged_turns)")
    quality.add_argument(
        "--sage", action="append", help="a SAGE rollout file (repeatable; default: all under sage_rlver)"
    )
    quality.add_argument("--batch-size", type=int, default=8, help="items per backend batch (default: %(default)s)")
    quality.add_argument(
        "--seed", type=int, default=0, help="selection, sampling and bootstrap seed (default: %(default)s)"
    )
    quality.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default: %(default)s)")
    quality.add_argument("--quiet", action="store_true", help="no progress bar")
    quality.set_defaults(func=_cmd_quality)

    from care_sdk.bench.robustness_cli import add_robustness_command

    add_robustness_command(sub)
