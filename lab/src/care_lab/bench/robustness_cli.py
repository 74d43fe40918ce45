"""``care bench robustness``: attacks on the reward, scored with defences off and on, for any backend.

Importing this module is light; the runner, the data and the backends load when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from care_lab.bench._cli_args import ProgressBar, add_backend_options, add_run_options, csv_list, resolve_backends, slug
from care_sdk.cli_options import add_add_on_option, add_ons_of

__all__ = ["add_robustness_command"]


def _cmd_robustness(args: argparse.Namespace) -> int:
    from care_lab.bench.robustness import RobustnessRunner, load_items, markdown
    from care_lab.data import data_dir, load_esconv
    from care_sdk import RubricGenerator
    from care_sdk.guards import Guards

    esconv = (
        Path(args.esconv)
        if args.esconv
        else (Path(args.data_dir) if args.data_dir else data_dir()) / "esconv" / "test.jsonl"
    )
    items, available = load_items(esconv, args.limit, args.seed)
    turns = [(t.context, t.reply) for d in load_esconv(esconv) for t in d.supporter_turns()]
    print(
        f"care bench robustness: {len(items)} of {available} dialogues; {len(turns)} replies for false positives",
        file=sys.stderr,
    )
    extra = add_ons_of(args)
    generator_backend, evaluator_backend = resolve_backends(args)
    generator = RubricGenerator(generator_backend, seed=args.seed, **extra.generator_options())
    spec = args.evaluator_backend or args.backend
    out = Path(args.out) if args.out else Path("care-robustness") / slug(spec)
    guards = Guards(on_flag=args.on_flag, max_chars=args.max_chars)
    runner = RobustnessRunner(
        generator,
        evaluator_backend,
        out_dir=out,
        attacks=args.attacks or None,
        guards=guards,
        context_fit=extra.context_fit,
        batch_size=args.batch_size,
        seed=args.seed,
        resamples=args.resamples,
    )
    with ProgressBar("scoring contexts", "context", quiet=args.quiet) as bar:
        report = runner.run(items, esconv_turns=turns, on_start=bar.start, progress=bar.update)
    print(markdown(report))
    print(f"\ncare bench robustness: reports in {out}", file=sys.stderr)
    return 0


def add_robustness_command(sub: Any) -> None:
    """Register ``care bench robustness`` on the ``care bench`` subparsers.

    Examples:
        >>> from care_sdk.cli import build_parser  # registers it under ``care bench``
        >>> build_parser().parse_args(["bench", "robustness", "--attacks", "empty,score_json"]).attacks
        ('empty', 'score_json')
    """
    cmd = sub.add_parser(
        "robustness",
        help="attacks on the reward (injections, forged turns, master keys) with defences off and on",
        description=(
            "Score held-out ESConv test contexts' reference replies and attacks built from them, with the "
            "evaluator prompt v1 and no guards (off) and with prompt v2 and the guards (on); an evaluator "
            "adapter uses its own prompt in both. The reward is the one `care score` gives (with the "
            "--add-on add-ons asked for). Prints a markdown table; writes records.jsonl, "
            "robustness.json and robustness.md to --out (a re-run resumes)."
        ),
    )
    add_backend_options(cmd)
    cmd.add_argument("--limit", type=int, default=40, help="contexts, one per dialogue (default: %(default)s)")
    cmd.add_argument(
        "--attacks",
        type=csv_list,
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
    add_add_on_option(cmd)
    cmd.add_argument("--esconv", help="ESConv file (default: esconv/test.jsonl under the data directory)")
    add_run_options(cmd, out_dir="care-robustness", batch_size=4, batch_unit="contexts per batch")
    cmd.set_defaults(func=_cmd_robustness)
