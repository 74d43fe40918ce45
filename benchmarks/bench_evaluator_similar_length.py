"""An evaluator trained where length is not the lesson, screened on a selection set (not shipped).

The bundled evaluator orders the MINT judge's pairs of replies of similar length at chance,
though a count of feeling words orders them 0.84 (``bench_surface_cues.py``): what it learned from
the judged replies is mostly that the judge prefers the longer one. This experiment trains the
same recipe on data where length says less: the Lend-an-Ear part keeps only the judged replies
that have a partner of similar length (:func:`care_lab.bench.metrics.similar_length`) in their
turn that the judge scores at least 1 apart, and 8 of the 41 train conversations (seeded) are
left out of it as a selection set. The ESConv part is the shipped recipe's, as many records as
Lend-an-Ear ones.

Stages (run in this order; each writes under ``--out``):

- ``data``: ``care train build-data`` with ``training/configs/evaluator_data.yaml``, then the
  filter; writes ``data/sft/train.jsonl`` and ``selection_conversations.json``.
- then, outside this script, the shipped recipe on that data and its export::

      care train sft --config training/configs/evaluator_sft_similar_length.yaml
      care train export-adapter --config training/configs/evaluator_sft_similar_length.yaml

- ``rubrics``: the bundled generator's rubric for every judged turn of the selection set.
- ``score``: the rubric-only reward's scores of every reply there (all twelve judged systems),
  by the bundled evaluator, or with ``--adapter FILE`` by that adapter; ``--shard K/N`` splits
  the turns between processes.
- ``report``: the share of the judge's pairs ordered (all pairs, pairs of similar length; greedy
  and logprob-expected scores), beside reply length and the count of feeling words of
  ``bench_surface_cues.py``, with 95 % bootstrap intervals over turns.
  The bundled evaluator was trained on the selection conversations, so its rows are optimistic.

Usage:
    python benchmarks/bench_evaluator_similar_length.py data --out runs/evaluator_similar_length
    python benchmarks/bench_evaluator_similar_length.py rubrics --out runs/evaluator_similar_length
    python benchmarks/bench_evaluator_similar_length.py score --shard 1/2 --out runs/evaluator_similar_length \\
        --adapter runs/evaluator_similar_length/sft/evaluator.gguf      # and --shard 2/2; again without --adapter
    python benchmarks/bench_evaluator_similar_length.py report --out runs/evaluator_similar_length
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import bench_evaluator as be
from _evaluator_items import items as evaluator_items
from _evaluator_metrics import metrics, row_rewards
from bench_surface_cues import CUES

from care_lab.bench.metrics import similar_length
from care_lab.data import data_dir, lend_an_ear_split
from care_lab.data.mint import load_judged_turns
from care_lab.training.build_data import build_data
from care_lab.training.config import BuildDataConfig, load_config

SELECTION_CONVERSATIONS = 8
SELECTION_SEED = 7
JUDGED = "mint_lend_an_ear/judged_turns/judged_turn_responses_gold_and_qwen3-4b_systems.jsonl"


def make_data(out: Path, esconv_per_judged: float = 1.0) -> None:
    """Build the shipped recipe's data under ``out/data_full``, then the experiment's under ``out/data``
    (``esconv_per_judged`` ESConv records per Lend-an-Ear one)."""
    full = out / "data_full"
    build_data(load_config(BuildDataConfig, "training/configs/evaluator_data.yaml", {"output_dir": str(full)}))
    judged = load_judged_turns(data_dir() / JUDGED).records
    train = sorted({r.conversation_id for r in judged if lend_an_ear_split(r.conversation_id) == "train"})
    selection = sorted(random.Random(SELECTION_SEED).sample(train, SELECTION_CONVERSATIONS))
    (out / "selection_conversations.json").write_text(json.dumps(selection), encoding="utf-8")
    by_turn = defaultdict(list)
    for r in judged:
        by_turn[(r.conversation_id, r.turn_index)].append(r)
    paired = {
        (a.conversation_id, a.turn_index, a.system)
        for group in by_turn.values()
        for a in group
        for b in group
        if a is not b
        and similar_length(a.response, b.response)
        and abs(a.aggregated_empathy - b.aggregated_empathy) >= 1
    }
    lines = (full / "sft" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    judged_kept = [
        r
        for r in records
        if r["source"] == "lend-an-ear"
        and r["dialogue_id"] not in selection
        and (r["dialogue_id"], r["turn_index"], r["kind"].split(":", 1)[1]) in paired
    ]
    esconv = [r for r in records if r["source"] != "lend-an-ear"][: round(esconv_per_judged * len(judged_kept))]
    kept = esconv + judged_kept
    random.Random("0:train").shuffle(kept)
    sft = out / "data" / "sft"
    sft.mkdir(parents=True, exist_ok=True)
    (sft / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    (sft / "valid.jsonl").write_text((full / "sft" / "valid.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    (out / "data" / "roles.json").write_text((full / "roles.json").read_text(encoding="utf-8"), encoding="utf-8")
    print(f"selection conversations: {len(selection)}; judged records kept: {len(judged_kept)}; records: {len(kept)}")


def selection_items(out: Path) -> list[dict[str, Any]]:
    """The judged replies (all twelve systems) of the selection conversations."""
    selection = set(json.loads((out / "selection_conversations.json").read_text(encoding="utf-8")))
    every = evaluator_items(0, 1, tasks=("lend-an-ear",), lend_an_ear="train", all_systems=True)
    return [it for it in every if it["conversation"] in selection]


def report(out: Path, items: list[dict[str, Any]], resamples: int) -> str:
    """The table of the ``report`` stage."""
    rubric_of = be._cache(out / "rubrics_default.jsonl")
    rows: list[tuple[str, dict[str, float | None]]] = []
    for name, label in (("default", "bundled evaluator"), ("compare", "similar-length evaluator")):
        evals: dict[str, Any] = {}
        for shard in sorted(out.glob("shard*")):
            evals.update(be._cache(shard / f"evals_{name}_default_generated.jsonl"))
        for how in ("sampled", "expected"):
            if evals:
                rewards = row_rewards(items, rubric_of, evals, how, "rubric", "generated")
                rows.append((f"{label}, {'greedy' if how == 'sampled' else 'expected'} scores", rewards))
    for cue in ("words", "feeling words"):
        rows.append((f"count of {cue}", {it["key"]: CUES[cue](it["reply"]) for it in items}))
    keys = ("lae pairwise", "lae pairwise, similar length", "lae spearman with length")
    lines = ["| row | all pairs | pairs of similar length | Spearman with length |", "|---|---|---|---|"]
    for label, rewards in rows:
        result = metrics(items, rewards, resamples)
        cells = [result[k].format() if k in result else "" for k in keys]
        lines.append(f"| {label} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("stage", choices=("data", "rubrics", "score", "report"))
    parser.add_argument("--out", type=Path, default=Path("runs/evaluator_similar_length"))
    parser.add_argument("--adapter", help="an evaluator adapter file to score with instead of the bundled one")
    parser.add_argument("--shard", default="1/1", help="K/N: this process scores every N-th turn from the K-th")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument(
        "--esconv-per-judged", type=float, default=1.0, help="data: ESConv records per Lend-an-Ear one (0: none)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.stage == "data":
        make_data(args.out, args.esconv_per_judged)
        return
    items = selection_items(args.out)
    if args.stage == "rubrics":
        be.rubrics("default", items, args.out)
    elif args.stage == "score":
        k, n = (int(x) for x in args.shard.split("/"))
        groups = sorted({it["group"] for it in items})
        mine = {g for i, g in enumerate(groups) if i % n == k - 1}
        shard = args.out / f"shard{k}"
        shard.mkdir(exist_ok=True)
        rubric_of = be.rubrics("default", items, args.out)
        mine_items = [it for it in items if it["group"] in mine]
        be.evaluations("default", "default", "generated", mine_items, shard, rubric_of, adapter=args.adapter)
    else:
        text = report(args.out, items, args.resamples)
        print(text)
        (args.out / "results.md").write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
