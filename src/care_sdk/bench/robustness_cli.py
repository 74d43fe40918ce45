"""``care bench robustness``: attacks on the reward, scored with defences off and on, for any backend.

Importing this module is light; the runner, the data and the backends load when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from care_sdk.bench.cli import _csv, _slug

__all__ = ["add_robustness_command"]


def _cmd_robustness(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from care_sdk import RubricGenerator, resolve_backend
    from care_sdk.bench.robustness import RobustnessRunner, load_items, markdown
    from care_sdk.data import data_dir, load_esconv
    from care_sdk.guards import Guards

    esconv = (
        Path(args.esconv)
        if args.esconv
        else (Path(args.data_dir) if args.data_dir else data_dir()) / "esconv" / "test.jsonl"
    )
    items, available = load_items(esconv, args.limit, args.seed)
    replies = [t.reply for d in load_esconv(esconv) for t in d.supporter_turns()]
    print(
        f"care bench robustness: {len(items)} of {available} dialogues; {len(replies)} replies for false positives",
        file=sys.stderr,
    )
    shared = resolve_backend(args.backend)
    generator = RubricGenerator(
        resolve_backend(args.generator_backend) if args.generator_backend else shared, seed=args.seed
    )
    evaluator_backend = resolve_backend(args.evaluator_backend) if args.evaluator_backend else shared
    spec = args.evaluator_backend or args.backend
    out = Path(args.out) if args.out else Path("care-robustness") / _slug(spec)
    guards = Guards(on_flag=args.on_flag, max_chars=args.max_chars)
    runner = RobustnessRunner(
        generator,
        evaluator_backend,
        out_dir=out,
        attacks=args.attacks or None,
        guards=guards,
        batch_size=args.batch_size,
        seed=args.seed,
        resamples=args.resamples,
    )
    bar: Any = None

    def start(total: int) -> None:
        nonlocal bar
        bar = tqdm(total=total, desc="scoring contexts", unit="context", file=sys.stderr, disable=args.quiet)

    try:
        report = runner.run(items, esconv_replies=replies, on_start=start, progress=lambda n: bar.update(n))
    finally:
        if bar is not None:
            bar.close()
    print(markdown(report))
    print(f"\ncare bench robustness: reports in {out}", file=sys.stderr)
    return 0


def add_robustness_command(sub: Any) -> None:
    """Register ``care bench robustness`` on the ``care bench`` subparsers.

    Examples:
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> add_robustness_command(parser.add_subparsers(dest="bench_command"))
        >>> parser.parse_args(["robustness", "--limit", "5", "--attacks", "empty,score_json"]).attacks
        ('empty', 'score_json')
    """
    cmd = sub.add_parser(
        "robustness",
        help="attacks on the reward (injections, forged turns, master keys) with defences off and on",
        description=(
            "Score held-out ESConv test contexts' reference replies and attacks built from them, with the "
            "evaluator prompt v1 and no guards (off) and with prompt v2 and the guards (on). Prints a markdown "
            "table; writes records.jsonl, robustness.json and robustness.md to --out (a re-run resumes)."
        ),
    )
    cmd.add_argument(
        "--backend", default="default", help="backend spec for generator and evaluator (default: %(default)s)"
    )
    cmd.add_argument("--generator-backend", help="backend spec for the rubric generator only")
    cmd.add_argument("--evaluator-backend", help="backend spec for the evaluator only")
    cmd.add_argument("--limit", type=int, default=40, help="contexts, one per dialogue (default: %(default)s)")
    cmd.add_argument(
        "--attacks",
        type=_csv,
        help="comma-separated attack names (default: all)",
    )
    cmd.add_argument(
        "--on-flag",
        choices=["zero", "penalise", "report"],
        default="zero",
        help="what the defended view does with a flagged reply (default: %(default)s)",
    )
    cmd.add_argument(
        "--max-chars", type=int, default=2000, help="longest reply the evaluator sees (default: %(default)s)"
    )
    cmd.add_argument("--out", help="output directory (default: care-robustness/<backend>); an existing run is resumed")
    cmd.add_argument("--data-dir", help="the shared data directory (default: $CARE_DATA_DIR or ../shared/data)")
    cmd.add_argument("--esconv", help="ESConv file (default: esconv/test.jsonl under the data directory)")
    cmd.add_argument("--batch-size", type=int, default=4, help="contexts per batch (default: %(default)s)")
    cmd.add_argument(
        "--seed", type=int, default=0, help="selection, sampling and bootstrap seed (default: %(default)s)"
    )
    cmd.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default: %(default)s)")
    cmd.add_argument("--quiet", action="store_true", help="no progress bar")
    cmd.set_defaults(func=_cmd_robustness)
