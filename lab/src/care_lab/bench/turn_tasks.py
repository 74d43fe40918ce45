"""The turn-level quality tasks: priority alignment (ESConv) and pairwise preference (judged turns)."""

from __future__ import annotations

from typing import Any

from care_lab.bench._task_base import (
    DataPaths,
    MetricRow,
    QualityTask,
    Records,
    Settings,
    TaskData,
    TaskResult,
    Unusable,
    _fmt,
    _mean,
    _reward,
    _task_result,
    _turn_item,
    keep_units,
    select,
    top_match,
)
from care_lab.bench.metrics import (
    SIMILAR_LENGTH,
    Estimate,
    bootstrap,
    mean,
    pairwise_accuracy,
    preference_pairs,
    score_pairs,
    similar_length,
)
from care_lab.bench.variants import MODEL_VARIANTS, VARIANTS, Item, record_done
from care_lab.data import (
    LEND_AN_EAR_HELD_OUT,
    JudgedResponse,
    SupportDialogue,
    SupportTurn,
    lend_an_ear_split,
    load_esconv,
    load_judged_turns,
    load_lend_an_ear,
)
from care_lab.data.priorities import fit_top_priors, r_align, turn_number
from care_lab.data.roles import require_role
from care_sdk.errors import InputError
from care_sdk.prompts import generator_position
from care_sdk.types import DIMENSIONS

__all__ = ["AlignmentTask", "PairwiseTask"]


class AlignmentTask(
    QualityTask, name="alignment", title="Priority alignment (ESConv test supporter turns)", unit="turns"
):
    """Priority alignment on ESConv supporter turns: does the top weight match the reference strategies?"""

    def load(self, paths: DataPaths, settings: Settings) -> TaskData:
        loaded = load_esconv(paths.esconv_file)
        turns: list[tuple[SupportDialogue, SupportTurn]] = []
        for dialogue in loaded:
            for turn in dialogue.supporter_turns():
                if turn.top_dimensions:
                    turns.append((dialogue, turn))
        chosen = select(turns, settings.limit, settings.seed)
        sources, issues = [paths.esconv_file], list(loaded.issues)
        train = paths.esconv_file.parent / "train.jsonl"  # the turn-position prior is fitted there, if it is there
        priors = None
        if train.is_file() and train.resolve() != paths.esconv_file.resolve():
            require_role(train, "fit", what="the turn-position prior's training data")
            train_loaded = load_esconv(train)
            priors = fit_top_priors(t for d in train_loaded for t in d.supporter_turns())
            sources.append(train)
            issues += train_loaded.issues
        items = [
            _turn_item(
                "",
                turn,
                reply=False,
                emotion=dialogue.metadata.get("emotion_type"),
                counts={d.value: n for d, n in turn.counts.items()},
                top=[d.value for d in turn.top_dimensions],
                prior_top=priors.top(turn_number(turn)).value if priors else None,
            )
            for dialogue, turn in chosen
        ]
        return TaskData(items, len(items), len(turns), sources, issues)

    def evaluate(self, data: TaskData, records: Records, settings: Settings) -> TaskResult:
        match_row: dict[str, Estimate] = {}
        align_row: dict[str, Estimate] = {}
        mean_weights: dict[str, dict[str, float | None]] = {}
        care_hits: dict[str, float] = {}
        for variant in MODEL_VARIANTS:
            hits: dict[str, float] = {}
            aligns: list[float] = []
            weights: list[dict[str, float]] = []
            for item in data.items:
                record = records.get(item.key, {}).get(variant)
                if not record_done(record, needs_evaluation=False):
                    continue
                assert record is not None
                w = record["rubric"]["weights"]
                weights.append(w)
                hits[item.key] = top_match(w, item.fields["top"])
                aligns.append(r_align(w, item.fields["counts"]))
            if not weights:
                continue
            if variant == "care":
                care_hits = hits
            match_row[variant] = bootstrap(list(hits.values()), _mean, resamples=settings.resamples, seed=settings.seed)
            align_row[variant] = bootstrap(aligns, _mean, resamples=settings.resamples, seed=settings.seed)
            mean_weights[variant] = {d.value: mean(w[d.value] for w in weights) for d in DIMENSIONS}
        chance = mean(len(item.fields["top"]) / len(DIMENSIONS) for item in data.items)
        prior_note, prior = _against_prior(data, care_hits, settings)
        majority = {d.value: mean(float(d.value in item.fields["top"]) for item in data.items) for d in DIMENSIONS}
        notes = [
            "A weight tie counts as the expected hit of a random tie-break, so uniform weights score the chance level.",
            f"Chance level {_fmt(chance)}; always naming one dimension scores "
            + ", ".join(f"{d} {_fmt(v)}" for d, v in majority.items())
            + ".",
            prior_note,
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
            extra={"chance": chance, "single_dimension": majority, "mean_weights": mean_weights, **prior},
        )


def _against_prior(
    data: TaskData, care_hits: dict[str, float], settings: Settings
) -> tuple[str, dict[str, dict[str, Any]]]:
    """The note on the turn-position prior's top-dimension match and CARE's paired difference from it
    (``care_hits``: CARE's match per item key), and the two estimates for the report's JSON."""
    if not data.items or any(item.fields.get("prior_top") is None for item in data.items):
        return "Turn-position prior: not measured (no ESConv train.jsonl beside the test file to fit it on).", {}
    prior = {item.key: float(item.fields["prior_top"] in item.fields["top"]) for item in data.items}
    estimate = bootstrap(list(prior.values()), _mean, resamples=settings.resamples, seed=settings.seed)
    note = (
        "Turn-position prior (the dimension most often on top at each supporter-turn number of ESConv train): "
        + estimate.format()
    )
    if not care_hits:
        return note + ".", {"turn_position_prior": estimate.to_json()}
    diffs = [hit - prior[key] for key, hit in care_hits.items()]
    paired = bootstrap(diffs, _mean, resamples=settings.resamples, seed=settings.seed)
    return (
        f"{note}; CARE minus the prior, paired on its {len(diffs)} turns: {paired.format()}.",
        {"turn_position_prior": estimate.to_json(), "care_minus_prior": paired.to_json()},
    )


class PairwiseTask(
    QualityTask, name="pairwise", title="Pairwise preference vs the MINT judge (Lend-an-Ear turns)", unit="judged turns"
):
    """Pairwise preference accuracy on MINT's judged replies from different systems to the same turn.

    Only the held-out conversations (:data:`~care_lab.data.LEND_AN_EAR_HELD_OUT`) are read: the
    others feed the preference pairs and the evaluator's training data.
    """

    def load(self, paths: DataPaths, settings: Settings) -> TaskData:
        judged = load_judged_turns(paths.judged_file)
        conversations = load_lend_an_ear(paths.lend_an_ear_dir)
        by_id = {d.id: d for d in conversations}
        issues = list(judged.issues) + list(conversations.issues)
        unknown = sorted({r.system for r in judged} - set(settings.systems)) if settings.systems else []
        missing_systems = sorted(set(settings.systems) - {r.system for r in judged})
        if missing_systems:
            raise InputError(
                f"no judged responses from system(s) {', '.join(missing_systems)}", location=str(paths.judged_file)
            )

        def placed(response: JudgedResponse) -> tuple[JudgedResponse, SupportDialogue] | Unusable | None:
            if response.system in unknown:
                return None
            dialogue = by_id.get(response.conversation_id)
            index = response.turn_index
            if (
                dialogue is None
                or not 0 < index < len(dialogue.messages)
                or dialogue.messages[index].role != "assistant"
            ):
                return Unusable(
                    f"no supporter message at {index} in Lend-an-Ear conversation {response.conversation_id}"
                )
            if lend_an_ear_split(response.conversation_id) not in LEND_AN_EAR_HELD_OUT:
                return None  # trained on: its pairs are training data
            return response, dialogue

        groups: dict[tuple[str, int], dict[str, Any]] = {}
        kept = keep_units(judged, placed, source=paths.judged_file, unit="line", field="turn_index", issues=issues)
        for response, dialogue in kept:
            group = groups.setdefault(
                (response.conversation_id, response.turn_index), {"dialogue": dialogue, "responses": {}}
            )
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
                            "turn_number": generator_position(context)[1],
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
        replies = {item.key: item.reply or "" for item in data.items}
        similar = [p for p in pairs if similar_length(replies[p.better], replies[p.worse])]
        rows: dict[str, dict[str, Estimate]] = {
            "accuracy (ties = 1/2)": {},
            "accuracy, untied pairs": {},
            "share of tied pairs": {},
            "accuracy, replies of similar length": {},
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
            if similar:
                rows["accuracy, replies of similar length"][variant] = pairwise_accuracy(
                    score_pairs(similar, rewards)[0], resamples=settings.resamples, seed=settings.seed
                )["accuracy"]
        notes = [
            f"{len(pairs)} pairs of replies to the same turn whose judge scores (aggregated empathy, 1-5) differ by "
            f">= {settings.margin:g}, from the held-out Lend-an-Ear conversations only (split "
            f"{'/'.join(LEND_AN_EAR_HELD_OUT)}); intervals resample turns, keeping each turn's pairs together.",
            f"{len(similar)} of them are replies of similar length (the longer at most {SIMILAR_LENGTH:g} times the "
            "other's words): there length cannot be what orders a pair, so a reward that orders them has learned "
            "more than that the judge prefers longer replies.",
        ]
        if any(missing.values()):
            notes.append("Pairs left out for a missing reward: " + ", ".join(f"{v} {n}" for v, n in missing.items()))
        return _task_result(
            self,
            data,
            records,
            [MetricRow(name, values) for name, values in rows.items()],
            notes,
            extra={
                "pairs": len(pairs),
                "pairs_of_similar_length": len(similar),
                "margin": settings.margin,
                "pairs_missing_reward": missing,
            },
        )


# -- 3. expert agreement ------------------------------------------------------------------------
