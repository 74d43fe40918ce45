"""The data behind a report: scored records (and optionally their dialogues) reduced to one compact,
JSON-ready mapping that the page's script renders (plain Python, no HTML).

The mapping interns repeated strings (criteria, producers) and refers to dialogues by index, so
that 10,000 turns stay a few megabytes of JSON.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from care_sdk.dialogues import read_dialogues
from care_sdk.errors import InputError
from care_sdk.provenance import Cost, Provenance, record_provenance
from care_sdk.report.records import DIMS, weights_by_turn

__all__ = ["DialogueTexts", "report_data", "reward_histogram", "turn_flags"]

Record = Mapping[str, Any]
EXTREMES = 10
"""How many lowest- and highest-scored turns the overview lists."""
HISTOGRAM_BINS = 10
"""Bins of the reward distribution over [0, 1]."""


@dataclass
class DialogueTexts:
    """The messages of each dialogue of a dialogue file, by id, and the lines that could not be read.

    Examples:
        >>> DialogueTexts().messages
        {}
    """

    messages: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """``(role, content)`` of every message, by dialogue id."""
    issues: list[str] = field(default_factory=list)
    """One line per unreadable input line."""

    @classmethod
    def read(cls, path: str | Path) -> DialogueTexts:
        """Read a ``care score`` input file (``{"id": ..., "messages": [...]}`` per line).

        Raises:
            InputError: the file cannot be opened.

        Examples:
            >>> import tempfile, os
            >>> p = os.path.join(tempfile.mkdtemp(), "d.jsonl")
            >>> _ = open(p, "w").write('{"id": "a", "messages": [{"role": "user", "content": "hi"},'
            ...                        ' {"role": "assistant", "content": "hello"}]}\\n')
            >>> DialogueTexts.read(p).messages["a"]
            [('user', 'hi'), ('assistant', 'hello')]
        """
        out = cls()
        try:
            for line in read_dialogues(path):
                if line.error is not None:
                    out.issues.append(str(line.error))
                elif line.dialogue is not None:
                    out.messages[str(line.dialogue.id)] = [(m.role, m.content) for m in line.dialogue.messages]
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror}", location=str(path)) from exc
        return out


def reward_histogram(rewards: Iterable[float], bins: int = HISTOGRAM_BINS) -> list[int]:
    """Counts of rewards in ``bins`` equal bins over [0, 1]; 1.0 falls in the last bin.

    Examples:
        >>> reward_histogram([0.0, 0.05, 0.5, 1.0], bins=4)
        [2, 0, 1, 1]
    """
    counts = [0] * bins
    for reward in rewards:
        counts[min(bins - 1, max(0, math.floor(float(reward) * bins)))] += 1
    return counts


def _weights(record: Record) -> list[float] | None:
    rubric = record.get("rubric")
    if not isinstance(rubric, Mapping):
        return None
    weights = rubric.get("weights")
    if not isinstance(weights, Mapping):
        return None
    return [round(float(weights.get(d, 0.0)), 4) for d in DIMS]


def turn_flags(record: Record, reply: str | None = None, *, texts_given: bool = False) -> list[str]:
    """Short labels of what is notable about one record, for filtering.

    ``failed`` (no reward), ``no rubric`` (rubric generation failed), ``uniform weights``,
    ``expected scores`` (scores from logprobs), ``not in dialogues`` (the dialogue file was given
    but has no assistant message at this turn).

    Examples:
        >>> turn_flags({"reward": None, "error": "x", "rubric": None})
        ['failed', 'no rubric']
        >>> turn_flags({"reward": 0.5, "rubric": {"weights": {"cognitive": 1, "affective": 1, "proactive": 1}}})
        ['uniform weights']
    """
    flags = []
    if record.get("reward") is None:
        flags.append("failed")
    weights = _weights(record)
    if weights is None:
        flags.append("no rubric")
    elif max(weights) - min(weights) < 1e-6:
        flags.append("uniform weights")
    evaluation = record.get("evaluation")
    if isinstance(evaluation, Mapping) and any(s.get("distribution") for s in evaluation.get("scores") or ()):
        flags.append("expected scores")
    if texts_given and reply is None:
        flags.append("not in dialogues")
    return flags


class _Interner:
    def __init__(self) -> None:
        self.items: list[Any] = []
        self._index: dict[str, int] = {}

    def __call__(self, key: str, value: Any = None) -> int:
        if key not in self._index:
            self._index[key] = len(self.items)
            self.items.append(key if value is None else value)
        return self._index[key]


def _producer_key(record: Record) -> tuple[str, dict[str, Any]]:
    by = record.get("scored_by")
    value = dict(by) if isinstance(by, Mapping) else {}
    return repr(sorted(value.items())), value


SOURCES = ("generated", "cached", "fixed")
"""Where a rubric came from, in the order the page's cost lists them (see :data:`care_sdk.provenance.RubricSource`)."""


def _cost_cell(made: Provenance, strings: _Interner) -> list[Any]:
    """A turn's cost for the page: ``[calls, prompt tokens, completion tokens, seconds, source, hash
    (interned), shared by]`` (the reply's share; tokens ``None`` when not reported)."""
    cost = made.cost
    tokens = [None if t is None else round(t, 1) for t in (cost.prompt_tokens, cost.completion_tokens)]
    rubric = strings(made.rubric_hash) if made.rubric_hash is not None else None
    return [round(cost.calls, 3), *tokens, round(cost.seconds, 4), made.rubric_source, rubric, made.rubric_shared_by]


def _cost_overview(costs: Sequence[Provenance]) -> dict[str, Any] | None:
    """What the turns that carry a provenance cost together, and where their rubrics came from."""
    if not costs:
        return None
    total = sum((made.cost for made in costs), Cost())
    return {
        "turns": len(costs),
        "calls": round(total.calls, 2),
        "prompt_tokens": None if total.prompt_tokens is None else round(total.prompt_tokens),
        "completion_tokens": None if total.completion_tokens is None else round(total.completion_tokens),
        "seconds": round(total.seconds, 3),
        "sources": [[s, sum(made.rubric_source == s for made in costs)] for s in SOURCES],
    }


def _failure_reason(error: str) -> str:
    """The reason without its per-item detail: text up to the first colon after the stage name."""
    head, sep, rest = error.partition(": ")
    if sep and head in ("rubric generation failed", "evaluation failed", "context fit failed"):
        return f"{head}: {rest.split(':', 1)[0].strip()}"
    return error.split("\n", 1)[0][:200]


def report_data(
    records: Sequence[Record],
    texts: DialogueTexts | None = None,
    *,
    title: str = "CARE report",
    sources: Mapping[str, str | None] | None = None,
    issues: Sequence[str] = (),
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Reduce scored records to the JSON-ready mapping the report page renders.

    Records are ``care score`` output lines (``id``, ``turn``, ``reward``, ``error``, ``rubric``,
    ``evaluation``, ``dimension_scores`` and, when recorded, ``scored_by`` and ``provenance``). A
    later record for the same ``(id, turn)`` replaces an earlier one. Dialogues keep the order of their
    first record. ``overview.cost`` totals the cost of the records that carry a provenance (``None``
    when none does: files written before records carried one), and each turn's ``c`` holds its own.

    Args:
        records: the scored records.
        texts: the dialogues' messages, to show each reply in its conversation.
        title: the page title.
        sources: file names shown in the header (``scores``, ``dialogues``).
        issues: unreadable input lines, shown in the overview.
        meta: extra header fields (e.g. ``generated``, ``care_sdk``).

    Examples:
        >>> w = {"cognitive": 0.5, "affective": 0.25, "proactive": 0.25}
        >>> data = report_data([{"id": "a", "turn": 1, "reward": 0.5, "rubric": {"weights": w}},
        ...                     {"id": "a", "turn": 3, "reward": None, "error": "evaluation failed: bad"}])
        >>> data["overview"]["turns"], data["overview"]["failed"], data["turns"][0]["w"]
        (2, 1, [0.5, 0.25, 0.25])
    """
    unique: dict[tuple[str, int], Record] = {}
    for record in records:
        unique[(str(record["id"]), int(record["turn"]))] = record
    dialogue_index: dict[str, int] = {}
    for did, _ in unique:
        dialogue_index.setdefault(did, len(dialogue_index))
    strings = _Interner()
    producers = _Interner()
    producer_counts: dict[int, int] = {}
    turns: list[dict[str, Any]] = []
    dialogue_turns: list[list[int]] = [[] for _ in dialogue_index]
    failures: dict[str, list[Any]] = {}
    with_rubric: list[dict[str, Any]] = []
    costs: list[Provenance] = []
    for (did, number), record in unique.items():
        d = dialogue_index[did]
        messages = texts.messages.get(did) if texts else None
        reply = None
        if messages is not None and 0 <= number < len(messages) and messages[number][0] == "assistant":
            reply = messages[number][1]
        reward = record.get("reward")
        scores = (record.get("evaluation") or {}).get("scores") or []
        dimension_scores = record.get("dimension_scores")
        weights = _weights(record)
        if weights is not None:
            with_rubric.append(dict(record))
        made = record_provenance(record)
        if made is not None:
            costs.append(made)
        key, value = _producer_key(record)
        p = producers(key, value)
        producer_counts[p] = producer_counts.get(p, 0) + 1
        turn: dict[str, Any] = {
            "d": d,
            "t": number,
            "r": None if reward is None else round(float(reward), 4),
            "e": record.get("error"),
            "w": weights,
            "s": [
                [DIMS.index(str(s["dimension"])), strings(str(s["criterion"])), round(float(s["score"]), 2)]
                for s in scores
                if str(s.get("dimension")) in DIMS
            ],
            "ds": [round(float(dimension_scores[x]), 4) if x in dimension_scores else None for x in DIMS]
            if isinstance(dimension_scores, Mapping)
            else None,
            "p": p,
            "f": turn_flags(record, reply, texts_given=texts is not None),
            "c": _cost_cell(made, strings) if made is not None else None,
        }
        if reward is None:
            reason = _failure_reason(str(record.get("error") or "no reward and no error"))
            slot = failures.setdefault(reason, [0, []])
            slot[0] += 1
            if len(slot[1]) < 5:
                slot[1].append(len(turns))
        dialogue_turns[d].append(len(turns))
        turns.append(turn)
    scored = [i for i, t in enumerate(turns) if t["r"] is not None]
    ranked = sorted(scored, key=lambda i: (turns[i]["r"], i))
    weighted = [t["w"] for t in turns if t["w"] is not None]
    rewards = [turns[i]["r"] for i in scored]
    by_turn = weights_by_turn(with_rubric)
    dialogues = [
        {
            "id": did,
            "m": [list(m) for m in texts.messages[did]] if texts and did in texts.messages else None,
            "turns": dialogue_turns[d],
        }
        for did, d in dialogue_index.items()
    ]
    return {
        "title": title,
        "dims": list(DIMS),
        "sources": dict(sources or {}),
        "meta": dict(meta or {}),
        "issues": list(issues)[:200],
        "issue_count": len(issues),
        "overview": {
            "dialogues": len(dialogues),
            "turns": len(turns),
            "scored": len(scored),
            "failed": len(turns) - len(scored),
            "mean_reward": round(sum(rewards) / len(rewards), 4) if rewards else None,
            "median_reward": _median(rewards),
            "histogram": reward_histogram(rewards),
            "mean_weights": [round(sum(w[i] for w in weighted) / len(weighted), 4) for i in range(len(DIMS))]
            if weighted
            else None,
            "weights_by_turn": [
                [n, [round(by_turn[n][x][0], 4) for x in DIMS], by_turn[n][DIMS[0]][2]] for n in by_turn
            ],
            "failures": sorted(
                ([reason, count, examples] for reason, (count, examples) in failures.items()),
                key=lambda f: (-f[1], f[0]),
            ),
            "lowest": ranked[:EXTREMES],
            "highest": ranked[::-1][:EXTREMES],
            "cost": _cost_overview(costs),
        },
        "producers": [{**value, "turns": producer_counts[i]} for i, value in enumerate(producers.items)],
        "strings": strings.items,
        "dialogues": dialogues,
        "turns": turns,
    }


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return round(ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2, 4)
