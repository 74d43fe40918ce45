"""The add-on rule's samples (``benchmarks/rules/addons.md``), fixed before the read, for ``bench_addons.py``.

SAGE: per system, the test turns ordered by ``sha256("addons-v1:" + key)``, the first 30, the
systems in turn. EmpatheticIntents: the first mapped listener turn of each dialogue, ordered the
same way, the first 150. The SAGE sample's ids come from the turns' keys and roles alone; the
samples' contents come only with a test-read entry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

SALT = "addons-v1:"
SAGE_PER_SYSTEM = 30
INTENT_TURNS = 150


def _order(key: str) -> str:
    return hashlib.sha256((SALT + key).encode()).hexdigest()


def _sage_sample(turns: Sequence[Any]) -> list[Any]:
    """The rule's SAGE sample: per system the first 30 by the salted hash, the systems in turn."""
    by_model: dict[str, list[Any]] = {}
    for turn in turns:
        by_model.setdefault(turn.model, []).append(turn)
    samples = [sorted(by_model[m], key=lambda t: _order(t.key))[:SAGE_PER_SYSTEM] for m in sorted(by_model)]
    return [t for group in zip(*samples, strict=True) for t in group]  # the systems in turn, each in its order


def sage_sample_keys(data: Path) -> list[str]:
    """The SAGE sample's item ids, from the turns' keys and roles alone (no reply, no emotion change)."""
    from care_lab.data.sage_turns import sage_rollout_files, sage_turn_roles

    roles = sage_turn_roles(sage_rollout_files(data))
    keys = [SimpleNamespace(key=k, model=k.split(":", 1)[0]) for k, role in roles.items() if role == "test"]
    return [k.key for k in _sage_sample(keys)]


def sage_items(data: Path, test_read: Any) -> list[dict[str, Any]]:
    from care_lab.data.sage_turns import sage_rollout_files, sage_test_turns

    items = []
    for turn in _sage_sample(sage_test_turns(sage_rollout_files(data), test_read=test_read)):
        items.append(
            {
                "id": turn.key,
                "system": turn.model,
                "context": [m.model_dump(mode="json") for m in turn.context],
                "reply": turn.reply,
                "delta": turn.delta,
            }
        )
    return items


def intent_sample(data: Path, test_read: Any) -> list[Any]:
    """The rule's EmpatheticIntents sample: the first mapped listener turn of each dialogue, the first 150 by hash."""
    from care_lab.data.intents import load_intent_turns

    first: dict[str, Any] = {}
    for turn in load_intent_turns(data / "empatheticdialogues_intents", test_read=test_read).records:
        if turn.dimension is not None and turn.context and turn.dialogue_id not in first:
            first[turn.dialogue_id] = turn
    return sorted(first.values(), key=lambda t: _order(t.id))[:INTENT_TURNS]


def intent_items(data: Path, test_read: Any) -> list[dict[str, Any]]:
    from care_sdk.prompts import generator_position

    chosen = intent_sample(data, test_read)
    items = []
    for i, turn in enumerate(chosen):
        other = chosen[(i + 1) % len(chosen)]
        items.append(
            {
                "id": turn.id,
                "dimension": turn.dimension.value,
                "intent": turn.intent,
                "turn_number": generator_position(turn.context)[1],
                "context": [m.model_dump(mode="json") for m in turn.context],
                "reply": turn.reply,
                "other": other.reply,
            }
        )
    return items


def smoke_items(data: Path, which: str) -> list[dict[str, Any]]:
    """Two items shaped like ``which``'s from selection data (SAGE turns already scored, ESConv test), to
    check the scoring path without a test read."""
    if which == "sage":
        from care_lab.data.sage_turns import sage_rollout_files, sage_turns

        turns = [t for t in sage_turns(sage_rollout_files(data)) if t.role == "selection"][:2]
        return [
            {
                "id": t.key,
                "system": t.model,
                "context": [m.model_dump(mode="json") for m in t.context][-2:],
                "reply": t.reply[:300],
                "delta": t.delta,
            }
            for t in turns
        ]
    from care_lab.data.esconv import load_esconv

    turns = load_esconv(data / "esconv" / "test.jsonl").records[0].supporter_turns()[:3]
    return [
        {
            "id": f"{t.dialogue_id}#{t.index}",
            "dimension": "affective",
            "intent": None,
            "context": [m.model_dump(mode="json") for m in t.context],
            "reply": t.reply,
            "other": turns[i + 1].reply,
        }
        for i, t in enumerate(turns[:2])
    ]
