"""The shift check's two ways of reading a reply's hidden states, side by side: time and agreement.

The shift check (``care_sdk.bundled.shift_check``) reads each reply's mean state after its context and
after "Hi.". ``r2`` (today's, ``shift_check.READS``) computes the prefix once and then only each
reply's own tokens after it (``LlamaCppBackend.hidden_state_means_after``). ``r1`` (what the
bundled check was fitted on) computed the prefix with the reply whole and took the difference with
the prefix's reading. This reads the same held-out items both ways, one context at a time,
alternating which way goes first, on one thread, and reports the time of each, their ratio, and
how far apart the two readings are: the largest difference of a shift value and of the check's
factor (each item's PMI read once, shared).

The items are ``bench_evaluator.py``'s: the ESConv test groups (the reference, five replies from
other conversations, a platitude, an evasive reply and three echoes) and, with ``--lend-an-ear N``,
N held-out Lend-an-Ear turns with their judged replies (longer contexts). With ``--truth`` every
shift is also read with transformers in float32 on the same (dequantised) weights, each text
whole, and the report says how far each llama.cpp way is from it.

With ``--reply-tokens N`` a third way is timed beside them: ``r2`` over each reply's first N
tokens only (:attr:`~care_sdk.bundled.shift_check.ShiftCheck.reply_tokens`; other features, so only its
time and the share of its factors below 1 are reported, beside ``r2``'s share).

Usage:
    python benchmarks/bench_shift_reads.py --contexts 12 --lend-an-ear 6 --truth --out runs/shift_reads.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _evaluator_items import items as evaluator_items

from care_sdk import ContextFit
from care_sdk.backends._llamacpp_states import LayerMeans
from care_sdk.backends.llamacpp import LlamaCppBackend, default_model_path
from care_sdk.bundled.shift_check import ShiftCheck, ShiftReader


class _ByDifference:
    """A backend face for :class:`ShiftReader` that reads ``r1``'s way: every text computed whole
    once by ``read(text, layer)`` (remembered, as ``r1``'s reader kept each context's prefix), a
    reply's mean taken by difference with its prefix's; ``llama`` counts the tokens."""

    supports_hidden_states = True

    def __init__(self, llama: Any, read: Callable[[str, int], list[float]]) -> None:
        self.llama = llama
        self.read = read
        self.memo: dict[str, list[float]] = {}

    def _mean(self, text: str, layer: int) -> tuple[list[float], int]:
        if text not in self.memo:
            self.memo[text] = self.read(text, layer)
        return self.memo[text], len(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def hidden_state_means_after(self, start: str, texts: list[str], layer: int) -> list[list[float]]:
        first, m = self._mean(start, layer)
        out = []
        for text in texts:
            whole, n = self._mean(text, layer)
            out.append([(w * n - s * m) / (n - m) for w, s in zip(whole, first, strict=True)])
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, default=12, help="ESConv test contexts (11 replies each)")
    parser.add_argument("--lend-an-ear", type=int, default=0, help="held-out Lend-an-Ear turns (4 replies each)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--truth",
        action="store_true",
        help="also read every shift with transformers in float32 and report how far each way is from it",
    )
    parser.add_argument("--reply-tokens", type=int, help="also time r2 over each reply's first N tokens")
    parser.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    args = parser.parse_args()

    tasks = ("esconv",) + (("lend-an-ear",) if args.lend_an_ear else ())
    chosen = evaluator_items(args.contexts, args.seed, tasks=tasks, lend_an_ear_turns=args.lend_an_ear or None)
    groups: dict[str, list[tuple[Any, str]]] = {}
    for item in chosen:
        groups.setdefault(item["group"], []).append((item["context"], item["reply"]))
    check = ShiftCheck.bundled()
    backend = LlamaCppBackend(default_model_path(), n_threads=1)
    fit = ContextFit(backend, check=None)  # the PMI the check reads, once for both ways
    whole = LayerMeans(backend.llama, n_ctx=backend.llama.n_ctx(), n_threads=1)
    readers = {
        "r2": ShiftReader(backend, layer=check.layer, window=check.window),  # hidden_state_means_after
        "r1": ShiftReader(_ByDifference(backend.llama, whole.read), layer=check.layer, window=check.window),
    }
    first = f"r2-first-{args.reply_tokens}"
    if args.reply_tokens:
        readers[first] = ShiftReader(backend, layer=check.layer, window=check.window, reply_tokens=args.reply_tokens)
    truth = None
    if args.truth:  # transformers in float32 on the bundled model's weights, dequantised
        from care_sdk.backends.hf import HFBackend

        float32 = HFBackend.from_gguf(default_model_path())
        reads32 = _ByDifference(backend.llama, lambda text, layer: float32.hidden_state_means([text], layer)[0])
        truth = ShiftReader(reads32, layer=check.layer, window=check.window)
    seconds = dict.fromkeys(readers, 0.0)
    below = dict.fromkeys(readers, 0)  # factors below 1
    shift_gap = 0.0
    factor_gaps: list[float] = []
    off_truth: dict[str, list[tuple[float, float]]] = {"r2": [], "r1": []}  # (largest shift gap, factor gap)
    for n, pairs in enumerate(groups.values()):
        pmis = fit.pmi_batch(pairs)
        read: dict[str, list[Any]] = {}
        ways = list(readers)
        for way in ways if n % 2 == 0 else ways[::-1]:
            start = time.perf_counter()
            read[way] = readers[way].shift_batch(pairs)
            seconds[way] += time.perf_counter() - start
            below[way] += sum(
                isinstance(s, list) and isinstance(p, float) and check.factor(p, s) < 1
                for s, p in zip(read[way], pmis, strict=True)
            )
        exact = truth.shift_batch(pairs) if truth is not None else [None] * len(pairs)
        for a, b, t, pmi in zip(read["r2"], read["r1"], exact, pmis, strict=True):
            if not (isinstance(a, list) and isinstance(b, list) and isinstance(pmi, float)):
                continue
            shift_gap = max(shift_gap, max(abs(x - y) for x, y in zip(a, b, strict=True)))
            factor_gaps.append(abs(check.factor(pmi, a) - check.factor(pmi, b)))
            if isinstance(t, list):
                for way, value in (("r2", a), ("r1", b)):
                    gap = max(abs(x - y) for x, y in zip(value, t, strict=True))
                    off_truth[way].append((gap, abs(check.factor(pmi, value) - check.factor(pmi, t))))
    result = {
        "groups": len(groups),
        "replies": len(chosen),
        "seconds_r2": round(seconds["r2"], 2),
        "seconds_r1": round(seconds["r1"], 2),
        "time_ratio_r2_over_r1": round(seconds["r2"] / seconds["r1"], 3),
        "largest_shift_difference": shift_gap,
        "largest_factor_difference": max(factor_gaps, default=0.0),
        "median_factor_difference": statistics.median(factor_gaps) if factor_gaps else 0.0,
        "share_of_factors_apart_over_0.01": round(sum(g > 0.01 for g in factor_gaps) / max(len(factor_gaps), 1), 3),
        "share_of_factors_below_1": {way: round(count / len(chosen), 3) for way, count in below.items()},
    }
    if args.reply_tokens:
        result[f"seconds_{first}"] = round(seconds[first], 2)
        result[f"time_ratio_{first}_over_r2"] = round(seconds[first] / seconds["r2"], 3)
    for way, gaps in off_truth.items():
        if gaps:
            result[f"{way}_vs_float32"] = {
                "median_largest_shift_difference": statistics.median(g for g, _ in gaps),
                "largest_shift_difference": max(g for g, _ in gaps),
                "median_factor_difference": statistics.median(f for _, f in gaps),
                "largest_factor_difference": max(f for _, f in gaps),
                "share_of_factors_apart_over_0.01": round(sum(f > 0.01 for _, f in gaps) / len(gaps), 3),
            }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
