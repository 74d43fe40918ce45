"""GRPO-shaped groups from real ESConv data, shared by the cost and logprob-tie benchmarks.

A group is one supporter turn's context (its last ``keep`` messages) with ``group`` candidate
replies: the reference reply first, then supporter replies taken from other dialogues, the way
a policy's samples differ in quality for the same context.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from care_lab.data import data_dir, load_esconv
from care_sdk.types import Message


def esconv_data(split: str = "valid") -> dict[str, object]:
    """The results file's data fields for groups drawn from ESConv ``split`` (valid and test are both
    ``selection`` data; no test set is read)."""
    return {"data": f"esconv/{split}.jsonl", "role": "selection", "test_reads": 0}


@dataclass(frozen=True)
class Group:
    dialogue_id: str
    context: tuple[Message, ...]
    replies: tuple[str, ...]


def esconv_groups(n: int, group: int, *, split: str = "valid", keep: int = 6, seed: int = 0) -> list[Group]:
    """``n`` groups of ``group`` replies each, from ESConv's ``split``, one turn per dialogue."""
    loaded = load_esconv(data_dir() / "esconv" / f"{split}.jsonl")  # $CARE_DATA_DIR
    turns = []
    for dialogue in loaded.records:
        candidates = [t for t in dialogue.supporter_turns() if len(t.context) >= 3 and len(t.reply) >= 20]
        if candidates:
            turns.append(candidates[len(candidates) // 2])
    rng = random.Random(seed)
    rng.shuffle(turns)
    if len(turns) < n + group:
        raise SystemExit(f"only {len(turns)} usable ESConv turns in {split}; asked for {n} groups of {group}")
    pool = [t.reply for t in turns[n:]]
    groups = []
    for turn in turns[:n]:
        others = rng.sample(pool, group - 1)
        groups.append(Group(turn.dialogue_id, tuple(turn.context[-keep:]), (turn.reply, *others)))
    return groups
