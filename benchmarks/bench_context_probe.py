"""Can the bundled model's own reading of the context tell the next reply's top dimension better than the position?

``bench_context_signal.py`` found that lookup tables and a naive Bayes reading of the visible words
reach no further than the turn-position prior. A word count is a weak reader; this asks the same
question of a strong one: a linear probe on SmolLM2-135M-Instruct's hidden states of exactly what
the bundled generator reads (the user message of its prompt: the position line and the last four
messages), trained on every ESConv **train** turn, its regularisation chosen on **valid**, and
measured once on **test**. If such a probe cannot beat the prior, a generator built on the same
model reading the same text is unlikely to, whatever it is trained with.

Features, each standardised on train:

- ``position``: the supporter-turn number one-hot (capped as the prior caps it); the probe on this
  alone should land on the prior, a check of the probe;
- ``final mean``, ``final last``, ``middle mean``: the final layer's hidden states averaged over
  the tokens, the final layer at the last token, layer 15 of 30 averaged; each with the position.

Probe: multinomial logistic regression (soft labels: a turn with tied top dimensions counts
equally for each), L2 penalty chosen on valid from a grid, full-batch L-BFGS. Metric: top-dimension
match (:func:`care_sdk.rubric_checks.top_match`), the same as ``bench_generator.py``, with 95 %
bootstrap intervals over dialogues; the paired difference with the prior on the same turns.

The hidden states are computed once (transformers, float32, the bundled GGUF dequantised) and kept
in ``--out`` (``states-<split>.pt``); a re-run reads them. About 26 minutes on two threads for the
12,353 turns; the probes take seconds. The probe fits repeat exactly with the same ``--threads``
(the guide's table: 2); on one thread the layer-15 row moves in its last digit (+0.022 [0.004, 0.042]).

With ``--features 'middle mean'`` only layer 15 is computed, on the model cut after it (its states
are bit-for-bit those of the whole model): on a machine where every state of all 12,353 turns was
estimated at 45 minutes, layer 15 of the 10,188 train and valid turns took 24 on two threads.

Usage:
    python benchmarks/bench_context_probe.py [--out runs/context_probe] [--threads 1] [--features NAME ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from bench_context_signal import VISIBLE, _annotated, _table, _turns, over_dialogues, pick_match

from care_lab.data import data_dir, default_strategy_map, load_esconv
from care_lab.training.roles import require_role
from care_lab.training.rubric_targets import POSITION_CAP
from care_lab.training.weights_head import (
    fit_logistic,
    position_onehot,
    probabilities,
    soft_labels,
    transformers_states,
)
from care_sdk.bundled.weights_head import head_text
from care_sdk.types import DIMENSIONS

SPLITS = ("train", "valid", "test")
MIDDLE = 15
"""The middle layer probed (of 30)."""
PENALTIES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
"""L2 penalties tried on valid."""
FEATURES = ("position", "final mean", "final last", "middle mean")


def _texts(turns: list[dict[str, Any]]) -> list[str]:
    """What the generator reads before each turn: the user message of its prompt."""
    return [head_text(t["context"], VISIBLE) for t in turns]


STATES = {"final mean": (-1, "mean"), "final last": (-1, "last"), "middle mean": (MIDDLE, "mean")}
"""Each pooled state: the layer it reads (``-1``: the final layer) and how it pools the tokens."""


def _states(texts: list[str], path: Path, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The pooled hidden states ``names`` of ``texts``, kept in ``path`` (states it lacks are added; with
    layer 15 alone the model is cut after it: ``hidden_states[15]`` is unchanged, in about half the time)."""
    return transformers_states(texts, {n: STATES[n] for n in names}, path)


def _soft_labels(turns: list[dict[str, Any]]) -> torch.Tensor:
    return soft_labels([t["tops"] for t in turns])


def _position(turns: list[dict[str, Any]]) -> torch.Tensor:
    return position_onehot([t["position"] for t in turns], POSITION_CAP)


def features(states: dict[str, torch.Tensor], turns: list[dict[str, Any]], name: str, scale: Any) -> torch.Tensor:
    """The probe's input: the ``name`` states standardised by ``scale`` (mean, sd) beside the position
    one-hot; the position alone for ``name`` ``"position"``."""
    if name == "position":
        return _position(turns)
    mu, sd = scale
    return torch.cat([(states[name] - mu) / sd, _position(turns)], 1)


def scale_of(states: dict[str, torch.Tensor], name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and sd (floored) of the ``name`` states, to standardise with."""
    return states[name].mean(0), states[name].std(0) + 1e-6


def _predict(w: torch.Tensor, x: torch.Tensor) -> list[int]:
    return probabilities(w, x).argmax(1).tolist()


def _matches(turns: list[dict[str, Any]], picks: list[int]) -> list[float | None]:
    return [pick_match(t, DIMENSIONS[p]) for t, p in zip(turns, picks, strict=True)]


def _accuracy(turns: list[dict[str, Any]], picks: list[int], resamples: int) -> Any:
    return over_dialogues(turns, _matches(turns, picks), resamples)[0]


def _paired(turns: list[dict[str, Any]], a: list[int], b: list[int], resamples: int) -> Any:
    """Match of ``a`` minus match of ``b`` on the same turns, with an interval over dialogues."""
    diffs = [
        None if x is None or y is None else x - y for x, y in zip(_matches(turns, a), _matches(turns, b), strict=True)
    ]
    return over_dialogues(turns, diffs, resamples)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/context_probe")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument(
        "--features",
        nargs="+",
        choices=FEATURES,
        default=list(FEATURES),
        help="the probes to fit (default: all); --features 'middle mean' computes layer 15 alone",
    )
    args = parser.parse_args()
    names = tuple(n for n in STATES if n in args.features)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mapping = default_strategy_map()
    for s in SPLITS:  # fitted on train, the penalty chosen on valid, measured on test (selection data)
        require_role(data_dir() / "esconv" / f"{s}.jsonl", {"train": "fit", "valid": "select"}.get(s, "evaluate"))
    dialogues = {s: load_esconv(data_dir() / "esconv" / f"{s}.jsonl", strategy_map=mapping).records for s in SPLITS}
    turns = {s: _turns(dialogues[s], _annotated) for s in SPLITS}
    states = {s: _states(_texts(turns[s]), out / f"states-{s}.pt", names) for s in SPLITS}
    labels = _soft_labels(turns["train"])
    prior_table = _table(turns["train"], lambda t: t["position"])
    prior = {s: [DIMENSIONS.index(prior_table(t)) for t in turns[s]] for s in ("valid", "test")}
    lines = [
        "| reader | L2 penalty (chosen on valid) | ESConv valid | ESConv test | test minus the prior, paired |",
        "|---|---|---|---|---|",
    ]
    cells = [_accuracy(turns[s], prior[s], args.resamples).format() for s in ("valid", "test")]
    lines.append(f"| turn-position prior (table) | - | {cells[0]} | {cells[1]} | - |")
    results: dict[str, Any] = {}
    for name in (n for n in FEATURES if n in args.features):
        scale = None if name == "position" else scale_of(states["train"], name)
        x = {s: features(states[s], turns[s], name, scale) for s in SPLITS}
        choice = {}
        for penalty in PENALTIES:
            w = fit_logistic(x["train"], labels, penalty)
            choice[penalty] = _accuracy(turns["valid"], _predict(w, x["valid"]), 0).value or 0.0
        penalty = max(PENALTIES, key=lambda p: (choice[p], p))
        w = fit_logistic(x["train"], labels, penalty)
        picks = {s: _predict(w, x[s]) for s in ("train", "valid", "test")}
        cells = [_accuracy(turns[s], picks[s], args.resamples).format() for s in ("valid", "test")]
        diff = _paired(turns["test"], picks["test"], prior["test"], args.resamples)
        title = name if name == "position" else f"{name} + position"
        lines.append(f"| probe: {title} | {penalty:g} | {cells[0]} | {cells[1]} | {diff.format()} |")
        results[name] = {
            "penalty": penalty,
            "valid_by_penalty": choice,
            "train": _accuracy(turns["train"], picks["train"], 0).value,
        }
        print(lines[-1], "| train", round(results[name]["train"] or 0.0, 3), flush=True)
    (out / "probe.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "probe.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
