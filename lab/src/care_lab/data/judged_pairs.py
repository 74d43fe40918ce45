"""Lend-an-Ear's judged preference pairs: the MINT judge's best- vs worst-rated reply to the same turn.

Lend-an-Ear ships the replies of 12 systems (and the human supporter's) to the same supporter
turns, each scored by the MINT judge (which rewards validating emotions, encouraging elaboration
and understanding, and penalises advice giving, self-orientation and dismissal).
:func:`mint_judge_pairs` turns them into preference pairs; ``care train build-data`` trains on the
pairs of the ``train`` conversations, and ``care eval generator`` evaluates on those of the
held-out ones, both through this one function. :func:`make_pair` is the pair record both write.

Examples:
    >>> sorted(HUMAN_SYSTEMS)
    ['gold', 'reference']
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from care_lab.data.mint import JudgedResponse
from care_lab.data.records import SupportDialogue, SupportTurn
from care_sdk.types import Message

__all__ = ["HUMAN_SYSTEMS", "make_pair", "mint_judge_pairs"]

HUMAN_SYSTEMS = frozenset({"reference", "gold"})
"""The ``chosen_system`` / ``rejected_system`` names of a human supporter's reply (ESConv, Lend-an-Ear)."""


def make_pair(
    record_id: str,
    turn: SupportTurn | tuple[str, str, int],
    split: str,
    context: Sequence[Message],
    chosen: str,
    rejected: str,
    strategies: Sequence[str] | None,
    **extra: Any,
) -> dict[str, Any]:
    """A pair record (``chosen_strategies`` ``None`` until the annotator labels it).

    Examples:
        >>> pair = make_pair("c1#1#0", ("lend-an-ear", "c1", 1), "train", [], "Oh no.", "Ok.", None, origin="x")
        >>> pair["dialogue_id"], pair["turn_index"], pair["chosen_strategies"], pair["origin"]
        ('c1', 1, None, 'x')
    """
    source, dialogue_id, index = (turn.source, turn.dialogue_id, turn.index) if isinstance(turn, SupportTurn) else turn
    return {
        "id": record_id,
        "source": source,
        "dialogue_id": dialogue_id,
        "turn_index": index,
        "split": split,
        "context": [m.model_dump() for m in context],
        "chosen": chosen,
        "rejected": rejected,
        "chosen_strategies": list(strategies) if strategies is not None else None,
        **extra,
    }


def mint_judge_pairs(
    dialogues: Sequence[tuple[SupportDialogue, str]],
    judged: Sequence[JudgedResponse],
    *,
    margin: float = 1.0,
    max_pairs_per_turn: int = 2,
    reject_human: bool = False,
    max_length_ratio: float | None = None,
    counts: Counter[str] | None = None,
) -> list[dict[str, Any]]:
    """Lend-an-Ear pairs: best vs worst MINT-judge score of the judged replies to the same turn.

    For every judged supporter turn of ``dialogues`` (each with its split): the best- vs the
    worst-rated reply, then the second best vs the second worst, and so on, while their judge
    scores differ by at least ``margin``, up to ``max_pairs_per_turn``; identical replies are
    skipped. ``reject_human`` lets the human reply (:data:`HUMAN_SYSTEMS`) be the rejected one;
    ``max_length_ratio`` drops a pair whose longer reply is more than that many times the shorter.

    Args:
        dialogues: the Lend-an-Ear conversations and their splits (other sources are ignored).
        judged: the judged replies (:func:`~care_lab.data.load_judged_turns`).
        margin: minimum judge-score gap of a pair.
        max_pairs_per_turn: pairs per judged turn at most.
        reject_human: whether the human reply may be the rejected one.
        max_length_ratio: the longest allowed length ratio of a pair's replies (``None``: any).
        counts: where to count turns, pairs and what was dropped (``mint: ...`` keys).

    Examples:
        >>> from care_lab.data import JudgedResponse, SupportDialogue
        >>> d = SupportDialogue(id="c1", source="lend-an-ear", messages=[
        ...     {"role": "user", "content": "I lost my job."}, {"role": "assistant", "content": "Oh no."}])
        >>> def reply(system, text, score):
        ...     return JudgedResponse(system=system, conversation_id="c1", turn_index=1, response=text,
        ...                           scores={}, aggregated_empathy=score, judge="j")
        >>> judged = [reply("gold", "Oh no.", 3.0), reply("a", "That sounds so hard.", 4.5), reply("b", "Ok.", 1.0)]
        >>> [(p["chosen_system"], p["rejected_system"], p["margin"]) for p in mint_judge_pairs([(d, "test")], judged)]
        [('a', 'b', 3.5)]
    """
    if margin < 0 or max_pairs_per_turn < 1:
        raise ValueError(f"margin must be >= 0 and max_pairs_per_turn >= 1, got {margin} and {max_pairs_per_turn}")
    counts = Counter() if counts is None else counts
    by_id = {d.id: (d, split) for d, split in dialogues if d.source == "lend-an-ear"}
    groups: dict[tuple[str, int], list[JudgedResponse]] = defaultdict(list)
    for response in judged:
        groups[(response.conversation_id, response.turn_index)].append(response)
    out = []
    for (cid, index), responses in sorted(groups.items()):
        if cid not in by_id:
            continue
        dialogue, split = by_id[cid]
        if index >= len(dialogue.messages) or dialogue.messages[index].role != "assistant":
            counts["mint: turn index does not match the conversation"] += 1
            continue
        counts["mint: turns"] += 1
        ranked = sorted(responses, key=lambda r: (-r.aggregated_empathy, r.system))
        worsts = [r for r in reversed(ranked) if reject_human or r.system not in HUMAN_SYSTEMS]
        if len(worsts) < len(ranked):
            counts["mint: turns whose human reply may not be rejected"] += 1
        made = 0
        for best, worst in zip(ranked, worsts, strict=False):
            if made >= max_pairs_per_turn or best.aggregated_empathy - worst.aggregated_empathy < margin:
                break
            if best.response.strip() == worst.response.strip():
                continue
            lengths = sorted((len(best.response), len(worst.response)))
            if max_length_ratio is not None and lengths[1] > max_length_ratio * max(lengths[0], 1):
                counts["mint: dropped (length ratio above mint_max_length_ratio)"] += 1
                continue
            out.append(
                make_pair(
                    f"{cid}#{index}#{made}",
                    ("lend-an-ear", cid, index),
                    split,
                    dialogue.messages[:index],
                    best.response,
                    worst.response,
                    dialogue.strategies[index] if best.system in HUMAN_SYSTEMS else None,
                    origin="mint-judge",
                    chosen_system=best.system,
                    rejected_system=worst.system,
                    margin=round(best.aggregated_empathy - worst.aggregated_empathy, 4),
                )
            )
            made += 1
        counts["mint: pairs"] += made
        if made == 0:
            counts["mint: turns without a pair above the margin"] += 1
    return out
