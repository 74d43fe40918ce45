"""Length balance of the Lend-an-Ear best/worst pairs that ``care train build-data`` trains on.

The MINT judge favours longer replies, so its best-vs-worst pairs teach length unless they are
balanced. This builds the Lend-an-Ear pairs of the train conversations exactly as build-data does
(no model is called), with and without ``mint_max_length_ratio``, and writes their balance: the
share of pairs whose chosen reply is the longer (characters) and the median lengths; and where the
judge ranks the human supporter's reply among the replies to the same turn.

Usage:
    CARE_DATA_DIR=../shared/data python benchmarks/bench_pair_lengths.py [--out benchmarks/results/pair_lengths.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from care_lab.data import data_dir, default_strategy_map, load_judged_turns
from care_lab.data.judged_pairs import HUMAN_SYSTEMS
from care_lab.data.mint import JudgedResponse
from care_lab.data.records import SupportDialogue
from care_lab.data.results import write_results
from care_lab.training.build_data import _load
from care_lab.training.build_report import BuildReport
from care_lab.training.config import BuildDataConfig
from care_lab.training.pairs import length_balance, mint_pairs
from care_lab.training.targets import BuildContext
from care_sdk.backends import BackendPool

JUDGED = Path("mint_lend_an_ear") / "judged_turns" / "judged_turn_responses_gold_and_qwen3-4b_systems.jsonl"


def _config(**settings: Any) -> BuildDataConfig:
    return BuildDataConfig(
        output_dir="unused", esconv_splits=(), teacher=None, target_judges=None, annotator=None, **settings
    )


def train_data() -> tuple[list[tuple[SupportDialogue, str]], list[JudgedResponse]]:
    """The train conversations (as build-data loads them) and the judged replies, read once."""
    dialogues = [(d, split) for d, split in _load(_config(), default_strategy_map(), BuildReport()) if split == "train"]
    return dialogues, load_judged_turns(data_dir() / JUDGED).records


def balance(
    ratio: float | None, pairs_per_turn: int, dialogues: list[tuple[SupportDialogue, str]], judged: list[JudgedResponse]
) -> dict[str, float]:
    """The train conversations' pairs at this length ratio (``None``: no limit)."""
    config = _config(max_pairs_per_turn=pairs_per_turn, mint_max_length_ratio=ratio)
    mapping, report = default_strategy_map(), BuildReport()
    pairs = mint_pairs(dialogues, judged, BuildContext(config, mapping, BackendPool(), report, lambda s: None))
    out = length_balance(pairs).get("mint-judge", {"pairs": 0})
    out["dropped for length"] = report.pairs["mint: dropped (length ratio above mint_max_length_ratio)"]
    return out


def human_ranks(dialogues: list[tuple[SupportDialogue, str]], judged: list[JudgedResponse]) -> dict[str, int]:
    """Over the judged turns of the train conversations: how many replies the judge scores strictly
    above the human supporter's, as counts of turns (bottom half: more than half of the others above it)."""
    train = {d.id for d, _ in dialogues}
    turns: dict[tuple[str, int], list[tuple[str, float]]] = {}
    for response in judged:
        if response.conversation_id in train:
            turns.setdefault((response.conversation_id, response.turn_index), []).append(
                (response.system, response.aggregated_empathy)
            )
    out = {"turns with a human reply": 0, "human reply in the bottom half": 0, "human reply first": 0}
    for replies in turns.values():
        human = [score for system, score in replies if system in HUMAN_SYSTEMS]
        if not human:
            continue
        above = sum(score > human[0] for system, score in replies if system not in HUMAN_SYSTEMS)
        others = len(replies) - 1
        out["turns with a human reply"] += 1
        out["human reply in the bottom half"] += above > others / 2
        out["human reply first"] += above == 0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/pair_lengths.json"))
    parser.add_argument("--pairs-per-turn", type=int, default=2, help="max_pairs_per_turn (the paper config's 2)")
    args = parser.parse_args()
    dialogues, judged = train_data()
    metrics: dict[str, dict[str, float]] = {
        f"max length ratio {r}": balance(r, args.pairs_per_turn, dialogues, judged) for r in (None, 3.0, 2.0, 1.5)
    }
    metrics["human reply rank"] = {k: float(v) for k, v in human_ranks(dialogues, judged).items()}
    for name, row in metrics.items():
        print(f"{name:24s} {row}")
    write_results(
        args.out,
        " ".join(["python benchmarks/bench_pair_lengths.py", *sys.argv[1:]]),
        data="mint_lend_an_ear judged_turns, train conversations (lend_an_ear_role train)",
        role="train",
        test_reads=0,
        metrics=metrics,
        baselines={"balanced": {"chosen longer": 0.5}},
        extra={"max_pairs_per_turn": args.pairs_per_turn},
    )


if __name__ == "__main__":
    main()
