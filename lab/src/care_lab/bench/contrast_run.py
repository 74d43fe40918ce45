"""Running the contrast benchmark: the samples the rule fixes, the scoring arms, the records.

``care bench contrast`` (and ``benchmarks/bench_contrast.py``) score every context's replies
(:func:`care_lab.bench.contrast.contrast_replies`) with each arm and keep one JSON line per context
and arm in ``OUT/<arm>.jsonl``, so a run resumes where it stopped. The arms:

- ``method``: the bundled ``default`` computing the method's formula. Its records also hold each
  reply's PMI with its context and its own share (the two reads of context fit), so the context-fit
  arms are read from the same evaluations: ``fit_<gate>`` pays ``fit * (0.5 + 0.5 * r)`` with that
  gate, ``fit0_<gate>`` ``fit * r`` (:func:`fit_scores`).
- ``base``: the untrained base model as generator and evaluator, the method's formula.
- ``shipped``: ``AdaptiveReward.from_backend("default")`` as it ships (its documented formula); each
  record also holds the method's formula read from the same rubric and evaluation (``method_scores``).
- ``pairwise2`` to ``pairwise6``: the method's formula with a trained pairwise evaluator stage
  (:data:`PAIRWISE_ADAPTERS`), read with expected scores; ``pairwise2`` also records the PMI reads. Each
  gives two context-fit arms with the shipped gate: ``<arm>_fit`` (``fit * (0.5 + 0.5 * r)``) and
  ``<arm>_fit0`` (``fit * r``), the PMI read from whichever record of the context has it.

:func:`merge_records` joins the arms' records with the no-model baselines (length, feeling words)
into the records :func:`care_lab.bench.contrast.summarise` reads.

Examples:
    >>> from care_sdk.bundled.context_fit import Gate
    >>> rec = {"scores": [0.5, 0.0], "evaluated": [True, False], "pmi": [20.0, 1.0], "own_share": [1.0, 1.0]}
    >>> [round(x, 3) for x in fit_scores(rec, Gate(slope=0.25, intercept=-2.0))]
    [0.714, 0.0]
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from care_lab.bench.contrast import (
    ContrastItem,
    ContrastReply,
    asks_open_question,
    baseline_scores,
    contrast_replies,
    names_feeling,
    order_key,
)
from care_sdk import AdaptiveReward
from care_sdk.bundled.context_fit import DEFAULT_FLOOR, Gate, fitted_reward

__all__ = [
    "FIT_FLOORS",
    "MODEL_ARMS",
    "PAIRWISE_ADAPTER",
    "PAIRWISE_ADAPTERS",
    "Scorer",
    "esconv_items",
    "evaluator_adapter",
    "fit_scores",
    "merge_records",
    "read_records",
    "reward_scorer",
    "score_arm",
]

MODEL_ARMS = ("method", "base", "shipped", "pairwise2", "pairwise3", "pairwise4", "pairwise5", "pairwise6")
"""The arms that run a model; the context-fit arms of a selection run are read from ``method``'s records,
and ``shipped`` (the bundled ``default`` as it ships) records the method's formula of its own evaluation beside
its reward."""

FIT_FLOORS = {"fit": DEFAULT_FLOOR, "fit0": 0.0}
"""The context-fit arms read from a record's PMI, by the suffix or prefix that names them, and their floor:
``fit`` pays ``fit * (0.5 + 0.5 * r)`` (context fit as it ships), ``fit0`` ``fit * r``."""

PAIRWISE_ADAPTER = Path("runs/evaluator_pairwise/evaluator.gguf")
"""Where ``care_lab.training.evaluator_pairwise`` writes its adapter by default."""
PAIRWISE_ADAPTERS = {
    "pairwise2": PAIRWISE_ADAPTER,
    "pairwise3": Path("runs/evaluator_pairwise3/evaluator.gguf"),
    "pairwise4": Path("runs/evaluator_pairwise4/evaluator.gguf"),
    "pairwise5": Path("runs/evaluator_pairwise5/evaluator.gguf"),
    "pairwise6": Path("runs/evaluator_pairwise6/evaluator.gguf"),
}
"""The adapter each pairwise arm reads: the recipe's first stage, its second
(``--stage 2 --out runs/evaluator_pairwise3 --adapter runs/evaluator_pairwise3/evaluator.gguf``) and a
third stage tried on selection contexts 61 to 90 and not kept (its recipe, ``--stage 3``, is at commit
f71a9b8; ``benchmarks/rules/contrast.md``, the fourth-stage addendum), and the recipe's third stage
(``--stage 3 --out runs/evaluator_pairwise5 --adapter runs/evaluator_pairwise5/evaluator.gguf``, the addendum on
a selection sample shaped like the test read), and a fourth stage tried on ESConv test contexts 61 to 120 and
not kept (its recipe, ``--stage 4 --out runs/evaluator_pairwise6 --adapter runs/evaluator_pairwise6/evaluator.gguf``,
is at commit 3a548ff; the addendum on replies of the same problem type)."""

MIN_REAL_WORDS = 12
"""The rule's smallest real reply (words) for an ESConv context."""


def esconv_items(
    path: str | Path, limit: int = 60, *, min_users: int = 2, min_words: int = MIN_REAL_WORDS
) -> list[ContrastItem]:
    """The rule's ESConv sample: per dialogue, the first supporter turn with ``min_users`` user messages
    before it and a real reply of at least ``min_words`` words (the sample shaped like the test read:
    one and 8); ordered by :func:`~care_lab.bench.contrast.order_key`, the first ``limit``. The file is read
    for selection.

    Raises:
        InputError: the file may not be read for selection (a test or undeclared file).
    """
    from care_lab.data.esconv import load_esconv
    from care_lab.data.roles import require_role

    require_role(path, "select")
    items = []
    for dialogue in load_esconv(path).records:
        for turn in dialogue.supporter_turns():
            users = sum(1 for m in turn.context if m.role == "user")
            if users >= min_users and len(turn.reply.split()) >= min_words:
                context = [m.model_dump(mode="json", include={"role", "content"}) for m in turn.context]
                items.append(ContrastItem(f"{turn.dialogue_id}#{turn.index}", context, turn.reply))
                break
    return sorted(items, key=lambda item: order_key(item.id))[:limit]


def read_records(path: Path) -> dict[str, dict[str, Any]]:
    """The records of one arm's file, by context id (empty when the file does not exist)."""
    if not path.is_file():
        return {}
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return {row["id"]: row for row in rows}


def _dimensions(result: Any) -> dict[str, float] | None:
    if result.dimension_scores is None:
        return None
    return {d.value: float(s) for d, s in result.dimension_scores.items()}


Scorer = Callable[[ContrastItem, list[ContrastReply]], dict[str, Any]]
"""Scores one context's replies into the fields of its record (``scores``, ``criteria``, ...)."""


def reward_scorer(reward: AdaptiveReward, *, fit: Any = None, formula: bool = False) -> Scorer:
    """The record fields of one context's replies under ``reward``: scores, per-dimension criteria means,
    flags and errors; with ``fit`` (a :class:`~care_sdk.bundled.context_fit.ContextFit`) each reply's PMI
    and own share; with ``formula`` the method's formula of the same evaluations (``method_scores``) and
    the reward's context fit.

    Examples:
        >>> from care_sdk import AdaptiveReward, Rubric, RubricEvaluator
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json
        >>> ev = RubricEvaluator(ScriptedBackend([evaluation_json([5, 5, 3, 3, 1, 1])] * 2))
        >>> score = reward_scorer(AdaptiveReward(evaluator=ev, rubric=Rubric.uniform_fixed()))
        >>> item = ContrastItem("a", [{"role": "user", "content": "I failed."}], "That hurts.")
        >>> score(item, [ContrastReply("real", item.reply), ContrastReply("one_word", "Ok.")])["scores"]
        [0.5, 0.5]
    """

    def score(item: ContrastItem, replies: list[ContrastReply]) -> dict[str, Any]:
        pairs = [(item.context, r.text) for r in replies]
        results = reward.score_batch(pairs)
        record: dict[str, Any] = {
            "scores": [r.reward for r in results],
            "criteria": [_dimensions(r) for r in results],
            "evaluated": [r.evaluation is not None for r in results],
            "flags": [list(r.flags) for r in results],
            "errors": [r.error for r in results],
            "criteria_text": [[c.text for c in rubric.criteria] for rubric in [results[0].rubric] if rubric],
        }
        if formula:
            # the method's formula of the same evaluation (RewardResult.rubric_reward); the guards' reward where
            # they settled the reply without one
            record["method_scores"] = [r.reward if r.rubric_reward is None else r.rubric_reward for r in results]
            record["context_fit"] = [r.context_fit for r in results]
        if fit is not None:
            pmis = fit.pmi_batch(pairs)
            record["pmi"] = [p if isinstance(p, float) else None for p in pmis]
            record["own_share"] = [fit.own_share(item.context, r.text) for r in replies]
        return record

    return score


def _scorer(arm: str) -> Scorer:
    from care_sdk import RubricEvaluator, RubricGenerator

    if arm == "base":
        return reward_scorer(AdaptiveReward(RubricGenerator("base"), RubricEvaluator("base")))
    if arm == "shipped":
        return reward_scorer(AdaptiveReward.from_backend("default"), formula=True)
    if arm == "method":
        from care_sdk.bundled.context_fit import ContextFit

        # the method's formula alone, with the PMI reads the context-fit arms are computed from
        return reward_scorer(AdaptiveReward.from_backend("default"), fit=ContextFit())
    if arm in PAIRWISE_ADAPTERS:
        from care_sdk.backends import resolve_backend
        from care_sdk.bundled.context_fit import ContextFit

        adapter = PAIRWISE_ADAPTERS[arm]
        if not adapter.is_file():
            raise FileNotFoundError(f"{adapter}: train it first (care_lab.training.evaluator_pairwise)")
        backend = resolve_backend("default", role="evaluator", adapter=adapter)
        evaluator = RubricEvaluator(backend, use_logprobs=True)  # read as it was trained: expected scores
        fit = ContextFit() if arm == "pairwise2" else None  # the PMI reads once per context
        return reward_scorer(AdaptiveReward(RubricGenerator("default"), evaluator), fit=fit)
    raise ValueError(f"unknown arm {arm!r}; choose from {', '.join(MODEL_ARMS)}")


def evaluator_adapter(arm: str) -> str | None:
    """The first 12 hex digits of the SHA-256 of the evaluator adapter a model arm reads (``None`` for
    ``base``, which reads none): what every record of the arm holds as ``evaluator``, so records of two
    adapters never mix in one arm's file."""
    from care_lab.data._content import file_sha256
    from care_sdk.bundled.adapters import bundled_adapter

    if arm == "base":
        return None
    path = PAIRWISE_ADAPTERS.get(arm) or bundled_adapter("evaluator")
    if path is None or not path.is_file():
        return None
    return file_sha256(path)[:12]


def score_arm(
    arm: str,
    items: Sequence[ContrastItem],
    out: Path,
    progress: Callable[[str], None] = print,
    scorer: Scorer | None = None,
) -> dict[str, dict[str, Any]]:
    """Score every context's replies with ``arm`` (one of :data:`MODEL_ARMS`, or any name with a
    ``scorer`` from :func:`reward_scorer`), appending to ``OUT/<arm>.jsonl``; contexts already there are
    kept (a resumed run). Returns the arm's records by context id.

    Raises:
        ValueError: a kept record of a model arm was scored with another evaluator adapter (or none recorded).
    """
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{arm}.jsonl"
    done = read_records(path)
    pinned = None
    if scorer is None:  # a model arm: every record names the evaluator adapter it was scored with
        pinned = evaluator_adapter(arm)
        for row in done.values():
            if row.get("evaluator") != pinned:
                raise ValueError(
                    f"{path}, context {row['id']}: scored with evaluator {row.get('evaluator') or '(not recorded)'}, "
                    f"this run's is {pinned}; score into another --out"
                )
    todo = [
        (item, replies) for item, replies in zip(items, contrast_replies(items), strict=True) if item.id not in done
    ]
    if not todo:
        return done
    score = scorer or _scorer(arm)
    with path.open("a", encoding="utf-8") as sink:
        for n, (item, replies) in enumerate(todo, start=1):
            start = time.perf_counter()
            record = {"id": item.id, "families": [r.family for r in replies], **score(item, replies)}
            if scorer is None:
                record["evaluator"] = pinned
            record["seconds"] = round(time.perf_counter() - start, 2)
            sink.write(json.dumps(record, ensure_ascii=False) + "\n")
            sink.flush()
            done[item.id] = record
            progress(f"{arm} {n}/{len(todo)} {item.id} {record['seconds']} s")
    return done


def fit_scores(record: dict[str, Any], gate: Gate, floor: float = DEFAULT_FLOOR) -> list[float | None]:
    """The context-fit reward of every reply of a ``method`` record under ``gate``: replies the guards
    settled keep their reward, the others get ``fit * (floor + (1 - floor) * r)`` with
    ``fit = gate(pmi) * own_share``, as ``AdaptiveReward(context_fit=...)`` computes it."""
    out: list[float | None] = []
    for reward, evaluated, pmi, own in zip(
        record["scores"], record["evaluated"], record["pmi"], record["own_share"], strict=True
    ):
        if reward is None or not evaluated:
            out.append(reward)
        elif pmi is None:
            out.append(None)
        else:
            out.append(fitted_reward(reward, gate(pmi) * own, floor))
    return out


def merge_records(
    items: Sequence[ContrastItem], arms: dict[str, dict[str, dict[str, Any]]], gates: dict[str, Gate]
) -> list[dict[str, Any]]:
    """One record per context for :func:`~care_lab.bench.contrast.summarise`: every arm's scores, the
    ``fit_<name>`` (``fit * (0.5 + 0.5 * r)``) and ``fit0_<name>`` (``fit * r``) arms of ``gates`` read
    from ``method``, the baselines, the real reply's properties."""
    merged = []
    for item, replies in zip(items, contrast_replies(items), strict=True):
        record: dict[str, Any] = {
            "id": item.id,
            "group": item.group,
            "families": [r.family for r in replies],
            "scores": dict(baseline_scores(replies)),
            "criteria": {},
            "asks_question": asks_open_question(item.reply),
            "names_feeling": names_feeling(item.reply),
        }
        for arm, records in arms.items():
            row = records.get(item.id)
            if row is None:
                continue
            record["scores"][arm] = row["scores"]
            record["criteria"][arm] = row["criteria"]
            if "method_scores" in row:
                record["scores"]["method"] = row["method_scores"]
                record["criteria"]["method"] = row["criteria"]
            if arm == "method" and "pmi" in row:
                for name, gate in gates.items():
                    for fit, floor in FIT_FLOORS.items():
                        record["scores"][f"{fit}_{name}"] = fit_scores(row, gate, floor)
        reads = next((rows[item.id] for rows in arms.values() if "pmi" in rows.get(item.id, {})), None)
        for arm in PAIRWISE_ADAPTERS:
            pairwise = arms.get(arm, {}).get(item.id)
            if reads and pairwise and "train" in gates:
                # context fit as it ships (the train gate, the base model's PMI) times the arm's rubric reward
                row = {**reads, "scores": pairwise["scores"], "evaluated": pairwise["evaluated"]}
                for fit, floor in FIT_FLOORS.items():
                    record["scores"][f"{arm}_{fit}"] = fit_scores(row, gates["train"], floor)
        merged.append(record)
    return merged
