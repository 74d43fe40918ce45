"""The bundled generator's recipe with target weights that lean on a reader of the context instead of the position.

The bundled generator's target weights are half the reference reply's strategy counts and half the
turn-position prior (``position_prior_weight: 0.5``): beyond one noisy reply, the position is all
the targets teach, and the trained generator lands on the prior. ``bench_context_probe.py`` found a
linear probe on the model's own layer-15 states of what the generator reads that beats the prior
on ESConv test (+0.021 [0.003, 0.042]). This experiment keeps the recipe and swaps the prior for
that probe: each train turn's target weights become half its count weights and half the probe's
prediction for it, **cross-fitted** (five folds by dialogue: a turn's prediction comes from a probe
that never saw its dialogue), so the weights vary with the context in a way a reader of this model
can follow. Valid turns get the probe trained on all of train. Test is never read.

Steps (each resumable):

1. ``care train build-data --config training/configs/generator_data.yaml`` (the shipped data);
2. ``python benchmarks/bench_context_probe.py`` (the hidden states, in ``runs/context_probe``);
3. ``python benchmarks/bench_generator_probe_targets.py`` rewrites the target weights into
   ``runs/generator_probe_targets/data`` (criteria unchanged; a target whose new weights come
   out near-uniform is dropped, as build-data drops them; a turn the shipped build dropped stays
   out);
4. ``care train sft --config training/configs/generator_sft_probe_targets.yaml`` (the shipped SFT
   config with this data) and ``care train export-adapter`` with the same config;
5. ``python benchmarks/bench_generator.py --turns 800 --base-turns 0 --agreement 0 --out
   runs/generator_probe_targets/bench --adapter "probe targets=runs/generator_probe_targets/sft/generator.gguf"``
   (copy the full run's ``rubrics_shipped*.jsonl`` there first: the shipped rows are reused).

Measured: 65 minutes of SFT on two threads (loss 2.54 -> 0.13); on 800 seeded test turns it matches
0.520, the prior 0.519 (paired +0.001 [-0.015, 0.017]), the shipped generator 0.516. Not shipped.

``--targets ranked`` (with ``--out runs/generator_probe_ranked/data`` and
``training/configs/generator_sft_probe_ranked.yaml``) drops the count weights too: each target's
weights are the probe's order of the three dimensions alone, 0.6 / 0.3 / 0.1, so the target's top
dimension is the probe's everywhere (never near-uniform, so no turn is dropped for it).

Usage:
    python benchmarks/bench_generator_probe_targets.py [--data runs/generator_data] \
        [--states runs/context_probe] [--out runs/generator_probe_targets/data] [--targets mix|ranked]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from collections import Counter
from pathlib import Path

import torch
from bench_context_probe import _soft_labels, features, scale_of
from bench_context_signal import VISIBLE, _annotated, _turns

from care_lab.data import data_dir, default_strategy_map, load_esconv
from care_lab.training.roles import require_role
from care_lab.training.targets import count_weights
from care_lab.training.weights_head import fit_logistic, probabilities
from care_sdk.prompts import generator_position, parse_rubric, rubric_reply_json
from care_sdk.rubric_checks import check_rubric
from care_sdk.types import DIMENSIONS, Dimension, Rubric

FEATURE = "middle mean"
"""The reader ``bench_context_probe.py`` chose on valid (layer 15, mean over tokens, + position)."""
PENALTY = 0.1
"""Its L2 penalty, chosen on valid."""
PROBE_WEIGHT = 0.5
"""The probe's share of the target weights in ``--targets mix`` (the shipped recipe's ``position_prior_weight``)."""
RANKED = (0.6, 0.3, 0.1)
"""``--targets ranked``: the weights of the probe's first, second and third dimension."""
FOLDS = 5


def predictions(
    states_dir: Path, splits: tuple[str, ...] = ("train", "valid")
) -> dict[tuple[str, int], dict[Dimension, float]]:
    """The probe's distribution over top dimensions for every turn of ``splits``: cross-fitted on train,
    from the probe trained on all of train for any other split (whose states must be in ``states_dir``)."""
    mapping = default_strategy_map()
    root = data_dir() / "esconv"
    needed = {"train", *splits}
    for s in needed:  # the probe is fitted on train; its predictions elsewhere choose, never fit
        require_role(root / f"{s}.jsonl", "fit" if s == "train" else "select")
    dialogues = {s: load_esconv(root / f"{s}.jsonl", strategy_map=mapping).records for s in needed}
    turns = {s: _turns(dialogues[s], _annotated) for s in needed}
    keys = {s: [t["key"] for t in turns[s]] for s in needed}
    states = {s: torch.load(states_dir / f"states-{s}.pt") for s in needed}
    out: dict[tuple[str, int], dict[Dimension, float]] = {}

    def fit_predict(train_rows: list[int], split: str, rows: list[int]) -> None:
        train = [turns["train"][i] for i in train_rows]
        sub = {k: v[train_rows] for k, v in states["train"].items()}
        scale = scale_of(sub, FEATURE)
        w = fit_logistic(features(sub, train, FEATURE, scale), _soft_labels(train), PENALTY)
        target = [turns[split][i] for i in rows]
        x = features({k: v[rows] for k, v in states[split].items()}, target, FEATURE, scale)
        for i, p in zip(rows, probabilities(w, x).tolist(), strict=True):
            out[keys[split][i]] = dict(zip(DIMENSIONS, p, strict=True))

    everything = list(range(len(keys["train"])))
    if "train" in splits:
        ids = sorted({d for d, _ in keys["train"]})
        random.Random(0).shuffle(ids)
        fold = {d: i % FOLDS for i, d in enumerate(ids)}
        for k in range(FOLDS):
            held = [i for i in everything if fold[keys["train"][i][0]] == k]
            fit_predict([i for i in everything if fold[keys["train"][i][0]] != k], "train", held)
    for split in sorted(needed - {"train"}):
        fit_predict(everything, split, list(range(len(keys[split]))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="runs/generator_data", help="the shipped build-data output")
    parser.add_argument("--states", default="runs/context_probe", help="bench_context_probe.py's output")
    parser.add_argument("--out", default="runs/generator_probe_targets/data")
    parser.add_argument(
        "--targets",
        choices=("mix", "ranked"),
        default="mix",
        help="mix: half the count weights, half the probe; ranked: the probe's order alone, as RANKED",
    )
    args = parser.parse_args()
    probe = predictions(Path(args.states))
    source, out = Path(args.data), Path(args.out)
    (out / "sft").mkdir(parents=True, exist_ok=True)
    tally: Counter[str] = Counter()
    for split in ("train", "valid"):
        kept = []
        for line in (source / "sft" / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            lean = probe[(record["dialogue_id"], record["turn_index"])]
            counts = count_weights({Dimension(d): n for d, n in record["counts"].items()})
            old = parse_rubric(record["target"])
            if args.targets == "mix":
                weights = {d: (1 - PROBE_WEIGHT) * counts[d] + PROBE_WEIGHT * lean[d] for d in DIMENSIONS}
            else:
                order = sorted(DIMENSIONS, key=lambda d: -lean[d])
                weights = dict(zip(order, RANKED, strict=True))
            rubric = Rubric(weights=weights, criteria=old.criteria)
            visible = generator_position(record["context"], VISIBLE)[0]
            problems = [p for p in check_rubric(rubric, visible).problems() if "names anything" not in p]
            if problems:
                tally[f"{split}: dropped ({'; '.join(problems)})"] += 1
                continue
            new_target = rubric_reply_json(rubric)
            tally[f"{split}: top dimension changed"] += old.top_dimension != rubric.top_dimension
            tally[f"{split}: top {rubric.top_dimension.value}"] += 1
            kept.append({**record, "target": new_target, "source": f"esconv-templates+probe-{args.targets}"})
        (out / "sft" / f"{split}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept), encoding="utf-8"
        )
        tally[f"{split}: kept"] = len(kept)
    shutil.copyfile(source / "roles.json", out / "roles.json")
    (out / "report.json").write_text(json.dumps(dict(tally), indent=2) + "\n", encoding="utf-8")
    print(json.dumps(dict(tally), indent=2))


if __name__ == "__main__":
    main()
