"""The generator's held-out preference win rate: generators and ablations side by side, resumable.

For every held-out pair (context, chosen, rejected) and every row (a generator under a reward
variant), the generator writes one rubric for the context and the evaluator scores both replies
under it; the pair is a **win** when the chosen reply gets the higher reward, a tie counts one
half, and a pair where either reply could not be scored is **missing** (counted and reported,
never a loss). Win rates carry percentile bootstrap intervals that resample contexts (the pairs
of one context move together).

Rows: for each generator, ``care`` (its rubric as written), ``uniform_weights`` (its criteria,
weights 1/3 each) and ``fixed_criteria`` (its weights over the fixed six criteria); once,
``fixed_rubric`` (no generator). Variants of one generator share its rubric and every identical
evaluation request (:class:`~care_lab.bench.variants.VariantScorer`), so a pair costs one rubric
and four evaluations per generator.

An output directory holds:

- ``records.jsonl``: one record per (generator, variant, pair), appended as they finish, with
  both replies' rewards, rubrics and scores; a re-run reuses the finished ones;
- ``run.json``: the evaluator's and each generator's identity; another model under the same
  label is refused, a new label joins the run;
- ``winrate.json`` and ``winrate.md``: the table, model identities, data hashes and timings.

Examples:
    >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
    >>> def script(req):
    ...     if req.purpose == "evaluation":
    ...         good = "Oh no" in req.messages[-1].content
    ...         return evaluation_json([5] * 6 if good else [2] * 6)
    ...     return rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
    >>> backend = ScriptedBackend(script)
    >>> import tempfile
    >>> runner = WinRateRunner({"g": RubricGenerator(backend)}, RubricEvaluator(backend), out_dir=tempfile.mkdtemp())
    >>> [row.title for row in runner.rows]
    ['g', 'g + uniform weights', 'g + fixed criteria', 'fixed rubric']
    >>> from care_sdk.types import Message
    >>> context = (Message(role="user", content="I lost my job."),)
    >>> held = HeldOutPairs([EvalPair("p1", "c1", context, "Oh no, I'm sorry.", "Ok.")], [], "demo")
    >>> report = runner.run(held)
    >>> report.results[0].win_rate.value, report.scored
    (1.0, 1)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from care_lab._run_dir import RECORDS, check_identity, file_hashes, load_records, run_meta
from care_lab.bench.metrics import Estimate, PairOutcome, bootstrap, mean, pairwise_accuracy
from care_lab.bench.variants import Item, VariantScorer
from care_lab.evals.pairs import EvalPair, HeldOutPairs
from care_sdk.errors import ConfigError
from care_sdk.evaluator import RubricEvaluator
from care_sdk.generator import RubricGenerator
from care_sdk.jsonl import replace_jsonl
from care_sdk.variants import VARIANT_LABELS, VARIANTS, needs_generator

__all__ = ["WinRateReport", "WinRateResult", "WinRateRow", "WinRateRunner", "evaluator_identity", "pair_outcome"]


@dataclass(frozen=True)
class WinRateRow:
    """One row of the table: a generator (``None`` for ``fixed_rubric``) under a reward variant.

    Examples:
        >>> WinRateRow("sft", "uniform_weights").title, WinRateRow(None, "fixed_rubric").title
        ('sft + uniform weights', 'fixed rubric')
    """

    generator: str | None
    """The generator's label (``None``: the variant needs no generator)."""
    variant: str
    """The reward variant (:data:`care_sdk.variants.VARIANTS`)."""

    @property
    def title(self) -> str:
        """How the report names the row."""
        if self.generator is None:
            return VARIANT_LABELS[self.variant]
        return self.generator if self.variant == "care" else f"{self.generator} + {VARIANT_LABELS[self.variant]}"

    def key(self, pair: str) -> tuple[str, str, str]:
        """The record key of this row's result for a pair."""
        return (self.generator or "", self.variant, pair)


@dataclass
class WinRateResult:
    """A row's win rate, untied win rate and share of ties (with intervals), missing pairs, and the change vs row one.

    Examples:
        >>> r = WinRateResult(WinRateRow("g", "care"), Estimate(0.6, 0.5, 0.7, 40), Estimate(0.62), Estimate(0.05))
        >>> r.to_json()["win_rate"]["value"]
        0.6
    """

    row: WinRateRow
    """The generator and variant."""
    win_rate: Estimate
    """Share of pairs whose chosen reply scores higher, ties counting one half."""
    strict: Estimate
    """Win rate over the pairs the reward does not tie."""
    ties: Estimate
    """Share of tied pairs."""
    missing: int = 0
    """Pairs where a reply could not be scored (left out, never counted as losses)."""
    errors: list[str] = field(default_factory=list)
    """A few of the errors behind the missing pairs."""
    difference: Estimate | None = None
    """Win rate minus the first row's, over the pairs both scored (paired bootstrap over contexts)."""

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        return {
            "generator": self.row.generator,
            "variant": self.row.variant,
            "title": self.row.title,
            "win_rate": self.win_rate.to_json(),
            "untied_win_rate": self.strict.to_json(),
            "ties": self.ties.to_json(),
            "missing": self.missing,
            "errors": self.errors,
            "difference_to_first_row": self.difference.to_json() if self.difference else None,
        }


@dataclass
class WinRateReport:
    """The outcome of a win-rate run: one result per row, and the run's metadata.

    Examples:
        >>> WinRateReport(results=[], meta={"pairs": {"description": "none"}}).to_json()["rows"]
        []
    """

    results: list[WinRateResult]
    """One per row, in table order."""
    meta: dict[str, Any]
    """Models, data hashes, settings and timings."""
    scored: int = 0
    """Pairs scored in this run (for at least one row)."""
    reused: int = 0
    """Pairs every row of which came from an earlier run."""

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return {**self.meta, "pairs_scored": self.scored, "pairs_reused": self.reused,
                "rows": [r.to_json() for r in self.results]}  # fmt: skip

    def markdown(self) -> str:
        """The report as markdown: the table, then the pairs, the models and the data."""
        first = self.results[0].row.title if self.results else ""
        lines = [
            f"| row | pairs | win rate (ties = 1/2) | untied win rate | ties | vs {first} | missing |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.results:
            diff = "" if r.difference is None else r.difference.format()
            lines.append(
                f"| {r.row.title} | {r.win_rate.n} | {r.win_rate.format()} | {r.strict.format()} | "
                f"{r.ties.format()} | {diff} | {r.missing} |"
            )
        pairs = self.meta.get("pairs", {})
        lines += [
            "",
            f"**Pairs**: {pairs.get('description', '')}. {pairs.get('pairs', 0)} pairs over "
            f"{pairs.get('contexts', 0)} contexts (of {pairs.get('available', 0)} available). Intervals: "
            f"{int(100 * self.meta.get('level', 0.95))} % percentile bootstrap over contexts "
            f"({self.meta.get('resamples')} resamples, seed {self.meta.get('seed')}). Chance is 0.5.",
            "",
            f"**Evaluator**: `{self.meta.get('evaluator', '')}`",
        ]
        lines += [f"- generator `{label}`: `{ident}`" for label, ident in self.meta.get("generators", {}).items()]
        lines += ["", "**Data** (SHA-256):"]
        lines += [f"- `{path}`: `{digest}`" for path, digest in self.meta.get("data", {}).items()]
        timing, cpu = self.meta.get("seconds_per_pair"), self.meta.get("cpu_seconds_per_pair")
        if timing is not None:
            lines += [
                "",
                f"**Time**: {timing:.2f} s per pair (all rows; {cpu:.2f} s of processor time) in this run, "
                f"{self.meta.get('seconds')} s in all.",
            ]
        return "\n".join(lines)


def evaluator_identity(evaluator: RubricEvaluator) -> str:
    """Everything that shapes an evaluation: backend identity and settings.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> evaluator_identity(RubricEvaluator(ScriptedBackend([]))).split("|")[1]
        't=0.0'
    """
    return (
        f"{evaluator.backend.identity}|t={evaluator.temperature}|seed={evaluator.seed}"
        f"|max_tokens={evaluator.max_tokens}|logprobs={evaluator.use_logprobs}|prompt={evaluator.prompt_version}"
    )


def pair_outcome(chosen: float | None, rejected: float | None, *, tol: float = 1e-9) -> float | None:
    """1 when the chosen reply scores higher, 0 when lower, 0.5 for a tie, ``None`` when either is missing.

    Examples:
        >>> pair_outcome(0.8, 0.5), pair_outcome(0.5, 0.5), pair_outcome(0.2, 0.5), pair_outcome(None, 0.5)
        (1.0, 0.5, 0.0, None)
    """
    if chosen is None or rejected is None:
        return None
    return 0.5 if abs(chosen - rejected) <= tol else float(chosen > rejected)


def _reply_record(record: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("reward", "error", "rubric", "evaluation", "dimension_scores", "flags")
    return {k: record.get(k) for k in keep if k in record}


class WinRateRunner:
    """Runs the held-out win rate of several generators (and the ablations) under one evaluator.

    Args:
        generators: label -> generator, in table order (e.g. ``{"base": ..., "sft": ...}``).
        evaluator: the frozen evaluator that scores both replies.
        out_dir: where records and reports go; an existing run there is resumed.
        variants: which reward variants to run (default: all four).
        batch_size: pairs per backend batch (and per checkpoint).
        resamples: bootstrap resamples.
        seed: bootstrap seed.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> import tempfile
        >>> b = ScriptedBackend(lambda req: "{}")
        >>> runner = WinRateRunner({"a": RubricGenerator(b)}, RubricEvaluator(b), out_dir=tempfile.mkdtemp(),
        ...                        variants=["care", "fixed_rubric"])
        >>> [r.title for r in runner.rows]
        ['a', 'fixed rubric']
    """

    def __init__(
        self,
        generators: Mapping[str, RubricGenerator],
        evaluator: RubricEvaluator,
        *,
        out_dir: str | Path,
        variants: Sequence[str] = VARIANTS,
        batch_size: int = 4,
        resamples: int = 1000,
        seed: int = 0,
    ) -> None:
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            raise ConfigError(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
        generating = [v for v in VARIANTS if v in variants and needs_generator(v)]
        if generating and not generators:
            raise ConfigError(f"variant(s) {', '.join(generating)} need at least one generator")
        self.generators = dict(generators)
        self.evaluator = evaluator
        self.out_dir = Path(out_dir)
        self.batch_size = max(1, batch_size)
        self.resamples = resamples
        self.seed = seed
        self.rows = [WinRateRow(label, v) for label in self.generators for v in generating]
        if "fixed_rubric" in variants:
            self.rows.append(WinRateRow(None, "fixed_rubric"))
        # One scorer per generator; the generator-free row rides with the first (its evaluations
        # are the fixed-criteria ones, shared), or has a scorer of its own when no generator runs.
        self._scorers: list[tuple[VariantScorer, list[WinRateRow]]] = []
        for n, (label, generator) in enumerate(self.generators.items()):
            rows = [r for r in self.rows if r.generator == label or (n == 0 and r.generator is None)]
            if rows:
                self._scorers.append((VariantScorer(generator, evaluator, [r.variant for r in rows]), rows))
        if not self._scorers and self.rows:
            self._scorers.append((VariantScorer(None, evaluator, ["fixed_rubric"]), self.rows))

    def identity(self) -> dict[str, Any]:
        """What the records depend on: the evaluator's and each generator's identity."""
        return {
            "evaluator": evaluator_identity(self.evaluator),
            "generators": {label: g.identity for label, g in self.generators.items()},
        }

    def run(
        self,
        held: HeldOutPairs,
        *,
        on_start: Callable[[int], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> WinRateReport:
        """Score what is missing, compute the win rates and write ``winrate.json`` and ``winrate.md``.

        Args:
            held: the held-out pairs (:func:`~care_lab.evals.pairs.read_pairs_file`,
                :func:`~care_lab.evals.pairs.lend_an_ear_held_out_pairs`).
            on_start: called with the number of pairs left to score.
            progress: called with the number of pairs finished after each batch.
        """
        started = time.perf_counter()
        check_identity(self.out_dir, self.identity())
        path = self.out_dir / RECORDS
        store = load_records(path, lambda r: (r["generator"] or "", r["variant"], r["pair"]))

        def done(row: WinRateRow, pair: EvalPair) -> bool:
            record = store.get(row.key(pair.id))
            return record is not None and record.get("outcome") is not None

        todo = [p for p in held.pairs if not all(done(row, p) for row in self.rows)]
        if on_start:
            on_start(len(todo))
        scoring_started, cpu_started = time.perf_counter(), time.process_time()
        with path.open("a", encoding="utf-8") as handle:
            for start in range(0, len(todo), self.batch_size):
                chunk = todo[start : start + self.batch_size]
                for scorer, rows in self._scorers:
                    mine = [p for p in chunk if not all(done(row, p) for row in rows)]
                    items = [
                        Item(key=f"{p.id}:{side}", context=p.context, reply=text)
                        for p in mine
                        for side, text in (("chosen", p.chosen), ("rejected", p.rejected))
                    ]
                    scored = scorer.score(items)
                    for k, pair in enumerate(mine):
                        for row in rows:
                            record = self._record(row, pair, scored[2 * k][row.variant], scored[2 * k + 1][row.variant])
                            store[row.key(pair.id)] = record
                            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                handle.flush()
                if progress:
                    progress(len(chunk))
        scoring_seconds = time.perf_counter() - scoring_started
        cpu_seconds = time.process_time() - cpu_started
        order = [row.key(p.id) for p in held.pairs for row in self.rows]
        current = set(order)
        replace_jsonl(path, [store[k] for k in order if k in store] + [v for k, v in store.items() if k not in current])
        results = self._results(held, store)
        meta = {
            **run_meta("care-eval-generator", time.perf_counter() - started),
            **self.identity(),
            "rows": [{"generator": r.generator, "variant": r.variant, "title": r.title} for r in self.rows],
            "pairs": {
                "description": held.description,
                "pairs": len(held.pairs),
                "contexts": held.contexts,
                "available": held.available,
                "roles": held.roles,
            },
            "data": file_hashes(held.sources),
            "resamples": self.resamples,
            "seed": self.seed,
            "level": 0.95,
            "seconds_scoring": round(scoring_seconds, 1),
            "seconds_per_pair": scoring_seconds / len(todo) if todo else None,
            "cpu_seconds_per_pair": cpu_seconds / len(todo) if todo else None,
            "requests": {
                "sent": sum(s.requests_sent for s, _ in self._scorers),
                "shared": sum(s.requests_shared for s, _ in self._scorers),
            },
        }
        report = WinRateReport(results, meta, scored=len(todo), reused=len(held.pairs) - len(todo))
        (self.out_dir / "winrate.json").write_text(
            json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        (self.out_dir / "winrate.md").write_text(report.markdown() + "\n", encoding="utf-8")
        return report

    @staticmethod
    def _record(
        row: WinRateRow, pair: EvalPair, chosen: Mapping[str, Any], rejected: Mapping[str, Any]
    ) -> dict[str, Any]:
        outcome = pair_outcome(chosen.get("reward"), rejected.get("reward"))
        errors = [f"{side}: {r['error']}" for side, r in (("chosen", chosen), ("rejected", rejected)) if r.get("error")]
        return {
            "generator": row.generator,
            "variant": row.variant,
            "pair": pair.id,
            "group": pair.group,
            **pair.fields,
            "outcome": outcome,
            "error": "; ".join(errors) or (None if outcome is not None else "no reward"),
            "chosen_reward": chosen.get("reward"),
            "rejected_reward": rejected.get("reward"),
            "chosen": _reply_record(chosen),
            "rejected": _reply_record(rejected),
        }

    def _results(self, held: HeldOutPairs, store: Mapping[Hashable, dict[str, Any]]) -> list[WinRateResult]:
        results: list[WinRateResult] = []
        reference: dict[str, float] | None = None
        for row in self.rows:
            outcomes: dict[str, float] = {}
            missing: list[str] = []
            for pair in held.pairs:
                record = store.get(row.key(pair.id))
                if record is None or record.get("outcome") is None:
                    missing.append(str(record.get("error")) if record else "not scored")
                else:
                    outcomes[pair.id] = float(record["outcome"])
            groups = {p.id: p.group for p in held.pairs}
            metrics = pairwise_accuracy(
                [PairOutcome(groups[pid], value) for pid, value in outcomes.items()],
                resamples=self.resamples,
                seed=self.seed,
            )
            result = WinRateResult(
                row, metrics["accuracy"], metrics["strict"], metrics["ties"], len(missing), missing[:5]
            )
            if reference is None:
                reference = outcomes
            else:
                result.difference = _paired_difference(outcomes, reference, groups, self.resamples, self.seed)
            results.append(result)
        return results


def _paired_difference(
    mine: Mapping[str, float], theirs: Mapping[str, float], groups: Mapping[str, str], resamples: int, seed: int
) -> Estimate:
    """Mean of (mine - theirs) over the pairs both scored, bootstrapped over contexts."""
    clusters: dict[str, list[float]] = {}
    for pid, value in mine.items():
        if pid in theirs:
            clusters.setdefault(groups[pid], []).append(value - theirs[pid])
    units = list(clusters.values())

    def statistic(sample: Sequence[list[float]]) -> float | None:
        return mean(d for cluster in sample for d in cluster)

    est = bootstrap(units, statistic, resamples=resamples, seed=seed)
    return Estimate(est.value, est.low, est.high, sum(len(c) for c in units), est.level)
