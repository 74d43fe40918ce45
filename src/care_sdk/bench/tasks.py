"""The five quality tasks: what each reads, what it scores, and the metric it reports.

Every task turns public data into :class:`~care_sdk.bench.variants.Item` objects (``load``) and
turns the scored records back into metrics with bootstrap intervals (``evaluate``). Selection
under ``limit`` is a seeded shuffle of the task's units, so a larger limit keeps every unit of a
smaller one (and a re-run reuses them).
"""

from __future__ import annotations

import csv
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any, Protocol, TypeVar

from care_sdk.bench.metrics import (
    Estimate,
    auc,
    bootstrap,
    mean,
    pairwise_accuracy,
    pearson,
    preference_pairs,
    score_pairs,
    spearman,
)
from care_sdk.bench.variants import MODEL_VARIANTS, VARIANTS, Item, record_done
from care_sdk.data import (
    MINT_JUDGE_DIMENSIONS,
    LoadIssue,
    SupportDialogue,
    SupportTurn,
    load_esconv,
    load_judged_turns,
    load_lend_an_ear,
    load_sage_rollouts,
)
from care_sdk.errors import InputError
from care_sdk.types import DIMENSIONS

__all__ = [
    "TASKS",
    "DataPaths",
    "MetricRow",
    "Settings",
    "Task",
    "TaskData",
    "TaskResult",
]

T = TypeVar("T")
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
    """The data directory (``../shared/data`` or ``$CARE_DATA_DIR``)."""
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


# -- helpers ------------------------------------------------------------------------------------


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


def _turn_item(prefix: str, turn: SupportTurn, number: int, reply: bool, **fields: Any) -> Item:
    return Item(
        key=f"{prefix}{turn.dialogue_id}:{turn.index}",
        context=turn.context,
        reply=turn.reply if reply else None,
        fields={"id": turn.dialogue_id, "turn": turn.index, "turn_number": number, **fields},
    )


def _failed(data: TaskData, records: Records, variants: Sequence[str]) -> dict[str, int]:
    out = {}
    for variant in variants:
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


class AlignmentTask:
    """Priority alignment on ESConv supporter turns: does the top weight match the reference strategies?"""

    name = "alignment"
    title = "Priority alignment (ESConv test supporter turns)"
    unit = "turns"

    def load(self, paths: DataPaths, settings: Settings) -> TaskData:
        loaded = load_esconv(paths.esconv_file)
        turns: list[tuple[SupportDialogue, SupportTurn, int]] = []
        for dialogue in loaded:
            for number, turn in enumerate(dialogue.supporter_turns(), start=1):
                if turn.top_dimensions:
                    turns.append((dialogue, turn, number))
        chosen = select(turns, settings.limit, settings.seed)
        items = [
            _turn_item(
                "",
                turn,
                number,
                reply=False,
                emotion=dialogue.metadata.get("emotion_type"),
                counts={d.value: n for d, n in turn.counts.items()},
                top=[d.value for d in turn.top_dimensions],
            )
            for dialogue, turn, number in chosen
        ]
        return TaskData(items, len(items), len(turns), [paths.esconv_file], list(loaded.issues))

    def evaluate(self, data: TaskData, records: Records, settings: Settings) -> TaskResult:
        from care_sdk.training import r_align

        match_row: dict[str, Estimate] = {}
        align_row: dict[str, Estimate] = {}
        mean_weights: dict[str, dict[str, float | None]] = {}
        for variant in MODEL_VARIANTS:
            hits: list[float] = []
            aligns: list[float] = []
            weights: list[dict[str, float]] = []
            for item in data.items:
                record = records.get(item.key, {}).get(variant)
                if not record_done(record, needs_evaluation=False):
                    continue
                assert record is not None
                w = record["rubric"]["weights"]
                weights.append(w)
                hits.append(top_match(w, item.fields["top"]))
                aligns.append(r_align(w, item.fields["counts"]))
            if not weights:
                continue
            match_row[variant] = bootstrap(hits, _mean, resamples=settings.resamples, seed=settings.seed)
            align_row[variant] = bootstrap(aligns, _mean, resamples=settings.resamples, seed=settings.seed)
            mean_weights[variant] = {d.value: mean(w[d.value] for w in weights) for d in DIMENSIONS}
        chance = mean(len(item.fields["top"]) / len(DIMENSIONS) for item in data.items)
        majority = {d.value: mean(float(d.value in item.fields["top"]) for item in data.items) for d in DIMENSIONS}
        notes = [
            "A weight tie counts as the expected hit of a random tie-break, so uniform weights score the chance level.",
            f"Chance level {_fmt(chance)}; always naming one dimension scores "
            + ", ".join(f"{d} {_fmt(v)}" for d, v in majority.items())
            + ".",
            "r_align's top rule is strict: uniform weights score 0.5 on a turn with a single top dimension.",
            "Length only has no weights: not applicable.",
        ]
        return _task_result(
            self,
            data,
            records,
            [MetricRow("top-dimension match", match_row), MetricRow("mean r_align", align_row)],
            notes,
            variants=MODEL_VARIANTS,
            extra={"chance": chance, "single_dimension": majority, "mean_weights": mean_weights},
        )


def _mean(sample: Sequence[float]) -> float | None:
    return mean(sample)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


# -- 2. pairwise preference ---------------------------------------------------------------------


class PairwiseTask:
    """Pairwise preference accuracy on MINT's judged replies from different systems to the same turn."""

    name = "pairwise"
    title = "Pairwise preference vs the MINT judge (Lend-an-Ear turns)"
    unit = "judged turns"

    def load(self, paths: DataPaths, settings: Settings) -> TaskData:
        judged = load_judged_turns(paths.judged_file)
        conversations = load_lend_an_ear(paths.lend_an_ear_dir)
        by_id = {d.id: d for d in conversations}
        issues = list(judged.issues) + list(conversations.issues)
        groups: dict[tuple[str, int], dict[str, Any]] = {}
        unknown = sorted({r.system for r in judged} - set(settings.systems)) if settings.systems else []
        missing_systems = sorted(set(settings.systems) - {r.system for r in judged})
        if missing_systems:
            raise InputError(
                f"no judged responses from system(s) {', '.join(missing_systems)}", location=str(paths.judged_file)
            )
        for position, response in enumerate(judged, start=1):
            if response.system in unknown:
                continue
            dialogue = by_id.get(response.conversation_id)
            index = response.turn_index
            if (
                dialogue is None
                or not 0 < index < len(dialogue.messages)
                or dialogue.messages[index].role != "assistant"
            ):
                issues.append(
                    LoadIssue(
                        str(paths.judged_file),
                        f"line {position}",
                        "turn_index",
                        f"no supporter message at {index} in Lend-an-Ear conversation {response.conversation_id}",
                        dropped=True,
                    )
                )
                continue
            group = groups.setdefault((response.conversation_id, index), {"dialogue": dialogue, "responses": {}})
            group["responses"][response.system] = response
        units = [key for key, group in groups.items() if len(group["responses"]) >= 2]
        chosen = select(units, settings.limit, settings.seed)
        items = []
        for cid, index in chosen:
            group = groups[(cid, index)]
            context = group["dialogue"].messages[:index]
            for system, response in group["responses"].items():
                items.append(
                    Item(
                        key=f"{cid}:{index}:{system}",
                        context=context,
                        reply=response.response,
                        fields={
                            "id": cid,
                            "turn": index,
                            "turn_number": sum(1 for m in context if m.role == "assistant") + 1,
                            "system": system,
                            "judge_score": response.aggregated_empathy,
                        },
                    )
                )
        sources = [paths.judged_file, paths.lend_an_ear_dir / "lend_an_ear_eval" / "lend_an_ear_50_conversations.csv"]
        return TaskData(items, len(chosen), len(units), sources, issues)

    def evaluate(self, data: TaskData, records: Records, settings: Settings) -> TaskResult:
        groups: dict[tuple[str, int], dict[str, float]] = {}
        for item in data.items:
            groups.setdefault((item.fields["id"], item.fields["turn"]), {})[item.key] = item.fields["judge_score"]
        pairs = preference_pairs(groups, margin=settings.margin)
        rows: dict[str, dict[str, Estimate]] = {
            "accuracy (ties = 1/2)": {},
            "accuracy, untied pairs": {},
            "share of tied pairs": {},
        }
        missing: dict[str, int] = {}
        for variant in VARIANTS:
            rewards = {item.key: _reward(records, item.key, variant) for item in data.items}
            if all(r is None for r in rewards.values()):
                continue
            outcomes, missing[variant] = score_pairs(pairs, rewards)
            result = pairwise_accuracy(outcomes, resamples=settings.resamples, seed=settings.seed)
            rows["accuracy (ties = 1/2)"][variant] = result["accuracy"]
            rows["accuracy, untied pairs"][variant] = result["strict"]
            rows["share of tied pairs"][variant] = result["ties"]
        notes = [
            f"{len(pairs)} pairs of replies to the same turn whose judge scores (aggregated empathy, 1-5) differ by "
            f">= {settings.margin:g}; intervals resample turns, keeping each turn's pairs together.",
        ]
        if any(missing.values()):
            notes.append("Pairs left out for a missing reward: " + ", ".join(f"{v} {n}" for v, n in missing.items()))
        return _task_result(
            self,
            data,
            records,
            [MetricRow(name, values) for name, values in rows.items()],
            notes,
            extra={"pairs": len(pairs), "margin": settings.margin, "pairs_missing_reward": missing},
        )


# -- 3. expert agreement ------------------------------------------------------------------------


def expert_aggregate(scores: Mapping[str, float]) -> float:
    """Mean over the six judge dimensions, negative ones inverted (6 - s), as MINT aggregates empathy.

    Examples:
        >>> expert_aggregate({"validating_emotions": 5, "encouraging_elaboration": 5, "demonstrating_understanding": 5,
        ...                   "advice_giving": 1, "self_oriented": 1, "dismissing_emotions": 1})
        5.0
    """
    values = [6 - scores[d] if d in NEGATIVE_JUDGE_DIMENSIONS else scores[d] for d in MINT_JUDGE_DIMENSIONS]
    return sum(values) / len(values)


def _read_csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


class ExpertTask:
    """Dialogue-level agreement with the three Lend-an-Ear experts' median ratings."""

    name = "experts"
    title = "Expert agreement (Lend-an-Ear, conversation level)"
    unit = "conversations"

    def load(self, paths: DataPaths, settings: Settings) -> TaskData:
        loaded = load_lend_an_ear(paths.lend_an_ear_dir)
        issues = list(loaded.issues)
        rated = []
        for position, dialogue in enumerate(loaded, start=1):
            ratings = dialogue.metadata.get("expert_ratings") or {}
            complete = [r for r in ratings.values() if all(d in r for d in MINT_JUDGE_DIMENSIONS)]
            if not complete:
                issues.append(
                    LoadIssue(
                        str(paths.lend_an_ear_dir),
                        f"conversation {position}",
                        "expert_ratings",
                        f"no complete expert rating for {dialogue.id}",
                        dropped=True,
                    )
                )
                continue
            rated.append((dialogue, complete))
        chosen = select(rated, settings.limit, settings.seed)
        items: list[Item] = []
        experts: dict[str, dict[str, float]] = {}
        for dialogue, complete in chosen:
            experts[dialogue.id] = {d: float(statistics.median(r[d] for r in complete)) for d in MINT_JUDGE_DIMENSIONS}
            turns = list(enumerate(dialogue.supporter_turns(), start=1))
            items += [_turn_item("", t, n, reply=True) for n, t in spread(turns, settings.max_turns)]
        judged_dir = paths.lend_an_ear_dir / "judged_turns"
        published = {r["metric"]: float(r["spearman_rho"]) for r in _read_csv(judged_dir / JUDGE_AGREEMENT_FILE)}
        judge = {
            r["conversation_id"]: {d: float(r[d]) for d in MINT_JUDGE_DIMENSIONS}
            for r in _read_csv(judged_dir / JUDGE_CONVERSATION_FILE)
        }
        base = paths.lend_an_ear_dir / "lend_an_ear_eval"
        sources = [base / "lend_an_ear_50_conversations.csv", *sorted((base / "expert_ratings").glob("*.csv"))]
        sources += [p for p in (judged_dir / JUDGE_AGREEMENT_FILE, judged_dir / JUDGE_CONVERSATION_FILE) if p.exists()]
        extra = {"experts": experts, "published": published, "judge": judge}
        return TaskData(items, len(chosen), len(rated), sources, issues, extra)

    def evaluate(self, data: TaskData, records: Records, settings: Settings) -> TaskResult:
        experts: dict[str, dict[str, float]] = data.extra["experts"]
        targets = [*MINT_JUDGE_DIMENSIONS, "aggregate"]

        def target(conversation: str, name: str) -> float:
            scores = experts[conversation]
            return expert_aggregate(scores) if name == "aggregate" else scores[name]

        main: dict[str, Estimate] = {}
        detail_rows: list[list[str]] = []
        excluded: dict[str, int] = {}
        care_columns: dict[str, dict[str, Estimate]] = {}
        for variant in VARIANTS:
            rewards, dims, excluded[variant] = _dialogue_means(data, records, variant)
            if not rewards:
                continue
            main[variant] = _correlation([(rewards[c], target(c, "aggregate")) for c in rewards], spearman, settings)
            if variant == "care":
                for name in targets:
                    column = {
                        "reward": _correlation([(rewards[c], target(c, name)) for c in rewards], spearman, settings)
                    }
                    for dim in DIMENSIONS:
                        points = [(dims[c][dim.value], target(c, name)) for c in dims if dim.value in dims[c]]
                        column[dim.value] = _correlation(points, spearman, settings)
                    care_columns[name] = column
        judge: dict[str, dict[str, float]] = data.extra["judge"]
        published: dict[str, float] = data.extra["published"]
        for name in targets:
            column = care_columns.get(name, {})
            shared = [c for c in experts if c in judge]
            if name == "aggregate":
                points = [(expert_aggregate(judge[c]), target(c, name)) for c in shared]
            else:
                points = [(judge[c][name], target(c, name)) for c in shared]
            judge_here = spearman([a for a, _ in points], [b for _, b in points]) if len(points) > 1 else None
            pub = published.get("mean" if name == "aggregate" else name)
            detail_rows.append(
                [
                    name,
                    *(
                        column[k].format(2) if k in column else "n/a"
                        for k in ("reward", *(d.value for d in DIMENSIONS))
                    ),
                    _fmt(judge_here),
                    "n/a" if pub is None else f"{pub:.3f}" + (" (mean)" if name == "aggregate" else ""),
                ]
            )
        detail = _table(
            [
                "expert dimension (median of 3)",
                "CARE reward",
                "cognitive score",
                "affective score",
                "proactive score",
                f"judge, these {len(experts)}",
                "judge, published (50)",
            ],
            detail_rows,
        )
        notes = [
            "Dialogue-level reward = mean turn reward over the scored supporter turns"
            + (f" (at most {settings.max_turns} per conversation, evenly spread)" if settings.max_turns else "")
            + "; a conversation with a failed turn is left out.",
            "Aggregate = mean of the six expert dimensions with advice_giving, self_oriented and dismissing_emotions "
            "inverted; for those three a good reward correlates negatively.",
            "Judge columns: gpt-oss-120b's turn ratings aggregated per conversation, against the experts on the same "
            "dimension (shipped with the data).",
        ]
        return _task_result(
            self,
            data,
            records,
            [MetricRow("Spearman vs expert aggregate", main)],
            notes,
            left_out=("Conversations", excluded),
            details=[detail],
            extra={
                "care_by_dimension": {n: {k: e.to_json() for k, e in col.items()} for n, col in care_columns.items()},
                "judge_published": published,
                "excluded": excluded,
            },
        )


# -- 4. success vs failure ----------------------------------------------------------------------


class SuccessTask:
    """Successful ESConv dialogues against FailedESConv: AUC of the dialogue-level reward."""

    name = "success"
    title = "Success vs failure (ESConv vs FailedESConv, dialogue level)"
    unit = "dialogues (both classes)"

    def load(self, paths: DataPaths, settings: Settings) -> TaskData:
        success = load_esconv(paths.esconv_file)
        failed = load_esconv(paths.failed_file)
        items: list[Item] = []
        labels: dict[str, str] = {}
        available = 0
        units = 0
        chosen: dict[str, list[SupportDialogue]] = {}
        for label, loaded in (("success", success), ("failed", failed)):
            dialogues = [d for d in loaded if d.supporter_turns()]
            available += len(dialogues)
            chosen[label] = select(dialogues, settings.limit, settings.seed)
            units += len(chosen[label])
        # Alternate the classes so that a run stopped part-way has both.
        ranked = [
            (label, dialogue)
            for pair in zip_longest(chosen["success"], chosen["failed"])
            for label, dialogue in zip(("success", "failed"), pair, strict=True)
            if dialogue is not None
        ]
        for label, dialogue in ranked:
            labels[dialogue.id] = label
            turns = list(enumerate(dialogue.supporter_turns(), start=1))
            items += [
                _turn_item(f"{label}:", t, n, reply=True, label=label, emotion=dialogue.metadata.get("emotion_type"))
                for n, t in spread(turns, settings.max_turns)
            ]
        issues = list(success.issues) + list(failed.issues)
        return TaskData(items, units, available, [paths.esconv_file, paths.failed_file], issues, {"labels": labels})

    def evaluate(self, data: TaskData, records: Records, settings: Settings) -> TaskResult:
        labels: dict[str, str] = data.extra["labels"]
        row: dict[str, Estimate] = {}
        means: dict[str, dict[str, float | None]] = {}
        excluded: dict[str, int] = {}
        for variant in VARIANTS:
            rewards, _, excluded[variant] = _dialogue_means(data, records, variant)
            if not rewards:
                continue
            units = [(labels[d], r) for d, r in rewards.items()]

            def stat(sample: Sequence[tuple[str, float]]) -> float | None:
                return auc([r for lab, r in sample if lab == "success"], [r for lab, r in sample if lab == "failed"])

            row[variant] = bootstrap(
                units, stat, resamples=settings.resamples, seed=settings.seed, strata=lambda u: u[0]
            )
            means[variant] = {lab: mean(r for lb, r in units if lb == lab) for lab in ("success", "failed")}
        notes = [
            "AUC = chance that a successful dialogue gets a higher dialogue-level reward than a failed one "
            "(0.5 = no signal); intervals resample within each class.",
            "Dialogue-level reward = mean turn reward"
            + (f" over at most {settings.max_turns} supporter turns, evenly spread" if settings.max_turns else "")
            + "; a dialogue with a failed turn is left out. Length only = mean reply length.",
        ]
        return _task_result(
            self,
            data,
            records,
            [MetricRow("AUC (success > failure)", row)],
            notes,
            left_out=("Dialogues", excluded),
            extra={"class_means": means, "excluded": excluded},
        )


# -- 5. simulated-user signal -------------------------------------------------------------------


class SimulatedTask:
    """SAGE rollouts: does each turn's reward track the simulated user's emotion change after it?"""

    name = "simulated"
    title = "Simulated-user signal (SAGE rollouts, Chinese)"
    unit = "turns"

    def load(self, paths: DataPaths, settings: Settings) -> TaskData:
        files = paths.sage_files
        if not files:
            raise InputError(
                "no SAGE rollout files (results_*/*_result.jsonl)", location=str(paths.root / "sage_rlver")
            )
        turns: list[Item] = []
        issues: list[LoadIssue] = []
        for path in files:
            loaded = load_sage_rollouts(path)
            issues += loaded.issues
            for rollout in loaded:
                number = 0
                for index, message in enumerate(rollout.messages):
                    if message.role != "assistant":
                        continue
                    number += 1
                    if index == 0 or index not in rollout.deltas:
                        continue
                    dialogue_id = f"{rollout.model}:{rollout.id}"
                    turns.append(
                        Item(
                            key=f"{dialogue_id}:{index}",
                            context=rollout.messages[:index],
                            reply=message.content,
                            fields={
                                "id": dialogue_id,
                                "turn": index,
                                "turn_number": number,
                                "model": rollout.model,
                                "delta": rollout.deltas[index],
                            },
                        )
                    )
        chosen = select(turns, settings.limit, settings.seed)
        return TaskData(chosen, len(chosen), len(turns), list(files), issues)

    def evaluate(self, data: TaskData, records: Records, settings: Settings) -> TaskResult:
        rho: dict[str, Estimate] = {}
        r: dict[str, Estimate] = {}
        for variant in VARIANTS:
            points = []
            for item in data.items:
                value = _reward(records, item.key, variant)
                if value is not None:
                    points.append((value, float(item.fields["delta"])))
            if not points:
                continue
            rho[variant] = _correlation(points, spearman, settings)
            r[variant] = _correlation(points, pearson, settings)
        notes = [
            "Emotion change = the simulator's change of the user's emotion (0-100 scale) right after the turn.",
        ]
        return _task_result(
            self,
            data,
            records,
            [MetricRow("Spearman vs emotion change", rho), MetricRow("Pearson vs emotion change", r)],
            notes,
        )


TASKS: dict[str, Task] = {
    task.name: task for task in (AlignmentTask(), PairwiseTask(), ExpertTask(), SuccessTask(), SimulatedTask())
}
"""The tasks by name, in report order."""
