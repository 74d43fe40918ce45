"""The held-out items of ``bench_evaluator.py``: Lend-an-Ear judged replies of held-out
conversations, and ESConv groups of 11 replies per context (the reference, replies from other
dialogues, a platitude, an evasive reply and three echoes of the user)."""

from __future__ import annotations

import random
import re
import statistics
from typing import Any

from care_lab.bench.dialogue_tasks import expert_aggregate
from care_lab.data import (
    LEND_AN_EAR_HELD_OUT,
    data_dir,
    default_strategy_map,
    lend_an_ear_split,
    load_esconv,
    load_judged_turns,
    load_lend_an_ear,
)
from care_lab.data.splits import lend_an_ear_role
from care_lab.training.evaluator_targets import EVASIVE_REPLIES, PLATITUDES
from care_lab.training.roles import Use, require_role

SYSTEMS = ("gold", "baseline1_vanilla_Qwen3-4B", "baseline7_psychocounsel_Qwen3-4B", "ours3_q_dkl_h_Qwen3-4B")
"""The Lend-an-Ear systems a run scores by default: the human reply and three Qwen3-4B systems."""
HELD_OUT_PLATITUDES = (
    "Things always get better eventually.",
    "Just think happy thoughts.",
    "Look at the bright side of life.",
    "Tomorrow is another day!",
    "You just need to relax.",
    "Every cloud has a silver lining.",
)
HELD_OUT_EVASIVE = ("No idea.", "Sure.", "I would rather not discuss that.", "Fine.", "Ask someone else.", "Right.")
OTHERS = 5
ECHOES = ("echo", "reference + echo", "turned-around echo")
"""Replies that repeat the user (items 8-10 of an ESConv group): likely after the context, saying nothing new."""


def turn_per_dialogue(split: str, rng: random.Random, use: Use = "evaluate") -> list[Any]:
    """One supporter turn (with at least two messages before it) per ESConv dialogue of ``split``,
    drawn with ``rng``, in an order shuffled by it; ``use`` is what they are read for (the role guard
    refuses test data for fitting or selecting, and train data for evaluating)."""
    mapping = default_strategy_map()
    turns = []
    path = data_dir() / "esconv" / f"{split}.jsonl"
    require_role(path, use)
    for dialogue in load_esconv(path, strategy_map=mapping).records:
        usable = [t for t in dialogue.supporter_turns(mapping) if len(t.context) >= 2 and t.reply.strip()]
        if usable:
            turns.append(rng.choice(usable))
    rng.shuffle(turns)
    return turns


def _last_user_message(context: Any) -> str:
    """What the user said last before the reply (the text an echoing reply copies)."""
    return next(m.content for m in reversed(context) if m.role == "user").strip()


_TURN_AROUND = {
    "i": "you",
    "me": "you",
    "my": "your",
    "mine": "yours",
    "myself": "yourself",
    "am": "are",
    "i'm": "you're",
}


def _turned_around(text: str) -> str:
    """``text`` with first person made second ("I lost my job" -> "you lost your job"): an echo
    that reads like a reflection."""
    return re.sub(r"\b(?:i'm|i|me|my|mine|myself|am)\b", lambda m: _TURN_AROUND[m.group().lower()], text, flags=re.I)


def items(
    esconv_contexts: int,
    seed: int,
    split: str = "test",
    tasks: tuple[str, ...] = ("lend-an-ear", "esconv"),
    lend_an_ear: str = "held-out",
    lend_an_ear_turns: int | None = None,
    all_systems: bool = False,
    use: Use | None = None,
) -> list[dict[str, Any]]:
    """Every item: ``{"key", "task", "group", "context", "reply", ...}`` (see the module docstring);
    the ESConv groups come from ``split`` (``valid`` to choose a setting, ``test`` to report it).
    The Lend-an-Ear turns are those of the ``held-out`` conversations (``valid`` and ``test``), or,
    with ``lend_an_ear="train"``, of the ``train`` conversations: a selection set for a setting the
    evaluator's training plays no part in (context fit reads the base model, which no recipe
    trains); the evaluator was trained on those replies, so the rubric's rows are optimistic there.
    ``lend_an_ear_turns`` keeps that many of them (seeded). Their replies are those of :data:`SYSTEMS`,
    or with ``all_systems`` of every judged system (twelve: more pairs of similar length).
    ``use`` (what the items are read for, through the role guard): by default ``select`` for the
    Lend-an-Ear train turns and ``evaluate`` otherwise; a probe or gate fitted on them says ``fit``."""
    assert not set(HELD_OUT_PLATITUDES) & set(PLATITUDES) and not set(HELD_OUT_EVASIVE) & set(EVASIVE_REPLIES)
    root = data_dir()
    lae = {d.id: d for d in load_lend_an_ear(root / "mint_lend_an_ear").records}
    judged = load_judged_turns(
        root / "mint_lend_an_ear" / "judged_turns" / "judged_turn_responses_gold_and_qwen3-4b_systems.jsonl"
    ).records
    if lend_an_ear not in ("held-out", "train"):
        raise ValueError(f"lend_an_ear: 'held-out' or 'train', got {lend_an_ear!r}")
    splits = ("train",) if lend_an_ear == "train" else LEND_AN_EAR_HELD_OUT
    lae_turns = sorted(
        {(r.conversation_id, r.turn_index) for r in judged if lend_an_ear_split(r.conversation_id) in splits}
    )
    if lend_an_ear_turns is not None:
        lae_turns = random.Random(seed).sample(lae_turns, min(lend_an_ear_turns, len(lae_turns)))
    kept = set(lae_turns)
    lae_use: Use = use or ("select" if lend_an_ear == "train" else "evaluate")
    if "lend-an-ear" in tasks and kept:
        require_role(
            root / "mint_lend_an_ear" / "judged_turns" / "judged_turn_responses_gold_and_qwen3-4b_systems.jsonl",
            lae_use,
            records=[{"id": c, "role": lend_an_ear_role(c)} for c in sorted({c for c, _ in kept})],
        )
    items = []
    for r in judged if "lend-an-ear" in tasks else ():
        if (r.system not in SYSTEMS and not all_systems) or (r.conversation_id, r.turn_index) not in kept:
            continue
        dialogue = lae[r.conversation_id]
        context = dialogue.messages[: r.turn_index]
        if not context or dialogue.messages[r.turn_index].role != "assistant":
            continue
        ratings = dialogue.metadata.get("expert_ratings", {})
        expert = statistics.mean(expert_aggregate(s) for s in ratings.values()) if ratings else None
        items.append(
            {
                "key": f"lae:{r.conversation_id}:{r.turn_index}:{r.system}",
                "task": "lend-an-ear",
                "group": f"{r.conversation_id}:{r.turn_index}",
                "conversation": r.conversation_id,
                "context": [m.model_dump() for m in context],
                "reply": r.response,
                "system": r.system,
                "judge": r.aggregated_empathy,
                "expert": expert,
            }
        )
    rng = random.Random(seed)
    per_dialogue = turn_per_dialogue(split, rng, use or "evaluate") if "esconv" in tasks else []
    chosen = per_dialogue[:esconv_contexts] if "esconv" in tasks else []
    for i, turn in enumerate(chosen):
        others = rng.sample([t for t in per_dialogue if t.dialogue_id != turn.dialogue_id], OTHERS)
        replies = [("reference", turn.reply)] + [("other", t.reply) for t in others]
        replies += [("platitude", HELD_OUT_PLATITUDES[i % 6]), ("evasive", HELD_OUT_EVASIVE[i % 6])]
        said = _last_user_message(turn.context)
        replies += [
            ("echo", said),
            ("reference + echo", f"{turn.reply.rstrip()} {said}"),
            ("turned-around echo", f"So {_turned_around(said)}"),
        ]
        for j, (kind, reply) in enumerate(replies):
            items.append(
                {
                    "key": f"esconv:{turn.dialogue_id}:{turn.index}:{j}",
                    "task": "esconv",
                    "group": f"{turn.dialogue_id}:{turn.index}",
                    "context": turn.context_messages(),
                    "reply": reply,
                    "kind": kind,
                }
            )
    return items
