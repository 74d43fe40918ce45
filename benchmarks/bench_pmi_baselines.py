"""What context fit should compare a reply's likelihood against, chosen on ESConv **valid** pairs.

Context fit reads ``log p(reply | context) - log p(reply | baselines)`` with the bundled base
model (:class:`care_sdk.ContextFit`); the first baseline was one neutral message, ``"Hi."``.
A reply that would suit any support conversation ("That sounds hard, how are you coping?") is
likely after any such conversation but not after "Hi.", so it earns evidence it has not earned.
This benchmark reads each reply of ``--pairs`` pairs (a context's reference reply, and a reply
from another dialogue of the split, as the shipped gate was fitted on) after its context and after
several baselines, and reports for each way of pooling them the share of pairs where the reference
gets the larger PMI (95 % bootstrap interval over pairs), and the paired difference from ``"Hi."``:

- ``"Hi."`` alone (``NEUTRAL``, the first form);
- ``SUPPORT_CONVERSATIONS``: eight short conversations written for the package, alone and pooled
  (pooled, the default since);
- eight one-message openers on varied topics (``OPENERS``), alone and pooled;
- ``--train-contexts`` contexts of ESConv **train** (their last 6 messages, seeded), pooled;
- unions of these. Pooling is ``log mean exp`` (the baseline is the mixture of the pooled contexts).

On ``train`` (the default) it also fits the gate of "Hi." and of ``SUPPORT_CONVERSATIONS`` on the
pairs (a gate is fitted on train data only; the shipped ``SUPPORT_GATE`` was fitted on valid pairs
before that rule). ``--split valid`` / ``--split test`` measure the same rows (both are
``selection`` data: ESConv test has been read for choices).

Usage:
    python benchmarks/bench_pmi_baselines.py --pairs 200 --seed 7 --out runs/pmi_baselines.jsonl
    python benchmarks/bench_pmi_baselines.py --split test --pairs 200 --seed 7 --out runs/pmi_baselines_test.jsonl
The per-reply log-probabilities are written to ``--out`` (JSON lines; a rerun reads only what it
lacks), the table to stdout.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_evaluator import valid_pairs

from care_lab.bench.metrics import bootstrap
from care_lab.data import data_dir, load_esconv
from care_sdk import ContextFit
from care_sdk.backends import resolve_backend
from care_sdk.bundled.context_fit import SUPPORT_CONVERSATIONS, Gate, _log_mean_exp, sample_baselines
from care_sdk.jsonl import replace_jsonl
from care_sdk.types import Message

OPENERS: tuple[str, ...] = (
    "I've been feeling really stressed about work lately and I don't know what to do.",
    "My partner and I broke up last week and I can't stop thinking about it.",
    "I'm so anxious about my exams, I can't sleep.",
    "Since I moved to a new city I feel lonely all the time.",
    "I lost my job because of the pandemic and money is getting tight.",
    "My mother is sick and I'm worried about her.",
    "I had a fight with my best friend and now she won't talk to me.",
    "I feel like nobody in my family listens to me.",
)
"""One user message each: how a support conversation opens (a probe only: pooled, they put the
reference first less often than "Hi.")."""


def baselines(train_contexts: int, seed: int) -> dict[str, tuple[Message, ...]]:
    """Every baseline read: "Hi.", each opener, each written conversation, each sampled train context."""
    train = [d.to_dialogue() for d in load_esconv(data_dir() / "esconv" / "train.jsonl").records]
    out: dict[str, tuple[Message, ...]] = {"hi": (Message(role="user", content="Hi."),)}
    out |= {f"opener{j}": (Message(role="user", content=o),) for j, o in enumerate(OPENERS)}
    out |= {f"conv{j}": conversation for j, conversation in enumerate(SUPPORT_CONVERSATIONS)}
    out |= {f"train{j}": c for j, c in enumerate(sample_baselines(train, train_contexts, seed))}
    return out


def read_all(
    pairs: list[tuple[Any, str, str]], rows: list[dict[str, Any]], train_contexts: int, seed: int
) -> list[dict[str, Any]]:
    """Each reply's summed log-probability after its context (``given``) and after each baseline of
    :func:`baselines` (``hi``, ``opener<j>``, ``conv<j>``, ``train<j>``); ``None`` where a read failed.
    ``rows`` from an earlier run are kept, and only the reads they lack are made."""
    fit = ContextFit(resolve_backend("default", n_threads=1))
    if not rows:
        for i, (context, reference, other) in enumerate(pairs):
            for kind, reply in (("reference", reference), ("other", other)):
                messages, read = fit._read_as(context, reply)
                given = fit._read_fitting(messages, read)
                rows.append({"pair": i, "kind": kind, "given": sum(given) if isinstance(given, list) else None})
    for row in rows:  # the reply as context fit reads it
        context, reference, other = pairs[row["pair"]]
        row["read"] = fit._read_as(context, reference if row["kind"] == "reference" else other)[1]
    for name, messages in baselines(train_contexts, seed).items():  # one at a time: its prompt stays cached
        for row in rows:
            if name not in row:
                value = fit._read_fitting(messages, row["read"])
                row[name] = sum(value) if isinstance(value, list) else None
    return rows


def pmi(row: dict[str, Any], keys: list[str]) -> float | None:
    """The row's PMI against the pool of baselines ``keys`` (``log mean exp``); ``None`` if a read failed."""
    values = [row[k] for k in keys]
    if row["given"] is None or any(v is None for v in values):
        return None
    return float(row["given"]) - _log_mean_exp(values)


def gates(rows: list[dict[str, Any]]) -> list[str]:
    """The gate fitted on these pairs for "Hi." and for ``SUPPORT_CONVERSATIONS`` (what
    ``SUPPORT_GATE`` is, on the valid pairs)."""
    lines = []
    for name, keys in (
        ('"Hi."', ["hi"]),
        ("SUPPORT_CONVERSATIONS", [f"conv{j}" for j in range(len(SUPPORT_CONVERSATIONS))]),
    ):
        by_kind: dict[str, list[float]] = {"reference": [], "other": []}
        for row in rows:
            value = pmi(row, keys)
            if value is not None:
                by_kind[row["kind"]].append(value)
        gate = Gate.fit(by_kind["reference"], by_kind["other"])
        lines.append(f"gate fitted on these pairs, {name}: slope={gate.slope:.4f}, intercept={gate.intercept:.4f}")
    return lines


def table(rows: list[dict[str, Any]], train_contexts: int) -> list[str]:
    """The share of pairs ordered right for each baseline, and its paired difference from "Hi."."""
    by_pair: dict[int, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_pair.setdefault(row["pair"], {})[row["kind"]] = row
    openers = [f"opener{j}" for j in range(len(OPENERS))]
    convs = [f"conv{j}" for j in range(len(SUPPORT_CONVERSATIONS))]
    trains = [f"train{j}" for j in range(train_contexts)]
    variants = {
        '"Hi."': ["hi"],
        "8 openers, pooled": openers,
        f"SUPPORT_CONVERSATIONS ({len(convs)} written), pooled": convs,
        f"{train_contexts} train contexts, pooled": trains,
    }
    variants |= {"openers + train contexts, pooled": openers + trains}
    variants |= {"openers + written conversations, pooled": openers + convs}
    variants |= {'openers + written conversations + "Hi.", pooled': openers + convs + ["hi"]}
    variants |= {f"conversation {j} alone": [f"conv{j}"] for j in range(len(SUPPORT_CONVERSATIONS))}
    variants |= {f"opener {j} alone": [f"opener{j}"] for j in range(len(OPENERS))}

    def wins(keys: list[str]) -> dict[int, float]:
        out = {}
        for i, pair in by_pair.items():
            a, b = pmi(pair["reference"], keys), pmi(pair["other"], keys)
            if a is not None and b is not None:
                out[i] = 0.5 if a == b else float(a > b)
        return out

    mean: Callable[[list[float]], float] = lambda xs: sum(xs) / len(xs)  # noqa: E731
    hi = wins(["hi"])
    lines = ['| baseline | pairs | reference first [95% CI] | minus "Hi.", paired |', "|---|---|---|---|"]
    for name, keys in variants.items():
        mine = wins(keys)
        common = [i for i in mine if i in hi]
        share = bootstrap(list(mine.values()), mean, resamples=1000, seed=0)
        diff = bootstrap([mine[i] - hi[i] for i in common], mean, resamples=1000, seed=0)
        lines.append(f"| {name} | {len(mine)} | {share.format()} | {'-' if keys == ['hi'] else diff.format()} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=200, help="ESConv pairs of --split")
    parser.add_argument("--seed", type=int, default=7, help="seed of the pairs")
    parser.add_argument(
        "--split", choices=["train", "valid", "test"], default="train", help="ESConv split of the pairs"
    )
    parser.add_argument("--train-contexts", type=int, default=4, help="ESConv train contexts pooled as a baseline")
    parser.add_argument("--out", default="runs/pmi_baselines.jsonl")
    args = parser.parse_args()
    out = Path(args.out)
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    use = "fit" if args.split == "train" else "evaluate"
    rows = read_all(valid_pairs(args.pairs, args.seed, args.split, use), rows, args.train_contexts, seed=11)
    out.parent.mkdir(parents=True, exist_ok=True)
    replace_jsonl(out, rows)
    print("\n".join(table(rows, args.train_contexts)))
    if args.split == "train":  # a gate is fitted on train pairs only
        print("\n".join(gates(rows)))


if __name__ == "__main__":
    main()
