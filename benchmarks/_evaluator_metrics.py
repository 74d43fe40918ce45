"""The evaluator benchmark's rewards and metrics, read from its cached rubrics, evaluations and
context-fit reads: one owner for how a row's rewards are formed (rubric variants, context fit,
guards) and scored (pairwise orderings, ESConv shares, zero spread, expert and length Spearman).

``bench_evaluator.py`` writes the caches and the report with these; ``compare_baselines.py``,
``bench_evaluator_similar_length.py`` and ``bench_pmi_variants.py`` read the same caches with them.

Example (a reward of the fixed-criteria variant from a cached rubric and its scores)::

    >>> from _evaluator_metrics import row_rewards
    >>> rewards = row_rewards(items, rubrics, evals, "sampled", "generated", "fixed")  # doctest: +SKIP
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from _evaluator_items import ECHOES

from care_lab.bench.metrics import (
    Estimate,
    PairOutcome,
    PreferencePair,
    bootstrap,
    pairwise_accuracy,
    preference_pairs,
    score_pairs,
    similar_length,
    spearman,
)
from care_sdk.bundled.context_fit import Gate, fitted_reward
from care_sdk.bundled.shift_check import ShiftCheck
from care_sdk.guards import EMPTY_REPLY, NO_WORDS, Guards, own_share, policy_reward, screen
from care_sdk.types import DIMENSIONS, CriterionScore, Evaluation, RewardResult, Rubric, fixed_criteria


def _reward(rubric_record: dict[str, Any], scores: list[float], weights: str, criteria: str) -> float:
    rubric = Rubric.model_validate(rubric_record)
    if criteria == "fixed":
        rubric = Rubric(weights=rubric.weights, criteria=fixed_criteria())
    if weights == "uniform":
        rubric = rubric.with_weights({d: 1.0 for d in DIMENSIONS})
    evaluation = Evaluation(
        scores=tuple(
            CriterionScore(dimension=c.dimension, criterion=c.text, score=s)
            for c, s in zip(rubric.criteria, scores, strict=True)
        )
    )
    return RewardResult.from_parts(rubric, evaluation).reward or 0.0


def row_rewards(
    items: list[dict[str, Any]], rubric_of: dict[str, Any], evals: dict[str, Any], how: str, weights: str, criteria: str
) -> dict[str, float | None]:
    """``{item key: reward}`` (``None`` where the rubric or the evaluation failed)."""
    out: dict[str, float | None] = {}
    for item in items:
        rubric = rubric_of.get(item["group"], {}).get("rubric")
        value = evals.get(item["key"])
        if rubric is None or "error" in rubric or value is None or how not in value:
            out[item["key"]] = None
            continue
        out[item["key"]] = _reward(rubric, value[how], weights, criteria)
    return out


def esconv_pairs(items: list[dict[str, Any]], kind: str) -> list[PreferencePair[str]]:
    """``(reference, reply of this kind)`` for every ESConv group of ``items``, the reference the
    better one: what ``esconv reference > KIND`` scores (``kind``: other, platitude, evasive or an echo)."""
    by_kind: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for it in items:
        if it["task"] == "esconv":
            by_kind[it["group"]][it["kind"]].append(it["key"])
    return [
        PreferencePair(group=group, better=kinds["reference"][0], worse=key, gap=1.0)
        for group, kinds in by_kind.items()
        for key in kinds[kind]
    ]


def share_by_group(outcomes: list[PairOutcome], resamples: int) -> Estimate:
    """The share of pairs won (ties 1/2), pooled, with a bootstrap interval over their groups."""
    by_group: dict[Any, list[float]] = defaultdict(list)
    for outcome in outcomes:
        by_group[outcome.group].append(outcome.value)

    def stat(sample: list[list[float]]) -> float | None:
        flat = [v for unit in sample for v in unit]
        return sum(flat) / len(flat) if flat else None

    return bootstrap(list(by_group.values()), stat, resamples=resamples)


def valid_gate(pmi: dict[str, float]) -> Gate | None:
    """The gate fitted on the ESConv train pairs among cached PMI values (keys
    ``gate:<i>:reference`` / ``gate:<i>:other``); ``None`` without any (``--valid-pairs 0``)."""
    heads = {key.rsplit(":", 1)[0] for key in pmi if key.startswith("gate:")}
    if not heads:
        return None
    return Gate.fit(
        [pmi[f"{h}:reference"] for h in heads if f"{h}:reference" in pmi],
        [pmi[f"{h}:other"] for h in heads if f"{h}:other" in pmi],
    )


def own_shares(items: list[dict[str, Any]]) -> dict[str, float]:
    """Each item's share of its reply that does not repeat its context (what scales its fit)."""
    return {it["key"]: own_share(it["reply"], [m["content"] for m in it["context"]]) for it in items}


def check_cache(out: Path, check: ShiftCheck | None = None) -> Path:
    """Where a run directory keeps the factors of ``check`` (``None``: the bundled one,
    ``shift_check.jsonl``; another, ``shift_check-<its fingerprint>.jsonl``)."""
    if check is None or check.identity == ShiftCheck.bundled().identity:
        return out / "shift_check.jsonl"
    return out / f"shift_check-{check.identity.split('=')[1]}.jsonl"


def checked_shares(own: dict[str, float], cached: dict[str, Any], check: ShiftCheck | None = None) -> dict[str, float]:
    """Each item's own share (:func:`own_shares`) times its factor from the shift check (``None``:
    the bundled :class:`~care_sdk.bundled.shift_check.ShiftCheck`), as the ``shift-check`` stage cached it
    (:func:`check_cache`): what scales the gated PMI in the default reward. Items without a
    factor are left out (none when the stage did not run)."""
    identity = (check or ShiftCheck.bundled()).identity
    stale = {v["check"] for v in cached.values() if "check" in v} - {identity}
    if stale:
        raise SystemExit(f"the shift-check cache was read with another check ({', '.join(stale)}): run the stage again")
    return {k: share * cached[k]["factor"] for k, share in own.items() if "factor" in cached.get(k, {})}


def with_context_fit(
    care: dict[str, float | None], pmi: dict[str, float], own: dict[str, float], gate: Gate, floor: float
) -> dict[str, float | None]:
    """The rubric rewards ``care`` read with context fit (:func:`~care_sdk.bundled.context_fit.fitted_reward`
    of the gated PMI scaled by the reply's own share); ``None`` where either part is missing."""
    return {
        k: (fitted_reward(r, gate(pmi[k]) * own[k], floor) if r is not None and k in pmi else None)
        for k, r in care.items()
    }


def metrics(items: list[dict[str, Any]], rewards: dict[str, float | None], resamples: int) -> dict[str, Estimate]:
    """Every metric of one row (see the module docstring)."""
    result: dict[str, Estimate] = {}
    lae = [it for it in items if it["task"] == "lend-an-ear"]
    groups: dict[str, dict[str, float]] = defaultdict(dict)
    for it in lae:
        groups[it["group"]][it["key"]] = it["judge"]
    pairs = preference_pairs(groups, margin=1.0)
    outcomes, _ = score_pairs(pairs, rewards)
    if outcomes:
        result["lae pairwise"] = pairwise_accuracy(outcomes, resamples=resamples)["accuracy"]
    reply = {it["key"]: it["reply"] for it in lae}
    similar, _ = score_pairs([p for p in pairs if similar_length(reply[p.better], reply[p.worse])], rewards)
    if similar:
        result["lae pairwise, similar length"] = pairwise_accuracy(similar, resamples=resamples)["accuracy"]
    for kind in ("other", "platitude", "evasive", *ECHOES):
        result[f"esconv reference > {kind}"] = share_by_group(
            score_pairs(esconv_pairs(items, kind), rewards)[0], resamples
        )
    esconv: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for it in items:
        if it["task"] == "esconv":
            esconv[it["group"]][it["kind"]].append(it)
    flat = []
    for by_kind in esconv.values():
        values = [rewards.get(x["key"]) for xs in by_kind.values() for x in xs]
        if values and all(v is not None for v in values):
            flat.append(float(max(values) - min(values) < 1e-9))  # type: ignore[type-var,operator]
    result["esconv zero-spread groups"] = bootstrap(flat, lambda xs: sum(xs) / len(xs), resamples=resamples)
    per_conv: dict[str, list[float]] = defaultdict(list)
    expert: dict[str, float] = {}
    for it in lae:
        value = rewards.get(it["key"])
        if it["system"] == "gold" and value is not None and it["expert"] is not None:
            per_conv[it["conversation"]].append(value)
            expert[it["conversation"]] = it["expert"]
    units = [(statistics.mean(v), expert[c]) for c, v in per_conv.items()]

    def rho(sample: list[tuple[float, float]]) -> float | None:
        return spearman([a for a, _ in sample], [b for _, b in sample])

    result["expert spearman"] = bootstrap(units, rho, resamples=resamples)
    by_turn: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for it in lae:
        value = rewards.get(it["key"])
        if value is not None:
            by_turn[it["group"]].append((value, float(len(it["reply"].split()))))
    result["lae spearman with length"] = bootstrap(
        list(by_turn.values()), lambda sample: rho([p for unit in sample for p in unit]), resamples=resamples
    )
    return result


def guarded(items: list[dict[str, Any]], rewards: dict[str, float | None]) -> dict[str, float | None]:
    """``rewards`` as the shipped reward pays them with its default :class:`~care_sdk.guards.Guards`:
    0 for a reply a guard flags or settles (an empty reply, a copy of the dialogue, ...)."""
    report_only, shipped = Guards(on_flag="report"), Guards()
    out: dict[str, float | None] = {}
    for it in items:
        value = rewards.get(it["key"])
        flags = screen(it["reply"], report_only, [m["content"] for m in it["context"]]).flags
        settled = EMPTY_REPLY in flags or NO_WORDS in flags
        out[it["key"]] = None if value is None else 0.0 if settled else policy_reward(value, flags, shipped)
    return out
