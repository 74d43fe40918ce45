"""SFT rubric targets of ``care train build-data``: a teacher writes them, judges filter them for quality.

For every selected supporter turn the **teacher** is asked for a good rubric for the next reply,
given the context, the reference reply, its strategies and their dimensions. **Target judges**
(any number; all must accept) check that the criteria are specific, checkable and consistent
with the reference reply, and that the weights are a sensible emphasis. Alignment with the
strategy counts (:func:`~care_lab.data.priorities.r_align`) is measured and reported for every
target (``r_align`` in the record, aligned/misaligned counts in the report), and enforced only
when the config asks for it (``on_misaligned: reject`` or ``repair``): preference GRPO's r_align
term is where the priority order is taught.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from care_lab.data import StrategyMap, SupportTurn
from care_lab.data.priorities import align_violations, r_align
from care_lab.training._calls import ask
from care_lab.training.config import BuildDataConfig
from care_lab.training.prompts import judge_messages, judge_schema, parse_verdict, teacher_messages
from care_sdk.backends import Backend, BackendPool
from care_sdk.errors import CareError, OutputError
from care_sdk.prompts import parse_rubric, rubric_reply_json, rubric_schema
from care_sdk.types import DIMENSIONS, Dimension, Message, Rubric, fixed_criteria

__all__ = ["BuildContext", "build_targets", "count_weights"]

V = TypeVar("V")


@dataclass
class BuildContext:
    """What every build-data step reads: the config, the strategy map, the backends, the report
    (its ``sft`` and ``pairs`` counters) and where progress lines go."""

    cfg: BuildDataConfig
    mapping: StrategyMap
    pool: BackendPool
    report: Any
    log: Callable[[str], None]

    def ask_judge(
        self,
        index: int,
        judge: Backend,
        prompts: Sequence[Sequence[Message]],
        parse: Callable[[str], V],
        *,
        what: str,
        schema: dict[str, Any],
    ) -> list[V | CareError]:
        """Ask judge number ``index`` (from 0) every prompt, with the judges' budget and its own seed."""
        return ask(
            judge,
            prompts,
            parse,
            what=what,
            schema=schema,
            max_tokens=self.cfg.judge_max_tokens,
            attempts=2,
            seed=self.cfg.seed + 101 * (index + 1),
        )


def count_weights(counts: Mapping[Dimension, int], smoothing: float = 0.5) -> dict[Dimension, float]:
    """Weights proportional to ``n_d + smoothing``: always satisfy the r_align constraints.

    Examples:
        >>> w = count_weights({Dimension.COGNITIVE: 2, Dimension.AFFECTIVE: 1, Dimension.PROACTIVE: 0})
        >>> [round(w[d], 3) for d in DIMENSIONS]
        [0.556, 0.333, 0.111]
    """
    raw = {d: counts.get(d, 0) + smoothing for d in DIMENSIONS}
    total = sum(raw.values())
    return {d: v / total for d, v in raw.items()}


def truncate(context: Sequence[Message], keep: int | None) -> list[Message]:
    """The last ``keep`` messages of a context (all when ``keep`` is ``None``)."""
    return list(context if keep is None else context[-keep:])


def counts_json(counts: Mapping[Dimension, int]) -> dict[str, int]:
    """Strategy counts as a JSON object over every dimension."""
    return {d.value: int(counts.get(d, 0)) for d in DIMENSIONS}


def _teacher_rubrics(candidates: list[tuple[SupportTurn, str]], ctx: BuildContext) -> list[tuple[Rubric, str] | None]:
    cfg, mapping, pool, report, log = ctx.cfg, ctx.mapping, ctx.pool, ctx.report, ctx.log
    assert cfg.teacher is not None
    teacher = pool.get(cfg.teacher)
    prompts = [
        teacher_messages(
            truncate(turn.context, cfg.max_context_messages),
            turn.reply,
            turn.strategies or (),
            {s: mapping.dimension(s) if mapping.knows(s) else None for s in turn.strategies or ()},
            turn.counts,
            criteria_per_dimension=cfg.criteria_per_dimension,
        )
        for turn, _ in candidates
    ]
    log(f"build-data: teacher {teacher.identity} writes {len(prompts)} target rubrics")

    def aligned(i: int, rubric: Rubric) -> str | None:
        violations = align_violations(rubric, candidates[i][0].counts)
        return "; ".join(violations) if violations else None

    enforce = cfg.on_misaligned != "keep"
    answers = ask(
        teacher,
        prompts,
        parse_rubric,
        what="teacher",
        schema=rubric_schema(cfg.criteria_per_dimension),
        max_tokens=cfg.teacher_max_tokens,
        attempts=cfg.teacher_attempts,
        seed=cfg.seed,
        accept=aligned if enforce else None,
    )
    out: list[tuple[Rubric, str] | None] = []
    for (turn, _), answer in zip(candidates, answers, strict=True):
        if not isinstance(answer, CareError):
            out.append((answer, "teacher"))
            continue
        misaligned = None  # a last reply that parses was refused for its weights
        if enforce and isinstance(answer, OutputError) and answer.raw:
            try:
                misaligned = parse_rubric(answer.raw)
            except ValueError:
                misaligned = None
        if misaligned is None:
            report.sft["rejected: teacher reply unusable"] += 1
            out.append(None)
        elif cfg.on_misaligned == "repair":
            report.sft["repaired: misaligned weights"] += 1
            repaired: dict[Dimension | str, float] = {d: w for d, w in count_weights(turn.counts).items()}
            out.append((misaligned.with_weights(repaired), "repaired"))
        else:
            report.sft["rejected: misaligned weights"] += 1
            out.append(None)
    return out


def _judge(
    keep: list[int],
    candidates: list[tuple[SupportTurn, str]],
    rubrics: list[tuple[Rubric, str] | None],
    ctx: BuildContext,
) -> list[int]:
    cfg, pool, report, log = ctx.cfg, ctx.pool, ctx.report, ctx.log
    assert cfg.target_judges is not None
    verdicts = []
    for j, spec in enumerate(cfg.target_judges):
        judge = pool.get(spec)
        log(f"build-data: target judge {j + 1} ({judge.identity}) rates {len(keep)} targets")
        prompts = []
        for i in keep:
            turn, target = candidates[i][0], rubrics[i]
            assert target is not None
            prompts.append(
                judge_messages(truncate(turn.context, cfg.max_context_messages), turn.reply, turn.counts, target[0])
            )
        verdicts.append(ctx.ask_judge(j, judge, prompts, parse_verdict, what="target judge", schema=judge_schema()))
    survivors = []
    for pos, i in enumerate(keep):
        accepted = True
        for j, per_judge in enumerate(verdicts):
            verdict = per_judge[pos]
            if isinstance(verdict, CareError):
                report.sft[f"judge {j + 1}: error"] += 1
                accepted = False
            elif not verdict[0]:
                report.sft[f"judge {j + 1}: rejected"] += 1
                if len(report.judge_reasons) < 200:
                    report.judge_reasons.append(f"judge {j + 1}: {verdict[1]}")
                accepted = False
        if accepted:
            survivors.append(i)
        else:
            report.sft["rejected: by the judges"] += 1
    return survivors


def build_targets(candidates: list[tuple[SupportTurn, str]], ctx: BuildContext) -> list[dict[str, Any]]:
    """The SFT target records of ``(turn, split)`` candidates (teacher, judges, alignment measured).

    With ``teacher: null`` no model is called: the target is the fixed six-criterion set with
    count-derived weights (:func:`count_weights`), the priority signal alone.
    """
    cfg, report = ctx.cfg, ctx.report
    rubrics: list[tuple[Rubric, str] | None]
    if cfg.teacher is None:
        criteria = fixed_criteria()
        rubrics = [(Rubric(weights=count_weights(turn.counts), criteria=criteria), "counts") for turn, _ in candidates]
    else:
        rubrics = _teacher_rubrics(candidates, ctx)
    keep = [i for i, r in enumerate(rubrics) if r is not None]
    if cfg.target_judges is not None and keep:
        keep = _judge(keep, candidates, rubrics, ctx)
    records = []
    for i in keep:
        turn, split = candidates[i]
        entry = rubrics[i]
        assert entry is not None
        rubric, origin = entry
        alignment = r_align(rubric, turn.counts)
        report.sft["aligned targets (r_align = 1)" if alignment == 1.0 else "misaligned targets (kept)"] += 1
        records.append(
            {
                "id": f"{turn.dialogue_id}#{turn.index}",
                "source": turn.source,
                "dialogue_id": turn.dialogue_id,
                "turn_index": turn.index,
                "split": split,
                "context": turn.context_messages(),
                "reference_reply": turn.reply,
                "strategies": list(turn.strategies or ()),
                "strategy_counts": counts_json(turn.counts),
                "target": rubric_reply_json(rubric),
                "weights": {d.value: round(rubric.weights[d], 4) for d in DIMENSIONS},
                "target_origin": origin,
                "r_align": alignment,
            }
        )
    return records
