"""How much of the next reply's top dimension can a reader of the context tell, without a model?

The bundled generator has to beat the turn-position prior (the most common top dimension at each
supporter-turn number, learned on ESConv train). This asks how far above that prior the
information in the context goes, with lookup tables learned on ESConv **train** and measured on
**valid** and **test** (no model, nothing trained on either), each the most common top dimension
of the train turns with the same key:

- ``majority``: one answer for every turn;
- ``position prior``: the supporter-turn number (as the generator prompt states it);
- ``position + user asks``: and whether the user's last message holds a question mark;
- ``position + previous strategy (annotated)``: and the previous supporter turn's top dimension
  from ESConv's strategy annotations, which the generator never sees (an oracle: how much the
  conversation's own course says);
- ``position + previous strategy (from its words)``: the same, with that dimension read from the
  previous supporter reply's words by a naive Bayes classifier trained on train replies (what a
  reader of the text could recover of the oracle);
- ``position + the visible messages' words``: the prior at that position times a naive Bayes
  reading of the words of the last four messages (what the bundled generator sees), from
  user's and supporter's words kept apart, trained on every train turn; the words' weight is
  chosen on valid (so its valid cell is optimistic) and measured once on test.

Metric: top-dimension match (:func:`care_sdk.rubric_checks.top_match`), the same as
``bench_generator.py``, with a 95 % bootstrap interval over dialogues.

Usage:
    python benchmarks/bench_context_signal.py [--out runs/context_signal.md]
"""

from __future__ import annotations

import argparse
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from care_lab.bench.metrics import Estimate, bootstrap
from care_lab.data import data_dir, default_strategy_map, load_esconv
from care_lab.training.roles import require_role
from care_lab.training.rubric_targets import POSITION_CAP, turn_number
from care_sdk.rubric_checks import top_match
from care_sdk.types import DIMENSIONS, Dimension

NONE = "none"


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z']+", text.lower())) | {"<question>" if "?" in text else "<statement>"}


class WordClassifier:
    """Naive Bayes (Bernoulli words, add-one) from a supporter reply's words to its top dimension."""

    def __init__(self, replies: list[tuple[str, Dimension]]) -> None:
        self.classes = Counter(d for _, d in replies)
        self.counts: dict[Dimension, Counter[str]] = defaultdict(Counter)
        for text, d in replies:
            self.counts[d].update(_words(text))
        self.vocabulary = {w for c in self.counts.values() for w in c}

    def __call__(self, text: str) -> Dimension:
        words = _words(text) & self.vocabulary

        def log_odds(d: Dimension) -> float:
            n = self.classes[d]
            return math.log(n) + sum(math.log((self.counts[d][w] + 1) / (n + 2)) for w in words)

        return max(self.classes, key=log_odds)


VISIBLE = 4
"""Messages the bundled generator's adapter reads before a reply (its ``max_context_messages``)."""

WORD_WEIGHTS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
"""The words' weights tried on valid for the visible-words reader."""


def _visible_words(context: Any) -> set[str]:
    return {f"{m.role[0]}:{w}" for m in context[-VISIBLE:] for w in _words(m.content)}


class VisibleReader:
    """The position prior times naive Bayes over the visible messages' words, the words weighted by
    ``weight`` (0: the prior alone): ``log p(d | position) + weight * sum_w log p(w | d)``, each
    turn's top dimensions counted fractionally, add-one smoothing."""

    def __init__(self, train: list[dict[str, Any]]) -> None:
        self.prior: dict[Hashable, Counter[Dimension]] = defaultdict(Counter)
        self.classes: Counter[Dimension] = Counter()
        self.counts: dict[Dimension, Counter[str]] = defaultdict(Counter)
        for t in train:
            for d in t["tops"]:
                share = 1 / len(t["tops"])
                self.prior[t["position"]][d] += share
                self.classes[d] += share
                for w in t["visible"]:
                    self.counts[d][w] += share
        self.vocabulary = {w for c in self.counts.values() for w in c}
        self.weight = 1.0

    def __call__(self, t: dict[str, Any]) -> Dimension:
        prior = self.prior.get(t["position"], self.classes)
        seen = t["visible"] & self.vocabulary

        def score(d: Dimension) -> float:
            n = self.classes[d]
            words = sum(math.log((self.counts[d][w] + 1) / (n + 2)) for w in seen)
            return math.log(prior[d] + 1) + self.weight * words

        return max(DIMENSIONS, key=score)


def _turns(dialogues: list[Any], previous_of: Callable[[Any], str]) -> list[dict[str, Any]]:
    """Every supporter turn with a mapped strategy: its keys' parts, counts, top dimensions, dialogue,
    ``(dialogue id, turn index)`` and context."""
    mapping = default_strategy_map()
    out = []
    for dialogue in dialogues:
        previous = NONE
        for turn in dialogue.supporter_turns(mapping):
            if turn.top_dimensions:
                out.append(
                    {
                        "dialogue": dialogue.id,
                        "key": (dialogue.id, turn.index),
                        "context": turn.context,
                        "position": min(turn_number(turn), POSITION_CAP),
                        "asks": "?" in turn.context[-1].content,
                        "visible": _visible_words(turn.context),
                        "previous": previous,
                        "counts": turn.counts,
                        "tops": turn.top_dimensions,
                    }
                )
            previous = previous_of(turn)
    return out


def _annotated(turn: Any) -> str:
    tops = turn.top_dimensions
    return tops[0].value if len(tops) == 1 else ("tie" if tops else NONE)


def _table(
    train: list[dict[str, Any]], key: Callable[[dict[str, Any]], Hashable]
) -> Callable[[dict[str, Any]], Dimension]:
    tally: dict[Hashable, dict[Dimension, float]] = defaultdict(lambda: dict.fromkeys(DIMENSIONS, 0.0))
    overall = dict.fromkeys(DIMENSIONS, 0.0)
    for t in train:
        tops = t["tops"]
        for d in tops:
            tally[key(t)][d] += 1 / len(tops)
            overall[d] += 1 / len(tops)
    fallback = max(DIMENSIONS, key=lambda d: overall[d])
    return lambda t: max(DIMENSIONS, key=lambda d: tally[key(t)][d]) if key(t) in tally else fallback


def _match(
    turns: list[dict[str, Any]], predict: Callable[[dict[str, Any]], Dimension], resamples: int
) -> tuple[Estimate, int]:
    """Top-dimension match of ``predict`` over ``turns``, with a bootstrap interval over dialogues
    (none with ``resamples`` 0), and how many turns it counts."""
    return over_dialogues(turns, [pick_match(t, predict(t)) for t in turns], resamples)


def pick_match(turn: dict[str, Any], pick: Dimension) -> float | None:
    """Top-dimension match of all weight on ``pick`` for ``turn``."""
    return top_match({d: float(d == pick) for d in DIMENSIONS}, turn["counts"])


def over_dialogues(turns: list[dict[str, Any]], values: list[float | None], resamples: int) -> tuple[Estimate, int]:
    """The mean of ``values`` (one per turn, ``None`` not counted) with a bootstrap interval over
    dialogues (none with ``resamples`` 0), and how many values it counts."""
    by_dialogue: dict[str, list[float]] = defaultdict(list)
    for t, value in zip(turns, values, strict=True):
        if value is not None:
            by_dialogue[t["dialogue"]].append(value)
    units = list(by_dialogue.values())
    estimate = bootstrap(units, lambda s: sum(map(sum, s)) / sum(map(len, s)), resamples=resamples)
    return estimate, sum(map(len, units))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/context_signal.md")
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    mapping = default_strategy_map()
    for split in ("train", "valid", "test"):  # fitted on train, chosen on valid, measured on test
        use = {"train": "fit", "valid": "select"}.get(split, "evaluate")
        require_role(data_dir() / "esconv" / f"{split}.jsonl", use)
    dialogues = {
        split: load_esconv(data_dir() / "esconv" / f"{split}.jsonl", strategy_map=mapping).records
        for split in ("train", "valid", "test")
    }
    classify = WordClassifier(
        [
            (t.reply, t.top_dimensions[0])
            for d in dialogues["train"]
            for t in d.supporter_turns(mapping)
            if len(t.top_dimensions) == 1
        ]
    )
    inferred = lambda turn: classify(turn.reply).value  # noqa: E731
    keys: dict[str, tuple[Callable[[Any], str], Callable[[dict[str, Any]], Hashable]]] = {
        "majority": (_annotated, lambda t: 0),
        "position prior": (_annotated, lambda t: t["position"]),
        "position + user asks": (_annotated, lambda t: (t["position"], t["asks"])),
        "position + previous strategy (annotated)": (_annotated, lambda t: (t["position"], t["previous"])),
        "position + previous strategy (from its words)": (inferred, lambda t: (t["position"], t["previous"])),
    }
    lines = ["| table | ESConv valid | ESConv test |", "|---|---|---|"]
    turns = {split: _turns(dialogues[split], _annotated) for split in ("valid", "test")}

    def row(name: str, predict: Callable[[dict[str, Any]], Dimension], of: dict[str, list[dict[str, Any]]]) -> None:
        cells = [_match(of[split], predict, args.resamples) for split in ("valid", "test")]
        lines.append(f"| {name} | " + " | ".join(f"{e.format()} (n={n})" for e, n in cells) + " |")
        print(lines[-1], flush=True)

    for name, (previous_of, key) in keys.items():
        of = turns if previous_of is _annotated else {s: _turns(dialogues[s], previous_of) for s in ("valid", "test")}
        row(name, _table(_turns(dialogues["train"], previous_of), key), of)
    reader = VisibleReader(_turns(dialogues["train"], _annotated))
    choice = {}
    for weight in WORD_WEIGHTS:
        reader.weight = weight
        choice[weight] = _match(turns["valid"], reader, 0)[0].value or 0.0
    reader.weight = max(WORD_WEIGHTS, key=lambda w: (choice[w], -w))
    print("visible words, valid by weight:", {w: round(v, 4) for w, v in choice.items()}, flush=True)
    row(f"position + the visible messages' words (naive Bayes, weight {reader.weight} chosen on valid)", reader, turns)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
