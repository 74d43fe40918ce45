"""What orders the MINT judge's Lend-an-Ear pairs beside length: word counts, no model.

The bundled evaluator orders the judge's pairs of replies of similar length at chance (see the
bundled evaluator's guide). This benchmark asks whether there was anything in those replies a
small model could have learned: it orders every pair of replies to the same turn that the judge
scores at least 1 apart by a count of words of a few kinds, each fixed before it was run, and
reports the share ordered as the judge orders them, over all pairs and over the pairs of similar
length (:func:`care_lab.bench.metrics.similar_length`).

The cues (a reply with more of it is taken as the better one; ties 1/2):

- ``words``: the reply's words (the length baseline);
- ``feeling words``: feel*, understand*, sounds, hard, tough;
- ``fewer first-person words``: minus the count of I, me, my;
- ``second-person words``: you, your, you're;
- ``questions``: question marks;
- ``advice words``: try, could, might, maybe, consider, suggest;
- ``list items``: lines that start a bulleted or numbered item.

Items: the Lend-an-Ear judged turns of the held-out conversations (valid and test: the same
turns and pairs as ``bench_evaluator.py --lend-an-ear-systems all``) and, beside them, those of
the train conversations, all twelve judged systems. 95 % bootstrap intervals resample turns.
Nothing is trained, so the train rows are not optimistic; they show whether a cue holds across
conversations.

Usage:
    python benchmarks/bench_surface_cues.py --out runs/surface_cues
The table goes to stdout and ``<out>/results.md``; it takes seconds.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _evaluator_items import items as evaluator_items

from care_lab.bench.metrics import pairwise_accuracy, preference_pairs, score_pairs, similar_length


def _count(pattern: str, flags: int = 0) -> Callable[[str], float]:
    compiled = re.compile(pattern, flags)
    return lambda text: float(len(compiled.findall(text)))


CUES: dict[str, Callable[[str], float]] = {
    "words": lambda text: float(len(text.split())),
    "feeling words": _count(r"\b(?:feel\w*|understand\w*|sounds|hard|tough)\b", re.IGNORECASE),
    "fewer first-person words": lambda text: -_count(r"\b(?:I|me|my)\b")(text),
    "second-person words": _count(r"\byou(?:r|'re)?\b", re.IGNORECASE),
    "questions": lambda text: float(text.count("?")),
    "advice words": _count(r"\b(?:try|could|might|maybe|consider|suggest)\b", re.IGNORECASE),
    "list items": _count(r"^\s*(?:[-*]|\d+\.)", re.MULTILINE),
}


def table(items: list[dict[str, Any]], resamples: int = 1000) -> dict[str, dict[str, Any]]:
    """``{cue: {"all": Estimate, "similar": Estimate, "pairs": n, "similar pairs": n}}`` for ``items``
    (Lend-an-Ear items of ``_evaluator_items.items``)."""
    groups: dict[str, dict[str, float]] = defaultdict(dict)
    reply = {}
    for it in items:
        groups[it["group"]][it["key"]] = it["judge"]
        reply[it["key"]] = it["reply"]
    pairs = preference_pairs(groups, margin=1.0)
    similar = [p for p in pairs if similar_length(reply[p.better], reply[p.worse])]
    out = {}
    for name, cue in CUES.items():
        values = {key: cue(text) for key, text in reply.items()}
        out[name] = {
            "all": pairwise_accuracy(score_pairs(pairs, values)[0], resamples=resamples)["accuracy"],
            "similar": pairwise_accuracy(score_pairs(similar, values)[0], resamples=resamples)["accuracy"],
            "pairs": len(pairs),
            "similar pairs": len(similar),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/surface_cues"))
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    sets = {
        "held-out": evaluator_items(0, 1, tasks=("lend-an-ear",), lend_an_ear="held-out", all_systems=True),
        "train": evaluator_items(0, 1, tasks=("lend-an-ear",), lend_an_ear="train", all_systems=True),
    }
    results = {name: table(its, args.resamples) for name, its in sets.items()}
    first = {name: next(iter(r.values())) for name, r in results.items()}
    header = " | ".join(
        f"{name}: all pairs ({first[name]['pairs']}) | {name}: similar length ({first[name]['similar pairs']})"
        for name in results
    )
    lines = [f"| cue | {header} |", "|---" * (1 + 2 * len(results)) + "|"]
    for cue in CUES:
        cells = " | ".join(
            f"{results[name][cue]['all'].format()} | {results[name][cue]['similar'].format()}" for name in results
        )
        lines.append(f"| {cue} | {cells} |")
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
