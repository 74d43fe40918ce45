"""The dialogue-level quality tasks: expert ratings (Lend-an-Ear), support success (ESConv vs
FailedESConv) and simulated-user emotion (SAGE)."""

from __future__ import annotations

import csv
import statistics
from collections.abc import Mapping, Sequence
from itertools import zip_longest
from pathlib import Path

from care_lab.bench._task_base import (
    JUDGE_AGREEMENT_FILE,
    JUDGE_CONVERSATION_FILE,
    NEGATIVE_JUDGE_DIMENSIONS,
    DataPaths,
    MetricRow,
    QualityTask,
    Records,
    Settings,
    TaskData,
    TaskResult,
    Unusable,
    _correlation,
    _dialogue_means,
    _fmt,
    _reward,
    _table,
    _task_result,
    _turn_item,
    keep_units,
    select,
    spread,
)
from care_lab.bench.metrics import (
    Estimate,
    auc,
    bootstrap,
    mean,
    pearson,
    spearman,
)
from care_lab.bench.variants import VARIANTS, Item
from care_lab.data import MINT_JUDGE_DIMENSIONS, SupportDialogue, load_esconv, load_lend_an_ear
from care_lab.data.roles import require_role
from care_lab.data.sage_turns import load_sage_turns, sage_turn_count, scored_turns
from care_lab.data.splits import lend_an_ear_role
from care_sdk.errors import InputError
from care_sdk.types import DIMENSIONS

__all__ = ["ExpertTask", "SimulatedTask", "SuccessTask", "expert_aggregate"]


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


class ExpertTask(
    QualityTask, name="experts", title="Expert agreement (Lend-an-Ear, conversation level)", unit="conversations"
):
    """Dialogue-level agreement with the three Lend-an-Ear experts' median ratings.

    Reads the held-out conversations only (:func:`~care_lab.data.splits.lend_an_ear_role`
    ``selection``: 9 of the 50): the bundled evaluator was trained on the other 41.
    """

    def load(self, paths: DataPaths, settings: Settings) -> TaskData:
        loaded = load_lend_an_ear(paths.lend_an_ear_dir)
        issues = list(loaded.issues)

        def rated_dialogue(dialogue: SupportDialogue) -> tuple[SupportDialogue, list[dict[str, float]]] | Unusable:
            ratings = dialogue.metadata.get("expert_ratings") or {}
            complete = [r for r in ratings.values() if all(d in r for d in MINT_JUDGE_DIMENSIONS)]
            return (dialogue, complete) if complete else Unusable(f"no complete expert rating for {dialogue.id}")

        rated = keep_units(
            loaded,
            rated_dialogue,
            source=paths.lend_an_ear_dir,
            unit="conversation",
            field="expert_ratings",
            issues=issues,
        )
        held_out = [(d, c) for d, c in rated if lend_an_ear_role(d.id) == "selection"]
        require_role(
            paths.lend_an_ear_dir / "lend_an_ear_eval" / "lend_an_ear_50_conversations.csv",
            "evaluate",
            records=[{"id": d.id, "role": lend_an_ear_role(d.id)} for d, _ in held_out],
        )
        chosen = select(held_out, settings.limit, settings.seed)
        items: list[Item] = []
        experts: dict[str, dict[str, float]] = {}
        for dialogue, complete in chosen:
            experts[dialogue.id] = {d: float(statistics.median(r[d] for r in complete)) for d in MINT_JUDGE_DIMENSIONS}
            items += [_turn_item("", t, reply=True) for t in spread(dialogue.supporter_turns(), settings.max_turns)]
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
        return TaskData(items, len(chosen), len(held_out), sources, issues, extra)

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
            "Held-out conversations only (the Lend-an-Ear split's valid and test, data role selection): "
            "the bundled evaluator was trained on the other conversations.",
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


class SuccessTask(
    QualityTask,
    name="success",
    title="Success vs failure (ESConv vs FailedESConv, dialogue level)",
    unit="dialogues (both classes)",
):
    """Successful ESConv dialogues against FailedESConv: AUC of the dialogue-level reward."""

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
            items += [
                _turn_item(f"{label}:", t, reply=True, label=label, emotion=dialogue.metadata.get("emotion_type"))
                for t in spread(dialogue.supporter_turns(), settings.max_turns)
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


class SimulatedTask(
    QualityTask, name="simulated", title="Simulated-user signal (SAGE rollouts, Chinese)", unit="turns"
):
    """SAGE rollouts: does each turn's reward track the simulated user's emotion change after it?

    Reads the ``selection`` turns only: the 400 a seed-0 run has scored
    (:mod:`care_lab.data.sage_turns`). The other turns are a ``test`` set, read once per shipped
    artifact through the test-read ledger (:func:`care_lab.data.sage_test_turns`).
    """

    def load(self, paths: DataPaths, settings: Settings) -> TaskData:
        files = paths.sage_files
        if not files:
            raise InputError(
                "no SAGE rollout files (results_*/*_result.jsonl)", location=str(paths.root / "sage_rlver")
            )
        loaded = load_sage_turns(files)  # the selection turns: a test turn needs a ledger entry
        scored = scored_turns(loaded.records, sage_turn_count(files), limit=settings.limit, seed=settings.seed)
        chosen = [
            Item(
                key=t.key,
                context=t.context,
                reply=t.reply,
                fields={
                    "id": t.dialogue_id,
                    "turn": t.index,
                    "turn_number": t.turn_number,
                    "model": t.model,
                    "delta": t.delta,
                },
            )
            for t in scored
        ]
        return TaskData(chosen, len(chosen), len(loaded), list(files), list(loaded.issues))

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
