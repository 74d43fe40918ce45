"""What every quality task shares: data paths, settings, the task protocol, unit selection and helpers.

Examples:
    >>> spread(list(range(12)), 3)
    [0, 6, 11]
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from care_lab.bench.metrics import (
    Estimate,
    bootstrap,
    mean,
)
from care_lab.bench.variants import VARIANTS, Item, record_done
from care_lab.data import (
    LoadIssue,
    SupportTurn,
)
from care_sdk.prompts import generator_position

__all__ = [
    "DataPaths",
    "MetricRow",
    "QualityTask",
    "Records",
    "Settings",
    "Task",
    "TaskData",
    "TaskResult",
    "Unusable",
    "keep_units",
    "select",
    "spread",
    "top_match",
]

T = TypeVar("T")
U = TypeVar("U")
Records = Mapping[str, Mapping[str, Mapping[str, Any]]]
"""Scored records: item key -> variant -> record."""

NEGATIVE_JUDGE_DIMENSIONS = ("advice_giving", "self_oriented", "dismissing_emotions")
JUDGED_FILE = "judged_turn_responses_gold_and_qwen3-4b_systems.jsonl"
JUDGE_AGREEMENT_FILE = "gold_kappa_turn_vs_experts_agreement.csv"
JUDGE_CONVERSATION_FILE = "gold_kappa_gpt-oss-120b_turn_aggregated_to_conversation.csv"


@dataclass(frozen=True)
class DataPaths:
    """Where the data lies; each path defaults to its place under ``root`` (the shared data layout).

    Examples:
        >>> DataPaths(Path("/data")).esconv_file
        PosixPath('/data/esconv/test.jsonl')
    """

    root: Path
    """The data directory (see :func:`care_lab.data.data_dir`)."""
    esconv: Path | None = None
    """ESConv dialogues with strategy labels (default: the test split)."""
    failed_esconv: Path | None = None
    """``FailedESConv.json``."""
    lend_an_ear: Path | None = None
    """The ``mint_lend_an_ear`` directory."""
    judged: Path | None = None
    """The judged-responses JSONL."""
    sage: tuple[Path, ...] = ()
    """SAGE rollout files (default: every ``sage_rlver/results_*/*_result.jsonl``)."""

    @property
    def esconv_file(self) -> Path:
        """The ESConv file the alignment and success tasks read."""
        return self.esconv or self.root / "esconv" / "test.jsonl"

    @property
    def failed_file(self) -> Path:
        """The FailedESConv file."""
        return self.failed_esconv or self.root / "esconv" / "FailedESConv.json"

    @property
    def lend_an_ear_dir(self) -> Path:
        """The Lend-an-Ear directory."""
        return self.lend_an_ear or self.root / "mint_lend_an_ear"

    @property
    def judged_file(self) -> Path:
        """The judged-responses file."""
        return self.judged or self.lend_an_ear_dir / "judged_turns" / JUDGED_FILE

    @property
    def sage_files(self) -> tuple[Path, ...]:
        """The SAGE rollout files."""
        return self.sage or tuple(sorted((self.root / "sage_rlver").glob("results_*/*_result.jsonl")))


@dataclass(frozen=True)
class Settings:
    """Knobs shared by the tasks.

    Examples:
        >>> Settings(limit=10).margin
        1.0
    """

    limit: int | None = None
    """Units per task (turns, judged turns, conversations, or dialogues per class); ``None``: all."""
    max_turns: int | None = None
    """For dialogue-level tasks, score at most this many supporter turns per dialogue, evenly spread."""
    margin: float = 1.0
    """Minimum judge-score gap for a preference pair."""
    systems: tuple[str, ...] = ()
    """Judged systems to compare (empty: all)."""
    seed: int = 0
    """Seed of the unit selection and of the bootstrap."""
    resamples: int = 1000
    """Bootstrap resamples."""


@dataclass
class TaskData:
    """What a task loaded: the items to score and the data the metric needs.

    Examples:
        >>> TaskData(items=[], units=0, available=10, sources=[]).issues
        []
    """

    items: list[Item]
    """Items to score, in order."""
    units: int
    """Units selected."""
    available: int
    """Units available before ``limit``."""
    sources: list[Path]
    """Files read."""
    issues: list[LoadIssue] = field(default_factory=list)
    """Problems the loaders found."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Task-specific data for the metric."""


@dataclass
class MetricRow:
    """One metric of a task, per variant.

    Examples:
        >>> MetricRow("AUC", {"care": Estimate(0.6, 0.5, 0.7, 40)}).values["care"].format()
        '0.600 [0.500, 0.700]'
    """

    name: str
    """What is measured."""
    values: dict[str, Estimate]
    """Estimate per variant (a missing variant is not applicable)."""


@dataclass
class TaskResult:
    """The metrics of one task.

    Examples:
        >>> TaskResult("success", "Success vs failure", "dialogues", 8, 391, rows=[]).to_json()["units"]
        8
    """

    name: str
    """Task id (``alignment``, ``pairwise``, ``experts``, ``success``, ``simulated``)."""
    title: str
    """A human title."""
    unit: str
    """What a unit is (``turns``, ``dialogues``, ...)."""
    units: int
    """Units scored."""
    available: int
    """Units available."""
    rows: list[MetricRow]
    """The metrics."""
    failed: dict[str, int] = field(default_factory=dict)
    """Items without a result, per variant."""
    notes: list[str] = field(default_factory=list)
    """Plain-language remarks (chance levels, exclusions)."""
    details: list[str] = field(default_factory=list)
    """Extra markdown tables."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Extra numbers for the JSON report."""

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        return {
            "name": self.name,
            "title": self.title,
            "unit": self.unit,
            "units": self.units,
            "available": self.available,
            "metrics": {row.name: {v: e.to_json() for v, e in row.values.items()} for row in self.rows},
            "failed": self.failed,
            "notes": self.notes,
            **self.extra,
        }


class Task(Protocol):
    """A quality task: ``load`` builds the items, ``evaluate`` turns scored records into metrics.

    Examples:
        >>> from care_lab.bench.tasks import TASKS
        >>> sorted(TASKS)
        ['alignment', 'experts', 'pairwise', 'simulated', 'success']
    """

    name: str
    title: str
    unit: str

    def load(self, paths: DataPaths, settings: Settings) -> TaskData:
        """Read the data and build the items."""
        ...

    def evaluate(self, data: TaskData, records: Records, settings: Settings) -> TaskResult:
        """Compute the metrics from the scored records."""
        ...


class QualityTask:
    """Base of the bundled tasks: a task names itself, its title and its unit in its class line.

    Examples:
        >>> class Demo(QualityTask, name="demo", title="A demo task", unit="turns"):
        ...     pass
        >>> Demo.name, Demo().unit
        ('demo', 'turns')
    """

    name: str
    """Task id."""
    title: str
    """A human title."""
    unit: str
    """What a unit is."""

    def __init_subclass__(cls, *, name: str, title: str, unit: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.name, cls.title, cls.unit = name, title, unit


# -- helpers ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unusable:
    """What a task's ``prepare`` returns for an entry it leaves out, with the reason (see :func:`keep_units`).

    Examples:
        >>> Unusable("no complete expert rating").reason
        'no complete expert rating'
    """

    reason: str
    """Why the entry cannot be used, for the load issue."""


def keep_units(
    entries: Iterable[T],
    prepare: Callable[[T], U | Unusable | None],
    *,
    source: Path,
    unit: str,
    field: str,
    issues: list[LoadIssue],
) -> list[U]:
    """The prepared entries a task can use, in order; each unusable one becomes a dropped load issue.

    ``prepare`` returns the unit built from an entry, :class:`Unusable` to leave it out with a
    reason (a :class:`~care_lab.data.LoadIssue` at ``f"{unit} {position}"``, 1-based, naming
    ``field``, appended to ``issues``), or ``None`` to pass it over silently (e.g. not asked for).

    Examples:
        >>> issues = []
        >>> keep_units([2, 0, -1, 4], lambda n: None if n < 0 else n * 10 if n else Unusable("zero"),
        ...            source=Path("n.jsonl"), unit="line", field="n", issues=issues)
        [20, 40]
        >>> issues[0].position, issues[0].message
        ('line 2', 'zero')
    """
    kept: list[U] = []
    for position, entry in enumerate(entries, start=1):
        prepared = prepare(entry)
        if isinstance(prepared, Unusable):
            issues.append(LoadIssue(str(source), f"{unit} {position}", field, prepared.reason, dropped=True))
        elif prepared is not None:
            kept.append(prepared)
    return kept


def select(units: Sequence[T], limit: int | None, seed: int) -> list[T]:
    """The first ``limit`` units of a seeded shuffle, in shuffled order (all units when ``limit`` is None).

    A larger limit keeps a smaller one's units, in the same order, so a run interrupted part-way
    leaves a prefix that a re-run with a smaller limit reuses whole.

    Examples:
        >>> select(list(range(10)), 3, seed=0), select(list(range(10)), 5, seed=0)[:3]
        ([7, 8, 1], [7, 8, 1])
    """
    order = list(range(len(units)))
    random.Random(seed).shuffle(order)
    if limit is not None:
        order = order[: max(0, limit)]
    return [units[i] for i in order]


def spread(turns: Sequence[T], k: int | None) -> list[T]:
    """At most ``k`` elements evenly spread over ``turns``, first and last included.

    Examples:
        >>> spread(list(range(10)), 4), spread([1, 2], 4), spread(list(range(5)), 1)
        ([0, 3, 6, 9], [1, 2], [2])
    """
    n = len(turns)
    if k is None or n <= k:
        return list(turns)
    if k <= 1:
        return [turns[n // 2]] if k == 1 else []
    picks = sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})
    return [turns[i] for i in picks]


def _turn_item(prefix: str, turn: SupportTurn, reply: bool, **fields: Any) -> Item:
    return Item(
        key=f"{prefix}{turn.dialogue_id}:{turn.index}",
        context=turn.context,
        reply=turn.reply if reply else None,
        fields={
            "id": turn.dialogue_id,
            "turn": turn.index,
            "turn_number": generator_position(turn.context)[1],  # as the generator prompt states it
            **fields,
        },
    )


def _failed(data: TaskData, records: Records, variants: Sequence[str]) -> dict[str, int]:
    """Items without a finished record, per variant the run scored (``--variants`` may leave some out)."""
    scored = {variant for per_item in records.values() for variant in per_item}
    out = {}
    for variant in (v for v in variants if v in scored):
        out[variant] = sum(
            1 for item in data.items if not record_done(records.get(item.key, {}).get(variant), item.needs_evaluation)
        )
    return out


def _task_result(
    task: Task,
    data: TaskData,
    records: Records,
    rows: list[MetricRow],
    notes: list[str],
    *,
    variants: Sequence[str] = VARIANTS,
    left_out: tuple[str, Mapping[str, int]] | None = None,
    details: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> TaskResult:
    """The task's result: its rows, the failed items per variant and the notes.

    ``left_out`` (what, count per variant) adds a note naming the variants that left units out.
    """
    if left_out is not None and any(left_out[1].values()):
        what, counts = left_out
        notes = [*notes, f"{what} left out: " + ", ".join(f"{v} {n}" for v, n in counts.items() if n)]
    return TaskResult(
        task.name,
        task.title,
        task.unit,
        data.units,
        data.available,
        rows,
        failed=_failed(data, records, variants),
        notes=notes,
        details=details or [],
        extra=extra or {},
    )


def _reward(records: Records, key: str, variant: str) -> float | None:
    record = records.get(key, {}).get(variant)
    if record is None or record.get("error") is not None:
        return None
    value = record.get("reward")
    return float(value) if value is not None else None


def _dialogue_means(
    data: TaskData, records: Records, variant: str
) -> tuple[dict[str, float], dict[str, dict[str, float]], int]:
    """Mean reward (and mean dimension scores) per dialogue; a dialogue with a failed turn is left out."""
    turns: dict[str, list[str]] = {}
    for item in data.items:
        turns.setdefault(str(item.fields["id"]), []).append(item.key)
    rewards: dict[str, float] = {}
    dims: dict[str, dict[str, float]] = {}
    excluded = 0
    for dialogue, keys in turns.items():
        values = [_reward(records, k, variant) for k in keys]
        if any(v is None for v in values):
            excluded += 1
            continue
        rewards[dialogue] = sum(v for v in values if v is not None) / len(values)
        per_dim: dict[str, list[float]] = {}
        for key in keys:
            scores = records[key][variant].get("dimension_scores") or {}
            for dim, value in scores.items():
                per_dim.setdefault(dim, []).append(float(value))
        dims[dialogue] = {d: sum(v) / len(v) for d, v in per_dim.items() if len(v) == len(keys)}
    return rewards, dims, excluded


def _correlation(
    pairs: Sequence[tuple[float, float]], fn: Callable[[Sequence[float], Sequence[float]], float | None], s: Settings
) -> Estimate:
    def stat(sample: Sequence[tuple[float, float]]) -> float | None:
        return fn([a for a, _ in sample], [b for _, b in sample])

    return bootstrap(pairs, stat, resamples=s.resamples, seed=s.seed)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# -- 1. priority alignment ----------------------------------------------------------------------


def top_match(weights: Mapping[str, float], top_dimensions: Sequence[str]) -> float:
    """Chance that the top-weighted dimension is a reference top dimension (weight ties broken at random).

    Examples:
        >>> top_match({"cognitive": 0.5, "affective": 0.3, "proactive": 0.2}, ["cognitive"])
        1.0
        >>> top_match({"cognitive": 1 / 3, "affective": 1 / 3, "proactive": 1 / 3}, ["affective"])
        0.3333333333333333
    """
    best = max(weights.values())
    argmax = [d for d, w in weights.items() if w >= best - 1e-9]
    return sum(1 for d in argmax if d in top_dimensions) / len(argmax)


def _mean(sample: Sequence[float]) -> float | None:
    return mean(sample)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


# -- 2. pairwise preference ---------------------------------------------------------------------
