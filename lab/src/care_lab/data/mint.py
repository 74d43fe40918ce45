"""MINT / Lend-an-Ear loaders: logged conversations, the 50 human conversations with tactic tags,
and the judged responses of 12 systems to the same supporter turns.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from care_lab.data._issues import IssueLog, Loaded, LoadIssue
from care_lab.data._read import iter_csv, iter_json_list, iter_jsonl
from care_lab.data.records import SupportDialogue
from care_lab.data.strategies import StrategyMap, default_strategy_map
from care_sdk.errors import InputError
from care_sdk.types import Message, Role

__all__ = [
    "MINT_JUDGE_DIMENSIONS",
    "MINT_TACTICS",
    "JudgedResponse",
    "load_judged_turns",
    "load_lend_an_ear",
    "load_mint_conversations",
]

MINT_TACTICS = (
    "information",
    "assistance",
    "advice",
    "validation",
    "emotional_expression",
    "paraphrasing",
    "solidarity",
    "spirituality",
    "self_disclosure",
    "questioning",
    "reappraisal",
    "empowerment",
    "terms_of_endearment",
    "contextualizing",
    "gratitude",
)
"""The fifteen binary empathy tactics of MINT's tactic tags."""

MINT_JUDGE_DIMENSIONS = (
    "validating_emotions",
    "encouraging_elaboration",
    "demonstrating_understanding",
    "advice_giving",
    "self_oriented",
    "dismissing_emotions",
)
"""The six judge dimensions, 1-5 (the last three are negative)."""

_ROLES: dict[str, Role] = {"seeker": "user", "supporter": "assistant"}
_LINE = re.compile(r"^(Seeker|Supporter):\s?(.*)$")


class JudgedResponse(BaseModel):
    """One system's response to one Lend-an-Ear supporter turn, with the judge's scores.

    Examples:
        >>> r = JudgedResponse(system="gold", conversation_id="c1", turn_index=1, response="Oh no!",
        ...                    scores={"validating_emotions": 4}, aggregated_empathy=4.0, judge="j")
        >>> r.turn_index
        1
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    system: str
    """The system that wrote the response (``gold`` is the human supporter)."""
    conversation_id: str
    """The Lend-an-Ear conversation."""
    turn_index: int
    """Position of the supporter turn in the conversation's messages (= length of the history)."""
    response: str
    """The response text."""
    scores: dict[str, int]
    """The judge's 1-5 score per dimension (see :data:`MINT_JUDGE_DIMENSIONS`)."""
    aggregated_empathy: float
    """The judge's aggregate (negative dimensions inverted), higher is better."""
    judge: str
    """The judge model."""


def load_mint_conversations(path: str | Path, *, strict: bool = False) -> Loaded[SupportDialogue]:
    """Load MINT's logged user-LLM support conversations (``training/conversations_322.json``).

    The replies carry no strategy labels. Metadata keys: ``corpus_source`` (``wildchat`` or
    ``sense-7``) and ``model`` (the LLM that answered).

    Examples:
        >>> import tempfile, pathlib, json
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.json"
        >>> _ = p.write_text(json.dumps([{"conversation_id": "T1", "source": "s", "model": "m", "conversation": [
        ...     {"role": "seeker", "content": "hi"}, {"role": "supporter", "content": "hello"}]}]))
        >>> load_mint_conversations(p)[0].messages[1].role
        'assistant'
    """
    path = Path(path)
    log = IssueLog(path, strict=strict)
    records = []
    for pos, obj in iter_json_list(path, log):
        turns = obj.get("conversation")
        if not isinstance(turns, list) or not turns:
            log.add(pos, "conversation", "missing or empty list of messages", dropped=True)
            continue
        roles: list[Role] = []
        texts: list[list[str]] = []
        for j, msg in enumerate(turns):
            role = _ROLES.get(str(msg.get("role")).lower()) if isinstance(msg, dict) else None
            if role is None:
                found = msg.get("role") if isinstance(msg, dict) else msg
                log.add(pos, f"conversation[{j}].role", f"unknown role {found!r}", dropped=True)
                continue
            content = msg.get("content")
            if not isinstance(content, str) or not content.strip():
                log.add(pos, f"conversation[{j}].content", "missing or empty text", dropped=True)
                continue
            if roles and roles[-1] == role:
                texts[-1].append(content.strip())
            else:
                roles.append(role)
                texts.append([content.strip()])
        if not roles:
            log.add(pos, "conversation", "no usable message", dropped=True)
            continue
        cid = obj.get("conversation_id")
        if not isinstance(cid, str) or not cid:
            log.add(pos, "conversation_id", "missing id; using the position")
            cid = f"mint-{pos.strip('[]')}"
        records.append(
            SupportDialogue(
                id=cid,
                source="mint",
                messages=tuple(Message(role=r, content="\n".join(t)) for r, t in zip(roles, texts, strict=True)),
                metadata={"corpus_source": obj.get("source"), "model": obj.get("model")},
            )
        )
    return Loaded(records=records, issues=log.issues)


def _parse_transcript(text: str) -> list[tuple[Role, str]]:
    """Parse ``Seeker: ...`` / ``Supporter: ...`` lines; other lines continue the previous message."""
    out: list[tuple[Role, list[str]]] = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            role: Role = "user" if match.group(1) == "Seeker" else "assistant"
            if out and out[-1][0] == role:
                out[-1][1].append(match.group(2))
            else:
                out.append((role, [match.group(2)]))
        elif out and line.strip():
            out[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"text before the first 'Seeker:' or 'Supporter:' line: {line[:40]!r}")
    return [(role, "\n".join(parts).strip()) for role, parts in out]


def load_lend_an_ear(
    root: str | Path, *, strategy_map: StrategyMap | None = None, strict: bool = False
) -> Loaded[SupportDialogue]:
    """Load the 50 Lend-an-Ear conversations with turn-level MINT tactic tags.

    ``root`` is the ``mint_lend_an_ear`` directory (or its ``lend_an_ear_eval`` subdirectory).
    Each supporter message gets the tactics of ``tactic_results/turn_level_tactics.csv``, each
    repeated as often as the row counts it (the turn-level value is the number of the turn's
    sentences tagged with the tactic); ``None`` when the turn has no row. Metadata keys:
    ``expert_ratings`` (``{expert: {dimension: score}}``, from ``expert_ratings/expert*_ratings.csv``).

    Examples:
        >>> import os, pathlib
        >>> root = pathlib.Path(os.environ.get("CARE_DATA_DIR", "/no-data")) / "mint_lend_an_ear"
        >>> if root.exists():
        ...     assert len(load_lend_an_ear(root)) == 50
    """
    root = Path(root)
    base = root / "lend_an_ear_eval" if (root / "lend_an_ear_eval").is_dir() else root
    conv_file = base / "lend_an_ear_50_conversations.csv"
    if not conv_file.exists():
        raise InputError("no lend_an_ear_50_conversations.csv here", location=str(base))
    mapping = strategy_map or default_strategy_map()
    issues: list[LoadIssue] = []
    tactics: dict[tuple[str, int], tuple[str, ...]] = {}
    tactic_file = base / "tactic_results" / "turn_level_tactics.csv"
    if tactic_file.exists():
        tlog = IssueLog(tactic_file, strict=strict)
        for pos, row in iter_csv(tactic_file, tlog, ("conversation_id", "supporter_turn_index")):
            try:
                key = (row["conversation_id"], int(row["supporter_turn_index"]))
            except ValueError:
                tlog.add(pos, "supporter_turn_index", f"not an integer: {row['supporter_turn_index']!r}", dropped=True)
                continue
            tags = []
            for name in MINT_TACTICS:
                value = (row.get(name) or "").strip()
                if not value.isdigit():
                    tlog.add(pos, name, f"expected a count >= 0, got {value!r}")
                    continue
                tags += [mapping.canonical(name) if mapping.knows(name) else name] * int(value)
            tactics[key] = tuple(tags)
        issues += tlog.issues
    ratings: dict[str, dict[str, dict[str, int]]] = {}
    for rating_file in sorted((base / "expert_ratings").glob("expert*_ratings.csv")):
        rlog = IssueLog(rating_file, strict=strict)
        for pos, row in iter_csv(rating_file, rlog, ("conversation_id",)):
            scores = {}
            for name in MINT_JUDGE_DIMENSIONS:
                try:
                    scores[name] = int(row[name])
                except (KeyError, TypeError, ValueError):
                    rlog.add(pos, name, f"not an integer score: {row.get(name)!r}")
            ratings.setdefault(row["conversation_id"], {})[rating_file.stem.replace("_ratings", "")] = scores
        issues += rlog.issues
    log = IssueLog(conv_file, strict=strict)
    records = []
    for pos, row in iter_csv(conv_file, log, ("conversation_id", "full_conversation")):
        cid = row["conversation_id"]
        try:
            turns = _parse_transcript(row["full_conversation"])
        except ValueError as exc:
            log.add(pos, "full_conversation", str(exc), dropped=True)
            continue
        if not turns:
            log.add(pos, "full_conversation", "empty conversation", dropped=True)
            continue
        strategies: list[tuple[str, ...] | None] = []
        supporter_number = 0
        for role, _ in turns:
            if role == "assistant":
                supporter_number += 1
                strategies.append(tactics.get((cid, supporter_number)))
            else:
                strategies.append(None)
        records.append(
            SupportDialogue(
                id=cid,
                source="lend-an-ear",
                messages=tuple(Message(role=r, content=t) for r, t in turns),
                strategies=tuple(strategies),
                metadata={"expert_ratings": ratings.get(cid, {})},
            )
        )
    return Loaded(records=records, issues=issues + log.issues)


def load_judged_turns(path: str | Path, *, strict: bool = False) -> Loaded[JudgedResponse]:
    """Load judged system responses (``judged_turns/judged_turn_responses_*.jsonl``).

    Examples:
        >>> import tempfile, pathlib, json
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "j.jsonl"
        >>> _ = p.write_text(json.dumps({"system": "gold", "conversation_id": "c", "turn_index": 1,
        ...     "response": "ok", "validating_emotions": 3, "aggregated_empathy": 3.5, "judge": "j"}) + "\\n")
        >>> load_judged_turns(p)[0].scores
        {'validating_emotions': 3}
    """
    path = Path(path)
    log = IssueLog(path, strict=strict)
    records = []
    for pos, obj in iter_jsonl(path, log):
        bad = False
        for key, kind in (("system", str), ("conversation_id", str), ("turn_index", int), ("response", str)):
            if not isinstance(obj.get(key), kind) or (kind is str and not obj[key].strip()):
                log.add(pos, key, f"missing or not a {kind.__name__}", dropped=True)
                bad = True
                break
        if bad:
            continue
        aggregate = obj.get("aggregated_empathy")
        if not isinstance(aggregate, (int, float)) or isinstance(aggregate, bool):
            log.add(pos, "aggregated_empathy", f"missing or not a number: {aggregate!r}", dropped=True)
            continue
        scores = {}
        for name in MINT_JUDGE_DIMENSIONS:
            value = obj.get(name)
            if value is None:
                continue
            if not isinstance(value, int) or not 1 <= value <= 5:
                log.add(pos, name, f"expected an integer score 1-5, got {value!r}")
                continue
            scores[name] = value
        records.append(
            JudgedResponse(
                system=obj["system"],
                conversation_id=obj["conversation_id"],
                turn_index=obj["turn_index"],
                response=obj["response"],
                scores=scores,
                aggregated_empathy=float(aggregate),
                judge=str(obj.get("judge", "")),
            )
        )
    return Loaded(records=records, issues=log.issues)
