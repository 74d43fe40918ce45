"""Other ways to read context fit's evidence, screened on the selection sets (never on test).

Context fit reads ``log p(reply | last 6 messages) - log p(reply | "Hi.")`` on the bundled base
model (:class:`care_sdk.ContextFit`). Two other readings were candidates for the default, each
with a reason to expect it to tell a reply written for the conversation from another
conversation's reply better:

- **The same conversation a little earlier as the baseline** (nothing to ship, unlike a pool of
  conversations): the reply read after the conversation without its last 2 (``e2``) or 4 (``e4``)
  messages, or after its opening up to the user's first message (``opening``); each alone, where
  nothing is left "Hi.", and pooled with "Hi." (``log mean exp``). A reply that would suit any
  moment of this conversation is likely after both and earns little; one that answers the last
  message earns the difference.
- **Backward PMI**: evidence summed over the user's last message instead of the reply, ``log
  p(message | reply) - log p(message | "Hi.")``, read role-swapped (the reply as a user turn, the
  user's message as the continuation). Its scale is the message's, the same for every reply of a
  context, so a long reply cannot earn more by being long. Alone, and added to today's PMI.

Items: the selection sets the default was chosen on (see the context-fit guide): the ESConv
**valid** groups of ``bench_evaluator.py --esconv-split valid --esconv-contexts 48 --seed 2``
(the reference, five other dialogues' replies, a platitude, an evasive reply, three echoes), and
the Lend-an-Ear **train** turns of ``--lend-an-ear train --lend-an-ear-turns 60 --seed 1``
(pairs the MINT judge orders by at least 1). Replies are read as context fit reads them (words
repeated from the context stripped). Metrics: PMI alone, the share of pairs ordered right (ties
1/2), 95 % bootstrap intervals over groups and turns. This is a screen: a candidate below "Hi."
on either set gets no full run with the reward.

Usage:
    python benchmarks/bench_pmi_variants.py --out runs/pmi_variants
Each item's reads are cached in ``<out>/<task>.jsonl`` (a rerun reads only what it lacks); the
table goes to stdout and ``<out>/results.md``.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _evaluator_items import items as load_items
from _evaluator_metrics import esconv_pairs, share_by_group

from care_lab.bench.metrics import pairwise_accuracy, preference_pairs, score_pairs
from care_sdk import ContextFit
from care_sdk.backends import resolve_backend
from care_sdk.bundled.context_fit import Gate, _log_mean_exp
from care_sdk.types import Message

HI = (Message(role="user", content="Hi."),)
READS = ("given", "hi", "e2", "e4", "opening", "backward", "backward_hi")
"""What is read for each item: the reply after its context (``given``), after "Hi.", after the
conversation without its last 2 / 4 messages and up to its opening message (``None`` where
nothing is left), and the user's last message after the reply and after "Hi."."""


def read_item(fit: ContextFit, item: dict[str, Any]) -> dict[str, Any]:
    """Every read of :data:`READS` for one item (summed log-probabilities, nats; ``None`` where the
    read failed or there is nothing to read after)."""
    full = tuple(Message.model_validate(m) for m in item["context"])
    messages, reply = fit._read_as(full, item["reply"])
    record: dict[str, Any] = {"key": item["key"]}
    if not reply:  # nothing of its own: no evidence either way
        return record | {"empty": True}

    def read(context: tuple[Message, ...], text: str) -> float | None:
        value = fit._read_fitting(context, text) if context else None
        return sum(value) if isinstance(value, list) else None

    first_user = next(i for i, m in enumerate(full) if m.role == "user")
    last_user = next(m.content for m in reversed(messages) if m.role == "user")
    record["given"] = read(messages, reply)
    record["hi"] = read(HI, reply)
    record["e2"] = read(full[:-2][-fit.window :], reply)
    record["e4"] = read(full[:-4][-fit.window :], reply)
    record["opening"] = read(full[: first_user + 1], reply) if first_user + 1 < len(full) - 1 else None
    record["backward"] = read((Message(role="user", content=reply),), last_user)
    record["backward_hi"] = read(HI, last_user)
    return record


def variants() -> dict[str, Callable[[dict[str, Any]], float | None]]:
    """Each candidate's PMI of one record (``None`` where a read it needs failed)."""

    def forward(*keys: str) -> Callable[[dict[str, Any]], float | None]:
        def value(r: dict[str, Any]) -> float | None:
            if r.get("empty"):
                return 0.0
            pool = [r[k] if r[k] is not None or k == "hi" else r["hi"] for k in keys]
            return None if r["given"] is None or None in pool else r["given"] - _log_mean_exp(pool)

        return value

    def backward(r: dict[str, Any]) -> float | None:
        if r.get("empty"):
            return 0.0
        return None if r["backward"] is None or r["backward_hi"] is None else r["backward"] - r["backward_hi"]

    def both(r: dict[str, Any]) -> float | None:
        a, b = forward("hi")(r), backward(r)
        return None if a is None or b is None else a + b

    return {
        '"Hi." (today)': forward("hi"),
        "without the last 2 messages": forward("e2"),
        "without the last 4 messages": forward("e4"),
        "its opening": forward("opening"),
        'without the last 2, and "Hi.", pooled': forward("hi", "e2"),
        'without the last 4, and "Hi.", pooled': forward("hi", "e4"),
        'its opening and "Hi.", pooled': forward("hi", "opening"),
        "backward PMI": backward,
        'backward + "Hi." PMI': both,
    }


def table(esconv: list[dict[str, Any]], lae: list[dict[str, Any]], records: dict[str, dict[str, Any]]) -> list[str]:
    """PMI alone: ESConv valid reference over each kind, Lend-an-Ear selection pairwise."""
    lae_groups: dict[str, dict[str, float]] = defaultdict(dict)
    for it in lae:
        lae_groups[it["group"]][it["key"]] = it["judge"]
    lae_pairs = preference_pairs(lae_groups, margin=1.0)
    kinds = ("other", "platitude", "evasive", "echo")
    lines = [
        "| PMI against | ESConv valid: reference > " + " | > ".join(kinds) + " | Lend-an-Ear selection |",
        "|---|" + "---|" * (len(kinds) + 1),
    ]
    for name, value in variants().items():
        pmi = {key: value(r) for key, r in records.items()}
        cells = [share_by_group(score_pairs(esconv_pairs(esconv, kind), pmi)[0], 1000).format() for kind in kinds]
        lae_outcomes, _ = score_pairs(lae_pairs, pmi)
        cells.append(pairwise_accuracy(lae_outcomes, resamples=1000)["accuracy"].format())
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    groups = len({it["group"] for it in esconv})
    lines.append(f"\n{groups} ESConv valid groups, {len(lae_pairs)} Lend-an-Ear selection pairs")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/pmi_variants")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    esconv = load_items(48, 2, split="valid", tasks=("esconv",))
    lae = load_items(0, 1, tasks=("lend-an-ear",), lend_an_ear="train", lend_an_ear_turns=60)
    fit = ContextFit(resolve_backend("default", n_threads=1), gate=Gate(1.0, 0.0))
    records: dict[str, dict[str, Any]] = {}
    for task, task_items in (("esconv", esconv), ("lend-an-ear", lae)):
        path = out / f"{task}.jsonl"
        cached = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        records |= {r["key"]: r for r in cached}
        with path.open("a", encoding="utf-8") as sink:
            for item in task_items:
                if item["key"] not in records:
                    records[item["key"]] = read_item(fit, item)
                    sink.write(json.dumps(records[item["key"]]) + "\n")
                    sink.flush()
    lines = table(esconv, lae, records)
    (out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
