"""``care bench contrast``: does a reward rank the real reply above replies any judge must rank lower?

For any backend: the rule's ESConv sample (:func:`care_lab.bench.contrast_run.esconv_items`, a file
read for selection), each context's real reply against one reply of every family
(:mod:`care_lab.bench.contrast`), scored by the reward the options build (the backend's own formula:
the bundled ``default`` with its context fit). Prints one line per reward and baseline (reply length,
feeling words) and writes ``contrast.json`` beside the records in ``--out``; a rerun resumes.

Importing this module is light; the data and the backends load when the command runs.

Examples:
    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> add_contrast_command(parser.add_subparsers(dest="bench_command"))
    >>> parser.parse_args(["contrast", "--limit", "5"]).limit
    5
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from care_lab.bench._cli_args import add_backend_options, add_run_options, resolve_backends, slug
from care_sdk.cli_options import add_add_on_option, add_ons_of

__all__ = ["add_contrast_command", "format_summary"]


def format_summary(summary: dict[str, Any]) -> str:
    """One line per reward: the smallest family share, the all-tie share, then each family's share.

    Examples:
        >>> row = {"n": 2, "worst": 0.5, "all_tie": {"value": 0.0}, "families": {"one_word": {"value": 0.5}}}
        >>> format_summary({"reward": row})
        'reward          n=2    worst 0.50  ties 0.00  one_word 0.50'
    """
    lines = []
    for name, row in summary.items():
        shares = "  ".join(f"{f} {v['value']:.2f}" for f, v in row["families"].items() if v["value"] is not None)
        worst = "n/a" if row["worst"] is None else f"{row['worst']:.2f}"
        ties = row["all_tie"]["value"]
        lines.append(f"{name:14s}  n={row['n']:<4d} worst {worst}  ties {0.0 if ties is None else ties:.2f}  {shares}")
    return "\n".join(lines)


def _cmd_contrast(args: argparse.Namespace) -> int:
    from care_lab.bench.contrast import summarise
    from care_lab.bench.contrast_run import esconv_items, merge_records, reward_scorer, score_arm
    from care_lab.data import data_dir
    from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator

    data = (
        Path(args.data) if args.data else (Path(args.data_dir) if args.data_dir else data_dir()) / "esconv/valid.jsonl"
    )
    items = esconv_items(data, args.limit)
    extra = add_ons_of(args)
    generator_backend, evaluator_backend = resolve_backends(args)
    reward = AdaptiveReward(
        RubricGenerator(generator_backend, seed=args.seed, **extra.generator_options()),
        RubricEvaluator(evaluator_backend, seed=args.seed),
        context_fit=extra.context_fit,
    )
    out = Path(args.out) if args.out else Path("care-contrast") / slug(args.evaluator_backend or args.backend)

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    records = score_arm("reward", items, out, progress=progress, scorer=reward_scorer(reward))
    merged = merge_records(items, {"reward": records}, {})
    summary = summarise(merged, ["reward", "length", "feeling_words"], resamples=args.resamples)
    (out / "contrast.json").write_text(
        json.dumps(
            {"data": str(data), "contexts": len(items), "parts": list(reward.parts), "summary": summary}, indent=2
        )
        + "\n",
        encoding="utf-8",
    )
    print(format_summary(summary))
    print(
        f"\ncare bench contrast: {len(items)} contexts, reward parts {reward.parts}; records in {out}", file=sys.stderr
    )
    return 0


def add_contrast_command(sub: Any) -> None:
    """Register ``care bench contrast`` on the ``care bench`` subparsers."""
    contrast = sub.add_parser(
        "contrast",
        help="the real reply against worse replies (dismissive, one word, another conversation's, harmful, ...)",
        description=(
            "Score each context's real reply and one reply of each family any judge must rank lower "
            "(dismissive, platitude, bare question, one word, another conversation's reply, an echo, "
            "off-topic advice, harm-validating, another language) with the reward of --backend; print, per "
            "family, the share of contexts where the real reply scores strictly above it, beside reply length "
            "and a feeling-word count. Writes the records and contrast.json to --out; a rerun resumes."
        ),
    )
    add_backend_options(contrast)
    add_add_on_option(contrast)
    contrast.add_argument("--data", help="an ESConv JSONL file read for selection (default: esconv/valid.jsonl)")
    contrast.add_argument("--limit", type=int, default=30, help="contexts, in the rule's order (default: %(default)s)")
    add_run_options(contrast, out_dir="care-contrast", batch_size=None)  # one batch a context: its replies
    contrast.set_defaults(func=_cmd_contrast)
