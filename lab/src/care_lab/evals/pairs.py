"""Held-out preference pairs for the generator's win rate: from a pairs file, or Lend-an-Ear's held-out turns.

Two sources, both refusing training data:

- :func:`read_pairs_file`: a JSONL file of ``{"context": [...], "chosen": ..., "rejected": ...}``
  records, such as ``pairs/valid.jsonl`` or ``pairs/test.jsonl`` written by ``care train
  build-data``. The file's declared data role (``roles.json``, see
  :mod:`care_lab.data.roles`) must be held out (selection, test or eval-only), and no record may
  carry ``"split": "train"``.
- :func:`lend_an_ear_held_out_pairs`: the pairs build-data would make from the MINT-judged
  replies of the held-out Lend-an-Ear conversations (:data:`~care_lab.data.LEND_AN_EAR_HELD_OUT`,
  the split defined once in :mod:`care_lab.data.splits`), built by the same code
  (:func:`care_lab.data.judged_pairs.mint_judge_pairs`) with the same settings, so they are exactly the
  held-out pairs build-data writes, and never one of its training pairs.

Examples:
    >>> pair = EvalPair(id="d1#3#0", group="d1#3", context=(Message(role="user", content="I lost my job."),),
    ...                 chosen="That sounds hard. What happened?", rejected="Just find another one.")
    >>> pair.group, len(pair.context)
    ('d1#3', 1)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from care_sdk.errors import InputError
from care_sdk.jsonl import BadLine, iter_jsonl
from care_sdk.types import Message

__all__ = ["EvalPair", "HeldOutPairs", "context_group", "lend_an_ear_held_out_pairs", "read_pairs_file"]

JUDGED_FILE = "judged_turn_responses_gold_and_qwen3-4b_systems.jsonl"
CONVERSATIONS_FILE = "lend_an_ear_50_conversations.csv"


@dataclass(frozen=True)
class EvalPair:
    """One held-out preference pair: a context, the preferred reply and the dispreferred one.

    Examples:
        >>> EvalPair(id="p1", group="c1", context=(), chosen="a", rejected="b").fields
        {}
    """

    id: str
    """Unique within the pairs; the resume key."""
    group: str
    """The context the pair answers (pairs sharing one are resampled together in the bootstrap)."""
    context: tuple[Message, ...]
    """The messages before the reply."""
    chosen: str
    """The preferred reply."""
    rejected: str
    """The dispreferred reply."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Provenance copied into the records (``split``, ``dialogue_id``, ``chosen_system``, ...)."""


@dataclass
class HeldOutPairs:
    """Pairs and where they came from.

    Examples:
        >>> HeldOutPairs(pairs=[], sources=[], description="none").contexts
        0
    """

    pairs: list[EvalPair]
    """The pairs, in file (or data) order."""
    sources: list[Path]
    """The data files read (their hashes go into the report)."""
    description: str
    """One line for the report: what the pairs are and why they are held out."""
    roles: dict[str, str] = field(default_factory=dict)
    """Each source's data role (or split)."""
    available: int = 0
    """Pairs before ``limit``."""

    @property
    def contexts(self) -> int:
        """How many distinct contexts the pairs answer."""
        return len({p.group for p in self.pairs})


def context_group(context: tuple[Message, ...] | list[Message]) -> str:
    """A short hash of a context, the bootstrap unit of pairs that name no dialogue and turn.

    Examples:
        >>> context_group([Message(role="user", content="hi")]) == context_group((Message(role="user", content="hi"),))
        True
    """
    payload = json.dumps([[m.role, m.content] for m in context], ensure_ascii=False)
    return "ctx:" + hashlib.sha256(payload.encode()).hexdigest()[:16]


def _first_contexts(pairs: list[EvalPair], limit: int | None) -> list[EvalPair]:
    if limit is None:
        return pairs
    keep = set(list(dict.fromkeys(p.group for p in pairs))[: max(0, limit)])
    return [p for p in pairs if p.group in keep]


def _check_record(record: dict[str, Any]) -> tuple[str | None, str] | None:
    context = record.get("context")
    if not isinstance(context, list) or not context:
        return "context", "expected a non-empty list of chat messages"
    for i, message in enumerate(context):
        if not isinstance(message, dict):
            return f"context[{i}]", f"expected a message object, got {type(message).__name__}"
        try:
            Message.model_validate(message)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            return f"context[{i}].{where}", first["msg"]
    for key in ("chosen", "rejected"):
        value = record.get(key)
        if not isinstance(value, str) or not value.strip():
            return key, "expected a non-empty string"
    if record.get("split") == "train":
        return "split", "a training record; refusing to evaluate on training data"
    if "id" in record and not isinstance(record["id"], str | int):
        return "id", "expected a string"
    return None


def read_pairs_file(path: str | Path, *, limit: int | None = None, test_read: object | None = None) -> HeldOutPairs:
    """The pairs of a held-out pairs file (``care train build-data``'s ``pairs/test.jsonl``, or your own).

    The file's declared role must be selection (``valid``), test or eval-only (a ``roles.json``
    next to it or up to three directories above; build-data writes one); a ``test`` file needs
    ``test_read``, the entry :func:`care_lab.data.results.record_test_read` returned. Each
    line needs ``context`` (chat messages), ``chosen`` and ``rejected``; ``id``, ``dialogue_id``
    and ``turn_index`` are used when present (pairs of the same dialogue turn form one bootstrap
    unit, otherwise the context's hash does).

    Args:
        path: the JSONL file.
        limit: keep the pairs of the first this many contexts (all pairs of a context stay together).
        test_read: the test-read ledger entry of this read (test files only).

    Raises:
        InputError: the file is training data or has no declared role, or a line is unusable
            (the message names the file, the line and the field).

    Examples:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "roles.json").write_text('{"held.jsonl": "selection"}')
        >>> line = {"context": [{"role": "user", "content": "I lost my job."}], "chosen": "Oh no.", "rejected": "Ok."}
        >>> _ = (d / "held.jsonl").write_text(json.dumps(line) + "\\n")
        >>> read_pairs_file(d / "held.jsonl").pairs[0].id
        'line1'
        >>> _ = (d / "roles.json").write_text('{"held.jsonl": "train"}')
        >>> read_pairs_file(d / "held.jsonl")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: .../held.jsonl: refusing to evaluate on train data (evaluation never reads train)
    """
    from care_lab.data.roles import require_held_out

    path = Path(path)
    if not path.is_file():
        raise InputError("no such pairs file", location=str(path))
    role = require_held_out(path, test_read=test_read)
    pairs: list[EvalPair] = []
    seen: dict[str, int] = {}
    for number, record in iter_jsonl(path, check=_check_record):
        pair_id = str(record.get("id", f"line{number}"))
        if pair_id in seen:
            raise BadLine(path, number, f"duplicate id {pair_id!r} (first on line {seen[pair_id]})", field="id")
        seen[pair_id] = number
        context = tuple(Message.model_validate(m) for m in record["context"])
        if "dialogue_id" in record and "turn_index" in record:
            group = f"{record['dialogue_id']}#{record['turn_index']}"
        else:
            group = context_group(context)
        keep = ("split", "source", "origin", "dialogue_id", "turn_index", "chosen_system", "rejected_system")
        pairs.append(
            EvalPair(
                id=pair_id,
                group=group,
                context=context,
                chosen=record["chosen"].strip(),
                rejected=record["rejected"].strip(),
                fields={k: record[k] for k in keep if k in record},
            )
        )
    available = len(pairs)
    return HeldOutPairs(
        pairs=_first_contexts(pairs, limit),
        sources=[path],
        description=f"pairs file {path} (declared {role})",
        roles={str(path): role},
        available=available,
    )


def lend_an_ear_held_out_pairs(
    root: str | Path,
    *,
    margin: float = 1.0,
    max_pairs_per_turn: int = 2,
    reject_human: bool = False,
    limit: int | None = None,
    judged: str | Path | None = None,
) -> HeldOutPairs:
    """The Lend-an-Ear pairs of the held-out conversations, built as ``care train build-data`` builds them.

    For every MINT-judged supporter turn of a conversation whose split
    (:func:`~care_lab.data.lend_an_ear_split`) is in :data:`~care_lab.data.LEND_AN_EAR_HELD_OUT`:
    the best- vs the worst-rated of the systems' replies, while their judge scores differ by at
    least ``margin`` (build-data's ``pref_margin``), up to ``max_pairs_per_turn`` (its
    ``max_pairs_per_turn``); ``reject_human`` is its ``mint_reject_human``. A pair whose context
    also occurs in a training conversation (the same opening message, say) is left out, as
    build-data leaves it out of its valid and test files.

    Args:
        root: the ``mint_lend_an_ear`` directory.
        margin: minimum judge-score gap of a pair.
        max_pairs_per_turn: pairs per judged turn at most.
        reject_human: whether the human reply may be the rejected one.
        limit: keep the pairs of the first this many judged turns (all pairs of a turn stay together).
        judged: the judged-responses JSONL (default: under ``root/judged_turns``).

    Raises:
        InputError: a data file is missing.

    Examples:
        >>> import os, pathlib
        >>> root = pathlib.Path(os.environ.get("CARE_DATA_DIR", "no-data-dir")) / "mint_lend_an_ear"
        >>> if root.exists():
        ...     held = lend_an_ear_held_out_pairs(root, limit=2)
        ...     assert {p.fields["split"] for p in held.pairs} <= {"valid", "test"}
    """
    from care_lab.data import (
        LEND_AN_EAR_HELD_OUT,
        default_strategy_map,
        lend_an_ear_split,
        load_judged_turns,
        load_lend_an_ear,
    )
    from care_lab.data.judged_pairs import mint_judge_pairs

    root = Path(root)
    judged_path = Path(judged) if judged else root / "judged_turns" / JUDGED_FILE
    conversations_path = root / "lend_an_ear_eval" / CONVERSATIONS_FILE
    for required in (judged_path, conversations_path):
        if not required.is_file():
            raise InputError("missing (the Lend-an-Ear data; see the docs' data page)", location=str(required))
    mapping = default_strategy_map()
    dialogues = load_lend_an_ear(root, strategy_map=mapping)
    split_of = [(d, lend_an_ear_split(d.id)) for d in dialogues.records]
    held = [(d, split) for d, split in split_of if split in LEND_AN_EAR_HELD_OUT]
    # A held-out context that also occurs in a training conversation (e.g. the same opening
    # message) was trained on: build-data drops such inputs from its valid and test splits too.
    trained = {
        context_group(d.messages[:i])
        for d, split in split_of
        if split not in LEND_AN_EAR_HELD_OUT
        for i, m in enumerate(d.messages)
        if m.role == "assistant"
    }
    responses = load_judged_turns(judged_path)
    records = mint_judge_pairs(
        held, responses.records, margin=margin, max_pairs_per_turn=max_pairs_per_turn, reject_human=reject_human
    )
    overlapping = [r for r in records if context_group([Message.model_validate(m) for m in r["context"]]) in trained]
    records = [r for r in records if r not in overlapping]
    pairs = [
        EvalPair(
            id=r["id"],
            group=f"{r['dialogue_id']}#{r['turn_index']}",
            context=tuple(Message.model_validate(m) for m in r["context"]),
            chosen=r["chosen"],
            rejected=r["rejected"],
            fields={
                k: r[k] for k in ("split", "dialogue_id", "turn_index", "chosen_system", "rejected_system", "margin")
            },
        )
        for r in records
    ]
    available = len(pairs)
    pairs = _first_contexts(pairs, limit)
    splits = "/".join(LEND_AN_EAR_HELD_OUT)
    return HeldOutPairs(
        pairs=pairs,
        sources=[judged_path, conversations_path],
        description=(
            f"Lend-an-Ear held-out pairs: MINT-judged replies of the {len(held)} {splits} conversations "
            f"(best vs worst judge score, margin >= {margin}, at most {max_pairs_per_turn} per turn); "
            "build-data trains only on the train conversations"
            + (
                f"; {len(overlapping)} pairs left out whose context also opens a train conversation"
                if overlapping
                else ""
            )
        ),
        roles={str(judged_path): splits, str(conversations_path): splits},
        available=available,
    )
