"""Preference pairs of ``care train build-data``, in the method's shape: same context, judged by majority.

- **Candidate pairs** (the method's): for every selected context, each backend in ``candidates:``
  rolls out one reply (plus, with ``include_reference``, the dataset's own human reply); every
  pair of candidates is compared by each of the ``judges:`` (the order of the two replies is a
  seeded coin flip per judge, against position bias); a pair is kept when a strict majority
  prefers the same reply, ties and split votes are dropped. No judge votes on a pair holding a
  reply its own model wrote (the config refuses such judges; the vote is skipped here too).
- **Lend-an-Ear pairs**: the best- vs worst-rated of 12 systems' replies to the same turn, by the
  MINT judge's aggregated empathy score (which rewards validating emotions, encouraging
  elaboration and understanding, and penalises advice giving, self-orientation and dismissal);
  ``mint_reject_human`` decides whether the human reply may be the rejected one. The MINT judge
  favours longer replies, so the report gives the length balance of these pairs
  (:func:`length_balance`), and ``mint_max_length_ratio`` drops the most unbalanced ones.
- **Off-context pairs** (``offcontext_pairs``, off by default): the reference reply vs a supporter
  reply from another dialogue. Not the method's pairs: the rejected reply is off-topic.

The **annotator** labels the chosen reply's ESConv strategies wherever the data has none (every
model reply), so every pair carries ``chosen_strategy_counts`` for r_align.
"""

from __future__ import annotations

import hashlib
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from care_lab.data import JudgedResponse, SupportDialogue, SupportTurn
from care_lab.data.judged_pairs import make_pair, mint_judge_pairs
from care_lab.training._calls import ask
from care_lab.training.config import model_identity
from care_lab.training.prompts import (
    annotator_messages,
    annotator_schema,
    candidate_messages,
    pair_judge_messages,
    pair_judge_schema,
    parse_annotation,
    parse_pair_verdict,
)
from care_lab.training.targets import BuildContext, counts_json, truncate
from care_sdk.errors import CareError
from care_sdk.types import as_messages

__all__ = [
    "annotate",
    "candidate_pairs",
    "length_balance",
    "majority",
    "mint_pairs",
    "offcontext_pairs",
]


def majority(votes: Sequence[str | None], judges: int) -> tuple[str, int] | None:
    """The reply a strict majority of ``judges`` prefers (``"A"`` or ``"B"``) and its vote count.

    A judge that failed counts as no vote; a tie verdict votes for neither. ``None`` when no
    reply has more than half of the judges.

    Examples:
        >>> majority(["A", "A", "B"], 3), majority(["A", "tie", "B"], 3), majority(["A", "A", None], 3)
        (('A', 2), None, ('A', 2))
    """
    counts = Counter(v for v in votes if v in ("A", "B"))
    for side in ("A", "B"):
        if counts[side] * 2 > judges:
            return side, counts[side]
    return None


def _reply(text: str) -> str:
    reply = text.strip()
    if not reply:
        raise ValueError("empty reply")
    return reply


def _flip(*parts: object) -> bool:
    return hashlib.sha256(":".join(map(str, parts)).encode()).digest()[0] % 2 == 1


def _rollouts(
    turns: list[tuple[SupportTurn, str]], ctx: BuildContext
) -> list[list[tuple[str, str, Sequence[str] | None]]]:
    """Per turn, its candidates: ``(system, reply, strategies or None)``."""
    cfg, pool, report, log = ctx.cfg, ctx.pool, ctx.report, ctx.log
    out: list[list[tuple[str, str, Sequence[str] | None]]] = [
        [("reference", turn.reply, turn.strategies)] if cfg.include_reference else [] for turn, _ in turns
    ]
    prompts = [candidate_messages(truncate(turn.context, cfg.max_context_messages)) for turn, _ in turns]
    for k, spec in enumerate(cfg.candidates):
        backend = pool.get(spec)
        log(f"build-data: candidate {k + 1} ({backend.identity}) replies to {len(prompts)} contexts")
        replies = ask(
            backend,
            prompts,
            _reply,
            what="candidate",
            schema=None,
            max_tokens=cfg.candidate_max_tokens,
            attempts=2,
            seed=cfg.seed + 1000 * (k + 1),
            temperature=cfg.candidate_temperature,
        )
        for pos, reply in enumerate(replies):
            if isinstance(reply, CareError):
                report.pairs["candidates: reply failed"] += 1
            elif any(reply == text for _, text, _ in out[pos]):
                report.pairs["candidates: duplicate reply"] += 1
            else:
                report.pairs["candidates: replies"] += 1
                out[pos].append((f"candidate{k + 1}:{spec}", reply, None))
    return out


def _author(system: str) -> str | None:
    """The model that wrote a candidate (``candidate<k>:<spec>``); ``None`` for the human reference."""
    head, _, spec = system.partition(":")
    return model_identity(spec) if head.startswith("candidate") and spec else None


def length_balance(pairs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per pair origin: pairs, the share whose chosen reply is the longer (characters), median lengths.

    Examples:
        >>> length_balance([{"origin": "mint-judge", "chosen": "a long reply", "rejected": "short"}])
        {'mint-judge': {'pairs': 1, 'chosen longer': 1.0, 'median chosen chars': 12, 'median rejected chars': 5}}
    """
    by_origin: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for pair in pairs:
        by_origin[str(pair.get("origin", pair.get("source")))].append((len(pair["chosen"]), len(pair["rejected"])))
    out: dict[str, dict[str, float]] = {}
    for origin, lengths in sorted(by_origin.items()):
        longer = sum(1.0 if c > r else 0.5 if c == r else 0.0 for c, r in lengths)
        out[origin] = {
            "pairs": len(lengths),
            "chosen longer": round(longer / len(lengths), 4),
            "median chosen chars": statistics.median(c for c, _ in lengths),
            "median rejected chars": statistics.median(r for _, r in lengths),
        }
    return out


def candidate_pairs(turns: list[tuple[SupportTurn, str]], ctx: BuildContext) -> list[dict[str, Any]]:
    """Candidate replies per context, compared pairwise by the judges; majority-preferred pairs."""
    cfg, pool, report, log = ctx.cfg, ctx.pool, ctx.report, ctx.log
    if cfg.judges is None or not turns:
        return []
    candidates = _rollouts(turns, ctx)
    comparisons = [
        (t, i, j) for t, cands in enumerate(candidates) for i in range(len(cands)) for j in range(i + 1, len(cands))
    ]
    report.pairs["candidates: comparisons"] += len(comparisons)
    votes: list[list[str | None]] = [[] for _ in comparisons]
    voters = [0] * len(comparisons)
    for n, spec in enumerate(cfg.judges):
        judge = pool.get(spec)
        own = model_identity(spec)
        mine = [
            k
            for k, (t, i, j) in enumerate(comparisons)
            if own not in (_author(candidates[t][i][0]), _author(candidates[t][j][0]))
        ]
        report.pairs["candidates: self-votes skipped"] += len(comparisons) - len(mine)
        log(f"build-data: pair judge {n + 1} ({judge.identity}) compares {len(mine)} pairs")
        flips = {
            k: _flip(
                cfg.seed,
                turns[comparisons[k][0]][0].dialogue_id,
                turns[comparisons[k][0]][0].index,
                comparisons[k][1],
                comparisons[k][2],
                n,
            )
            for k in mine
        }
        prompts = []
        for k in mine:
            t, i, j = comparisons[k]
            a, b = (
                candidates[t][j][1] if flips[k] else candidates[t][i][1],
                candidates[t][i][1] if flips[k] else candidates[t][j][1],
            )
            prompts.append(pair_judge_messages(truncate(turns[t][0].context, cfg.max_context_messages), a, b))
        verdicts = ctx.ask_judge(n, judge, prompts, parse_pair_verdict, what="pair judge", schema=pair_judge_schema())
        for k, verdict in zip(mine, verdicts, strict=True):
            voters[k] += 1
            if isinstance(verdict, CareError):
                report.pairs[f"pair judge {n + 1}: error"] += 1
                votes[k].append(None)
            else:  # votes are stored for the unflipped order: "A" is candidate i
                votes[k].append({"A": "B", "B": "A"}.get(verdict, verdict) if flips[k] else verdict)
    kept: dict[int, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for (t, i, j), vote, eligible in zip(comparisons, votes, voters, strict=True):
        if eligible == 0:
            report.pairs["candidates: dropped (no judge without a reply in the pair)"] += 1
            continue
        won = majority(vote, eligible)
        if won is None:
            report.pairs["candidates: dropped (tie or split vote)"] += 1
            continue
        turn, split = turns[t]
        best, worst = (candidates[t][i], candidates[t][j]) if won[0] == "A" else (candidates[t][j], candidates[t][i])
        record = make_pair(
            f"{turn.dialogue_id}#{turn.index}#c{i}{j}",
            turn,
            split,
            turn.context,
            best[1],
            worst[1],
            best[2],
            origin="candidates",
            chosen_system=best[0],
            rejected_system=worst[0],
            votes=f"{won[1]}/{eligible}",
        )
        kept[t].append((won[1], record))
    out = []
    for t in sorted(kept):
        ranked = sorted(kept[t], key=lambda x: -x[0])
        out += [record for _, record in ranked[: cfg.max_pairs_per_context]]
        report.pairs["candidates: beyond max_pairs_per_context"] += max(0, len(ranked) - cfg.max_pairs_per_context)
    return out


def mint_pairs(
    dialogues: list[tuple[SupportDialogue, str]], judged: Sequence[JudgedResponse], ctx: BuildContext
) -> list[dict[str, Any]]:
    """Lend-an-Ear pairs (:func:`~care_lab.data.judged_pairs.mint_judge_pairs`) with the config's
    ``pref_margin``, ``max_pairs_per_turn``, ``mint_reject_human`` and ``mint_max_length_ratio``,
    counted in the report."""
    cfg = ctx.cfg
    return mint_judge_pairs(
        dialogues,
        judged,
        margin=cfg.pref_margin,
        max_pairs_per_turn=cfg.max_pairs_per_turn,
        reject_human=cfg.mint_reject_human,
        max_length_ratio=cfg.mint_max_length_ratio,
        counts=ctx.report.pairs,
    )


def offcontext_pairs(
    candidates: list[tuple[SupportTurn, str]], pool: dict[str, list[SupportTurn]], ctx: BuildContext
) -> list[dict[str, Any]]:
    """Off-context pairs: the ESConv reference reply vs a supporter reply drawn (seeded) from another
    ESConv dialogue of the same split. An off-topic negative, not the method's pairs (off by default)."""
    cfg, report = ctx.cfg, ctx.report
    rng = random.Random(cfg.seed)
    by_split: dict[str, list[SupportTurn]] = defaultdict(list)
    for turn, split in candidates:
        if turn.source == "esconv":
            by_split[split].append(turn)
    out = []
    for split, turns in sorted(by_split.items()):
        replies = [t for t in pool[split] if t.source == "esconv"]
        for turn in turns:
            others = [t for t in rng.sample(replies, min(len(replies), 8)) if t.dialogue_id != turn.dialogue_id]
            if not others:
                report.pairs["offcontext: no reply from another dialogue"] += 1
                continue
            out.append(
                make_pair(
                    f"{turn.dialogue_id}#{turn.index}#off",
                    turn,
                    split,
                    turn.context,
                    turn.reply,
                    others[0].reply,
                    turn.strategies,
                    origin="offcontext",
                    chosen_system="reference",
                    rejected_system=f"other:{others[0].dialogue_id}#{others[0].index}",
                )
            )
    return out


def annotate(pairs: list[dict[str, Any]], ctx: BuildContext) -> list[dict[str, Any]]:
    """Label unlabelled chosen replies with the annotator; add ``chosen_strategy_counts``; drop the unlabelled."""
    cfg, mapping, pool, report, log = ctx.cfg, ctx.mapping, ctx.pool, ctx.report, ctx.log
    todo = [i for i, p in enumerate(pairs) if p["chosen_strategies"] is None]
    if todo and cfg.annotator is None:
        report.pairs["dropped: no strategy labels (no annotator)"] += len(todo)
    elif todo:
        assert cfg.annotator is not None
        annotator = pool.get(cfg.annotator)
        log(f"build-data: annotator {annotator.identity} labels {len(todo)} replies")
        prompts = [
            annotator_messages(
                truncate(as_messages(pairs[i]["context"]), cfg.max_context_messages),
                pairs[i]["chosen"],
            )
            for i in todo
        ]
        answers = ask(
            annotator,
            prompts,
            parse_annotation,
            what="annotator",
            schema=annotator_schema(),
            max_tokens=64,
            attempts=2,
            seed=cfg.seed + 7,
        )
        for i, labels in zip(todo, answers, strict=True):
            if isinstance(labels, CareError):
                report.pairs["dropped: annotation failed"] += 1
                continue
            pairs[i]["chosen_strategies"] = labels
            pairs[i]["strategy_origin"] = "annotator"
            report.pairs["annotated"] += 1
    out = []
    for pair in pairs:
        if pair["chosen_strategies"] is None:
            continue
        pair.setdefault("strategy_origin", "label")
        pair["chosen_strategy_counts"] = counts_json(mapping.counts(pair["chosen_strategies"]))
        out.append(pair)
    return out
