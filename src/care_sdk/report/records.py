"""Reading scored records and summarising them for the figures (plain Python, no matplotlib).

A record is one line of ``care score`` output (``{"id", "turn", "reward", "error", "rubric",
"evaluation", "dimension_scores"}``) or of a quality benchmark's ``records.jsonl`` (the same plus
``task``, ``variant``, ``turn_number`` and, where the data has one, ``emotion``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from care_sdk.errors import InputError
from care_sdk.jsonl import iter_jsonl
from care_sdk.types import DIMENSIONS

__all__ = [
    "HeatmapData",
    "ScoreRecords",
    "dominant_by_emotion",
    "heatmap_data",
    "read_meta",
    "read_records",
    "rewards_by_variant",
    "weights_by_turn",
    "with_meta",
]

Record = dict[str, Any]
DIMS = tuple(d.value for d in DIMENSIONS)


@dataclass
class ScoreRecords:
    """Records read from a JSONL file, and the lines that could not be used.

    Examples:
        >>> ScoreRecords(records=[{"id": "a", "turn": 1}]).issues
        []
    """

    records: list[Record]
    """Usable records, in file order."""
    issues: list[InputError] = field(default_factory=list)
    """One error per unusable line, naming the file and line."""


def read_records(path: str | Path) -> ScoreRecords:
    """Read a scored-records JSONL file; each unusable line becomes an :class:`InputError` naming it.

    A record needs an ``id`` and an integer ``turn``; ``rubric.weights`` must map every dimension
    to a number when present.

    Examples:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "s.jsonl")
        >>> _ = open(p, "w").write('{"id": "a", "turn": 1, "reward": 0.5}\\nnot json\\n')
        >>> result = read_records(p)
        >>> len(result.records), "line 2: not valid JSON" in str(result.issues[0])
        (1, True)
    """
    out = ScoreRecords(records=[])
    for _, record in iter_jsonl(path, on_bad=out.issues.append, check=_check):
        out.records.append(record)
    return out


def _check(record: dict[str, Any]) -> tuple[str | None, str] | None:
    if "id" not in record:
        return "id", "missing"
    if not isinstance(record.get("turn"), int):
        return "turn", f"expected an integer, got {record.get('turn')!r}"
    rubric = record.get("rubric")
    if rubric is not None:
        weights = rubric.get("weights") if isinstance(rubric, dict) else None
        if not isinstance(weights, dict) or any(not isinstance(weights.get(d), (int, float)) for d in DIMS):
            return "rubric.weights", "expected a number for each of cognitive, affective, proactive"
    reward = record.get("reward")
    if reward is not None and not isinstance(reward, (int, float)):
        return "reward", f"expected a number or null, got {reward!r}"
    return None


def read_meta(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read per-dialogue metadata: JSONL lines ``{"id": ..., "emotion": ...}`` (``emotion_type`` also accepted).

    Raises:
        InputError: a line is not a JSON object with an ``id`` (names the file and line).

    Examples:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "m.jsonl")
        >>> _ = open(p, "w").write('{"id": "a", "emotion_type": "anxiety"}\\n')
        >>> read_meta(p)["a"]["emotion"]
        'anxiety'
    """
    meta: dict[str, dict[str, Any]] = {}
    for _, obj in iter_jsonl(path, check=lambda o: None if "id" in o else ("id", "missing")):
        entry = dict(obj)
        if "emotion" not in entry and "emotion_type" in entry:
            entry["emotion"] = entry["emotion_type"]
        meta[str(obj["id"])] = entry
    return meta


def with_meta(records: Iterable[Record], meta: Mapping[str, Mapping[str, Any]]) -> list[Record]:
    """Copy each record, filling ``emotion`` (and other absent keys) from its dialogue's metadata.

    Examples:
        >>> with_meta([{"id": "a", "turn": 1}], {"a": {"id": "a", "emotion": "fear"}})[0]["emotion"]
        'fear'
    """
    out = []
    for record in records:
        extra = meta.get(str(record["id"]), {})
        out.append({**{k: v for k, v in extra.items() if k != "id"}, **record})
    return out


def _unique_turns(records: Iterable[Record]) -> list[Record]:
    """One record per (task, dialogue, turn): replies to the same context share their rubric."""
    seen: set[tuple[Any, str, int]] = set()
    out = []
    for record in records:
        key = (record.get("task"), str(record["id"]), record["turn"])
        if key not in seen:
            seen.add(key)
            out.append(record)
    return out


def _turn_numbers(records: Sequence[Record]) -> list[int]:
    """``turn_number`` where records carry it; else the rank of ``turn`` among the dialogue's records."""
    by_dialogue: dict[tuple[Any, str], list[int]] = {}
    for record in records:
        by_dialogue.setdefault((record.get("task"), str(record["id"])), []).append(record["turn"])
    ranks = {k: {t: i + 1 for i, t in enumerate(sorted(set(v)))} for k, v in by_dialogue.items()}
    return [
        int(r["turn_number"])
        if isinstance(r.get("turn_number"), int)
        else ranks[(r.get("task"), str(r["id"]))][r["turn"]]
        for r in records
    ]


def weights_by_turn(records: Sequence[Record], *, max_turn: int = 12) -> dict[int, dict[str, tuple[float, float, int]]]:
    """Mean weight of each dimension by supporter turn number: ``{turn: {dim: (mean, standard error, n)}}``.

    Turns past ``max_turn`` are pooled into ``max_turn``. Only records with a rubric count, one per
    (task, dialogue, turn).

    Examples:
        >>> first = {"cognitive": 0.6, "affective": 0.2, "proactive": 0.2}
        >>> later = {"cognitive": 0.2, "affective": 0.2, "proactive": 0.6}
        >>> recs = [{"id": "a", "turn": 1, "rubric": {"weights": first}},
        ...         {"id": "a", "turn": 3, "rubric": {"weights": later}}]
        >>> weights_by_turn(recs)[2]["proactive"]
        (0.6, 0.0, 1)
    """
    with_rubric = _unique_turns(r for r in records if r.get("rubric"))
    bins: dict[int, dict[str, list[float]]] = {}
    for record, number in zip(with_rubric, _turn_numbers(with_rubric), strict=True):
        slot = bins.setdefault(min(number, max_turn), {d: [] for d in DIMS})
        for dim in DIMS:
            slot[dim].append(float(record["rubric"]["weights"][dim]))
    out: dict[int, dict[str, tuple[float, float, int]]] = {}
    for number in sorted(bins):
        out[number] = {}
        for dim, values in bins[number].items():
            n = len(values)
            m = sum(values) / n
            sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
            out[number][dim] = (m, sd / math.sqrt(n), n)
    return out


def dominant_by_emotion(records: Sequence[Record]) -> dict[str, tuple[dict[str, float], int]]:
    """Share of turns whose top-weighted dimension is each dimension, per user emotion label.

    Weight ties split the turn equally. Emotions are ordered by how many turns they have.

    Examples:
        >>> recs = [{"id": "a", "turn": 1, "emotion": "fear",
        ...          "rubric": {"weights": {"cognitive": 0.2, "affective": 0.5, "proactive": 0.3}}}]
        >>> dominant_by_emotion(recs)["fear"]
        ({'cognitive': 0.0, 'affective': 1.0, 'proactive': 0.0}, 1)
    """
    counts: dict[str, dict[str, float]] = {}
    totals: dict[str, int] = {}
    for record in _unique_turns(r for r in records if r.get("rubric") and r.get("emotion")):
        weights = record["rubric"]["weights"]
        best = max(float(weights[d]) for d in DIMS)
        top = [d for d in DIMS if float(weights[d]) >= best - 1e-9]
        emotion = str(record["emotion"])
        slot = counts.setdefault(emotion, dict.fromkeys(DIMS, 0.0))
        for dim in top:
            slot[dim] += 1 / len(top)
        totals[emotion] = totals.get(emotion, 0) + 1
    order = sorted(counts, key=lambda e: (-totals[e], e))
    return {e: ({d: counts[e][d] / totals[e] for d in DIMS}, totals[e]) for e in order}


def rewards_by_variant(records: Sequence[Record]) -> dict[str, dict[str, list[float]]]:
    """Rewards grouped by task and variant: ``{task: {variant: [rewards]}}``.

    Records without ``task``/``variant`` (``care score`` output) fall under ``""``/``"reward"``.
    The ``length`` baseline counts characters, not a reward in [0, 1], and is left out.

    Examples:
        >>> rewards_by_variant([{"id": "a", "turn": 1, "reward": 0.5}, {"id": "a", "turn": 3, "reward": None}])
        {'': {'reward': [0.5]}}
    """
    out: dict[str, dict[str, list[float]]] = {}
    for record in records:
        reward = record.get("reward")
        variant = str(record.get("variant", "reward"))
        if reward is None or variant == "length":
            continue
        out.setdefault(str(record.get("task", "")), {}).setdefault(variant, []).append(float(reward))
    return out


@dataclass
class HeatmapData:
    """The per-criterion scores of one dialogue, turn by turn (see :func:`heatmap_data`).

    Examples:
        >>> HeatmapData("d", [1], ["cognitive 1"], [[4.0]], [{}], [[]], [0.75]).scores[0][0]
        4.0
    """

    dialogue: str
    """The dialogue id."""
    turns: list[int]
    """Supporter turn numbers, in order."""
    rows: list[str]
    """Row labels: ``cognitive 1``, ``cognitive 2``, ..."""
    scores: list[list[float | None]]
    """``scores[row][column]``, ``None`` where the turn's rubric has no such criterion."""
    weights: list[dict[str, float]]
    """Each turn's weights."""
    criteria: list[list[tuple[str, str]]]
    """Each turn's ``(row label, criterion text)``."""
    rewards: list[float | None]
    """Each turn's reward."""


def heatmap_data(records: Sequence[Record], dialogue: str | None = None) -> HeatmapData | None:
    """The criterion scores of one dialogue (the given one, else the one with the most evaluated turns).

    Examples:
        >>> rec = {"id": "a", "turn": 1, "reward": 0.5, "rubric": {"weights": dict.fromkeys(DIMS, 1 / 3)},
        ...        "evaluation": {"scores": [{"dimension": d, "criterion": f"{d} c", "score": 3} for d in DIMS]}}
        >>> data = heatmap_data([rec])
        >>> data.rows, data.scores[1]
        (['cognitive 1', 'affective 1', 'proactive 1'], [3.0])
    """
    evaluated = _unique_turns(r for r in records if r.get("evaluation") and r.get("rubric"))
    groups: dict[tuple[Any, str], list[Record]] = {}
    for record in evaluated:
        groups.setdefault((record.get("task"), str(record["id"])), []).append(record)
    if dialogue is not None:
        groups = {k: v for k, v in groups.items() if k[1] == dialogue}
    if not groups:
        return None
    key = max(groups, key=lambda k: len(groups[k]))
    chosen = sorted(groups[key], key=lambda r: r["turn"])
    numbers = _turn_numbers(chosen)
    per_dim = {d: max(sum(1 for s in r["evaluation"]["scores"] if s["dimension"] == d) for r in chosen) for d in DIMS}
    rows = [f"{d} {i + 1}" for d in DIMS for i in range(per_dim[d])]
    scores: list[list[float | None]] = [[None] * len(chosen) for _ in rows]
    criteria: list[list[tuple[str, str]]] = []
    for column, record in enumerate(chosen):
        seen = dict.fromkeys(DIMS, 0)
        texts = []
        for score in record["evaluation"]["scores"]:
            dim = score["dimension"]
            seen[dim] += 1
            label = f"{dim} {seen[dim]}"
            scores[rows.index(label)][column] = float(score["score"])
            texts.append((label, str(score["criterion"])))
        criteria.append(texts)
    return HeatmapData(
        dialogue=key[1],
        turns=numbers,
        rows=rows,
        scores=scores,
        weights=[{d: float(r["rubric"]["weights"][d]) for d in DIMS} for r in chosen],
        criteria=criteria,
        rewards=[r.get("reward") for r in chosen],
    )
