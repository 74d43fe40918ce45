"""How often the guards flag honest replies: every flag's rate on real supporter replies, no model.

The guards' policies turn a flag into a lower reward, so a flag whose policy changes the reward
must stay rare on honest replies: under :data:`MAX_HONEST_RATE` on every data set. The honest
sets, each reply read against its own dialogue so far (messages with roles):

- ``esconv_valid``: ESConv valid supporter turns (``selection``: the only set thresholds may be
  chosen on);
- ``esconv_test``: ESConv test supporter turns (``selection``, read many times before);
- ``lend_an_ear_human``: the human supporter turns of the 50 Lend-an-Ear conversations (the
  ``gold`` replies of the judged turns; ``selection``);
- ``lend_an_ear_qwen3_4b``: the 11 Qwen3-4B systems' judged replies to the same turns, each
  after the human dialogue so far (``selection``);
- ``sage_<model>``: the assistant turns of the SAGE/RLVER simulated rollouts of one supporter
  model that are not ``test`` turns (:mod:`care_lab.data.sage_turns`): the turns the quality
  benchmark scored (``selection``) and the turns no simulated emotion change follows, which are no
  item of either set. The test turns, and their emotion changes, are skipped and counted
  (``meta["skipped_test_turns"]``); a test set is read once per shipped artifact, through the
  test-read ledger.

These are measurements: no threshold is chosen on any of them other than ESConv valid.
``benchmarks/bench_guard_rates.py`` writes the table.

Examples:
    >>> from care_sdk.types import Message
    >>> honest = HonestSet("demo", "selection", ("demo.jsonl",), "two replies", [
    ...     ((Message(role="user", content="I lost my job."),), "That is a lot. What happened?"),
    ...     ((), ""),
    ... ])
    >>> rates = flag_rates(honest)
    >>> rates["empty_reply"], rates["forged_turn"]["count"]
    ({'count': 1, 'n': 2, 'rate': 0.5}, 0)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from care_lab.data import load_esconv, load_judged_turns, load_lend_an_ear, load_sage_rollouts
from care_lab.data.sage_turns import rollout_test_turns
from care_sdk.guards import (
    EMPTY_REPLY,
    NO_WORDS,
    POLICY_FLAGS,
    REPEATED_OWN_TURN,
    TRUNCATED,
    Guards,
    penalised,
    screen,
)
from care_sdk.types import Message

__all__ = [
    "COUNTED_FLAGS",
    "JUDGED_FILE",
    "MAX_HONEST_RATE",
    "REWARD_CHANGED",
    "HonestSet",
    "emotion_after",
    "flag_rates",
    "honest_sets",
    "measure",
]

MAX_HONEST_RATE = 0.01
"""The largest share of honest replies a flag may take when its policy changes the reward."""
REWARD_CHANGED = "reward_changed"
"""The table's row of replies whose reward the guards change (any pre-check or acting flag)."""
COUNTED_FLAGS = (EMPTY_REPLY, NO_WORDS, *(f for f in POLICY_FLAGS if f != "over_length"), TRUNCATED)
"""The flags counted, in table order: the pre-checks, every detector's flag, and ``truncated``
(longer than ``max_chars``: information with the default ``over_length="truncate"``, the
``over_length`` flag otherwise)."""
JUDGED_FILE = "judged_turns/judged_turn_responses_gold_and_qwen3-4b_systems.jsonl"
"""The judged Lend-an-Ear replies, under ``mint_lend_an_ear``."""
Turn = tuple[Sequence[Message], str]


@dataclass(frozen=True)
class HonestSet:
    """Honest replies of one data set, each with the dialogue before it.

    Examples:
        >>> HonestSet("x", "selection", ("x.jsonl",), "none").turns
        []
    """

    name: str
    """Short id, the table's column."""
    role: str
    """The data's role in the project's protocol (``selection``, ``test``, ``eval-only``)."""
    files: tuple[str, ...]
    """The files read, relative to the data directory."""
    description: str
    """What the replies are."""
    turns: list[Turn] = field(default_factory=list)
    """``(context messages, reply)`` pairs."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Per-turn extras some sets carry (the SAGE rollouts: ``deltas``, the emotion change after each turn)."""


def honest_sets(root: str | Path) -> list[HonestSet]:
    """Every honest set under the data directory ``root`` (see the module docstring).

    Examples:
        >>> import os
        >>> root = Path(os.environ.get("CARE_DATA_DIR", "/no-data"))
        >>> if (root / "esconv").exists():
        ...     assert [s.name for s in honest_sets(root)][:2] == ["esconv_valid", "esconv_test"]
    """
    root = Path(root)
    sets = []
    for split in ("valid", "test"):
        rel = f"esconv/{split}.jsonl"
        turns: list[Turn] = [(t.context, t.reply) for d in load_esconv(root / rel) for t in d.supporter_turns()]
        why = "the set thresholds may be chosen on" if split == "valid" else "read many times before"
        sets.append(HonestSet(f"esconv_{split}", "selection", (rel,), f"ESConv {split} supporter turns ({why})", turns))
    lae = root / "mint_lend_an_ear"
    conversations = {d.id: d for d in load_lend_an_ear(lae)}
    human: list[Turn] = [(t.context, t.reply) for d in conversations.values() for t in d.supporter_turns()]
    conv_file = "mint_lend_an_ear/lend_an_ear_eval/lend_an_ear_50_conversations.csv"
    sets.append(HonestSet("lend_an_ear_human", "selection", (conv_file,), "Lend-an-Ear human supporter turns", human))
    judged: list[Turn] = [
        (conversations[r.conversation_id].messages[: r.turn_index], r.response)
        for r in load_judged_turns(lae / JUDGED_FILE)
        if r.system != "gold" and r.conversation_id in conversations
    ]
    sets.append(
        HonestSet(
            "lend_an_ear_qwen3_4b",
            "selection",
            (conv_file, f"mint_lend_an_ear/{JUDGED_FILE}"),
            "Lend-an-Ear judged replies of the 11 Qwen3-4B systems, after the human dialogue so far",
            judged,
        )
    )
    for path in sorted(root.glob("sage_rlver/results_*/*_result.jsonl")):
        rollouts = load_sage_rollouts(path)  # no test-read entry: the test turns' emotion changes are withheld
        test = rollout_test_turns(path)
        turns, deltas, skipped = [], [], 0
        for rollout in rollouts:
            hidden = set(rollout.withheld) | (set(test.get(rollout.id, ())) if test is not None else set())
            for i, message in enumerate(rollout.messages):
                if message.role != "assistant":
                    continue
                if i in hidden or test is None:
                    skipped += 1
                    continue
                turns.append((rollout.messages[:i], message.content))
                deltas.append(rollout.deltas.get(i))
        model = path.name.removesuffix("_result.jsonl")
        sets.append(
            HonestSet(
                f"sage_{model}",
                "selection",
                (str(path.relative_to(root)),),
                f"SAGE/RLVER simulated rollouts of {model}: the assistant turns that are not test turns "
                f"({skipped} test turns skipped)",
                turns,
                {"deltas": deltas, "skipped_test_turns": skipped},
            )
        )
    return sets


def _flags(turn: Turn, guards: Guards) -> tuple[str, ...]:
    context, reply = turn
    return screen(reply, guards.report_only(), context).flags


def flag_rates(honest: HonestSet, guards: Guards | None = None) -> dict[str, dict[str, Any]]:
    """Every counted flag's ``count``, ``n`` and ``rate`` on the set, and the :data:`REWARD_CHANGED` row.

    Examples:
        >>> from care_sdk.types import Message
        >>> said = "I lost my job and my wife left me last week"
        >>> echo = HonestSet("e", "selection", (), "", [((Message(role="user", content=said),), said)])
        >>> flag_rates(echo)["copied_user"], flag_rates(echo)["reward_changed"]["count"]
        ({'count': 1, 'n': 1, 'rate': 1.0}, 1)
    """
    guards = guards or Guards()
    counts = dict.fromkeys((*COUNTED_FLAGS, REWARD_CHANGED), 0)
    for turn in honest.turns:
        flags = _flags(turn, guards)
        for flag in flags:
            counts[flag] = counts.get(flag, 0) + 1
        counts[REWARD_CHANGED] += bool({EMPTY_REPLY, NO_WORDS} & set(flags) or penalised(flags, guards))
    n = len(honest.turns)
    return {f: {"count": c, "n": n, "rate": round(c / n, 6) if n else None} for f, c in counts.items()}


def emotion_after(honest: HonestSet, flag: str = REPEATED_OWN_TURN, guards: Guards | None = None) -> dict[str, Any]:
    """The simulated user's mean emotion change after turns with and without ``flag`` (SAGE sets only).

    Examples:
        >>> emotion_after(HonestSet("x", "eval-only", (), ""))
        {}
    """
    deltas = honest.meta.get("deltas")
    if not deltas:
        return {}
    guards = guards or Guards()
    groups: dict[str, list[float]] = {"flagged": [], "unflagged": []}
    for turn, delta in zip(honest.turns, deltas, strict=True):
        if delta is not None:
            groups["flagged" if flag in _flags(turn, guards) else "unflagged"].append(delta)
    return {
        key: {"n": len(values), "mean": round(statistics.fmean(values), 3) if values else None}
        for key, values in groups.items()
    }


def measure(sets: Sequence[HonestSet], guards: Guards | None = None) -> dict[str, Any]:
    """The rates of every set, the policy of each flag, and the flags that break the rule.

    A flag breaks the rule when its policy changes the reward (pre-checks always do) and its rate
    on some set is :data:`MAX_HONEST_RATE` or more.

    Examples:
        >>> out = measure([HonestSet("x", "selection", ("x.jsonl",), "none")])
        >>> out["policies"]["repeated_own_turn"], out["violations"]
        ('report', [])
    """
    guards = guards or Guards()
    policies: dict[str, str] = {f: "zero" if f in (EMPTY_REPLY, NO_WORDS) else guards.policy(f) for f in COUNTED_FLAGS}
    policies[TRUNCATED] = "information" if guards.over_length == "truncate" else guards.policy("over_length")
    rates = {s.name: flag_rates(s, guards) for s in sets}
    violations = [
        {"flag": f, "set": name, **row[f]}
        for name, row in rates.items()
        for f in COUNTED_FLAGS
        if policies[f] in ("zero", "penalise") and row[f]["rate"] is not None and row[f]["rate"] >= MAX_HONEST_RATE
    ]
    return {
        "guards": guards.model_dump(mode="json"),
        "policies": policies,
        "rule": f"every flag whose policy changes the reward flags under {MAX_HONEST_RATE:.0%} of each set",
        "data": [
            {"name": s.name, "role": s.role, "files": list(s.files), "description": s.description, "read": len(s.turns)}
            | ({"skipped_test_turns": s.meta["skipped_test_turns"]} if "skipped_test_turns" in s.meta else {})
            for s in sets
        ],
        "rates": rates,
        "violations": violations,
        "emotion_after_repeated_own_turn": {s.name: e for s in sets if (e := emotion_after(s, guards=guards))},
    }
