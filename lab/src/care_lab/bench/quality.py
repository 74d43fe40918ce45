"""The quality benchmark runner: every task, every variant side by side, resumable.

A run writes into one output directory:

- ``records.jsonl``: one record per (task, item, variant), in ``care score`` format plus
  ``task``, ``variant``, ``key`` and item fields (``turn_number``, ``emotion``, ...), so
  ``care plot`` reads it directly. Records are appended as they finish; a re-run reuses every
  finished record and scores only what is missing or failed.
- ``run.json``: the generator and evaluator identities the records were made with; a re-run with
  other models into the same directory is refused instead of mixing results.
- ``quality.json`` and ``quality.md``: the metrics with bootstrap intervals, the backend and
  model, data file hashes and versions.

A run can score its items on a Ray cluster (``care bench quality --ray auto``, see
:func:`care_lab.bench.ray_items.ray_item_batches`): actors score the items, the driver keeps the records.

Examples:
    >>> from care_sdk import RubricEvaluator, RubricGenerator
    >>> from care_sdk.testing import ScriptedBackend
    >>> import tempfile
    >>> backend = ScriptedBackend(lambda req: "{}")
    >>> runner = QualityRunner(RubricGenerator(backend), RubricEvaluator(backend), out_dir=tempfile.mkdtemp())
    >>> runner.variants
    ('care', 'uniform_weights', 'fixed_criteria', 'fixed_rubric', 'length')
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any

from care_lab._run_dir import file_hashes, run_meta
from care_lab.bench.tasks import TASKS, DataPaths, Settings, TaskData, TaskResult
from care_lab.bench.variants import VARIANT_LABELS, VARIANTS, Item, VariantScorer, record_done
from care_lab.data import LoadIssue
from care_sdk.addons import ContextFitReader
from care_sdk.errors import ConfigError
from care_sdk.evaluator import RubricEvaluator
from care_sdk.generator import RubricGenerator
from care_sdk.jsonl import BadLine, append_jsonl, iter_jsonl, replace_jsonl
from care_sdk.prompts import FIXED_CRITERIA_VERSION

__all__ = ["BatchScorer", "QualityReport", "QualityRunner", "markdown_report"]

logger = logging.getLogger("care_sdk")

RECORDS = "records.jsonl"

BatchScorer = Callable[[Sequence[Item]], Iterator[list[tuple[int, dict[str, dict[str, Any]]]]]]
"""Scores items, handing over each batch's ``(index in items, {variant: record})`` as it is scored."""
RUN = "run.json"


@dataclass
class QualityReport:
    """The outcome of a quality run.

    Examples:
        >>> QualityReport(results=[], meta={"variants": ["care"]}).to_json()["tasks"]
        []
    """

    results: list[TaskResult]
    """One result per task, in order."""
    meta: dict[str, Any]
    """Backend, model, versions, data hashes, settings."""
    issues: list[LoadIssue] = field(default_factory=list)
    """What the loaders found wrong in the data."""
    scored: int = 0
    """Items scored in this run."""
    reused: int = 0
    """Items reused from an earlier run."""

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return {
            **self.meta,
            "items_scored": self.scored,
            "items_reused": self.reused,
            "data_issues": [str(i) for i in self.issues],
            "tasks": [r.to_json() for r in self.results],
        }

    def markdown(self) -> str:
        """The report as markdown (the table ``care bench quality`` prints)."""
        return markdown_report(self.results, self.meta)


def markdown_report(results: Sequence[TaskResult], meta: dict[str, Any]) -> str:
    """Render task results as one side-by-side table, then each task's notes and extra tables.

    Examples:
        >>> from care_lab.bench.tasks import MetricRow
        >>> from care_lab.bench.metrics import Estimate
        >>> r = TaskResult("t", "A task", "turns", 3, 10, [MetricRow("acc", {"care": Estimate(0.5, 0.2, 0.8, 3)})])
        >>> print(markdown_report([r], {"variants": ["care", "length"]}).splitlines()[2])
        | A task | acc | 3 | 0.500 [0.200, 0.800] | n/a |
    """
    variants = list(meta.get("variants", VARIANTS))
    header = ["task", "metric", "n", *(VARIANT_LABELS[v] for v in variants)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for result in results:
        for row in result.rows:
            first = next(iter(row.values.values()), None)
            n = first.n if first is not None else 0
            cells = []
            for v in variants:
                est = row.values.get(v)
                cell = "n/a" if est is None else est.format()
                if est is not None and est.n != n:
                    cell += f" (n={est.n})"  # some items of this variant have no result
                cells.append(cell)
            lines.append("| " + " | ".join([result.title, row.name, str(n), *cells]) + " |")
    for result in results:
        lines += ["", f"**{result.title}**: {result.units} of {result.available} {result.unit}."]
        failed = {v: n for v, n in result.failed.items() if n}
        if failed:
            lines.append(
                "Items without a result: " + ", ".join(f"{VARIANT_LABELS[v]} {n}" for v, n in failed.items()) + "."
            )
        lines += [f"- {note}" for note in result.notes]
        for detail in result.details:
            lines += ["", detail]
    return "\n".join(lines)


def _load_records(*paths: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The records of ``paths`` by (task, key, variant).

    A later record of a key replaces an earlier one, unless the earlier one finished and the later failed.
    """
    records: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in paths:
        if not path.exists():
            continue
        for _, record in iter_jsonl(path, on_bad=_rescore, check=_record_key):
            key = (str(record["task"]), str(record["key"]), str(record["variant"]))
            if record.get("error") is None or records.get(key, record).get("error") is not None:
                records[key] = record  # a finished record is never replaced by a failed one
    return records


def _record_key(record: dict[str, Any]) -> tuple[str | None, str] | None:
    missing = [k for k in ("task", "key", "variant") if k not in record]
    return (missing[0], "missing") if missing else None


def _rescore(bad: BadLine) -> None:
    logger.warning("%s; that item is scored again", bad)  # e.g. a line cut off by an interrupt


class QualityRunner:
    """Runs the quality tasks for one generator/evaluator pair into an output directory.

    Args:
        generator: the rubric generator under test.
        evaluator: the evaluator.
        out_dir: where records and reports go; an existing run there is resumed.
        variants: which of the variants to compare (default: all five).
        batch_size: items per backend batch. Their records are kept after each batch, or after each
            context where every model answers one request at a time (llama.cpp), so a stopped run
            loses at most that.
        model: a model name for the report (default: the backends' identities).
        context_fit: scale every model variant's reward by the reply's fit to its context
            (:mod:`care_sdk.bundled.context_fit`); ``care bench quality --add-on context-fit`` asks for it.
        score_batches: scores the items instead of this process's own scorer, e.g. on a Ray
            cluster (:func:`care_lab.bench.ray_items.ray_item_batches`); the records are kept here.
        serial: whether one context's requests go together (``None``: where every model is
            llama.cpp; see :class:`~care_lab.bench.variants.VariantScorer`).

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> import tempfile
        >>> backend = ScriptedBackend(lambda req: "{}")
        >>> runner = QualityRunner(RubricGenerator(backend), RubricEvaluator(backend), out_dir=tempfile.mkdtemp())
        >>> runner.identity()["fixed_criteria_version"] == FIXED_CRITERIA_VERSION
        True
    """

    def __init__(
        self,
        generator: RubricGenerator,
        evaluator: RubricEvaluator,
        *,
        out_dir: str | Path,
        variants: Sequence[str] = VARIANTS,
        batch_size: int = 8,
        model: str | None = None,
        context_fit: ContextFitReader | None = None,
        score_batches: BatchScorer | None = None,
        serial: bool | None = None,
    ) -> None:
        self.scorer = VariantScorer(generator, evaluator, variants, context_fit, serial=serial)
        self.score_batches = score_batches or self.scorer.score_batches
        self.context_fit = context_fit
        self.variants = self.scorer.variants
        self.generator = generator
        self.evaluator = evaluator
        self.out_dir = Path(out_dir)
        self.batch_size = max(1, batch_size)
        self._step = self.batch_size if score_batches is None else 0  # elsewhere: every item at once
        self.model = model

    def identity(self) -> dict[str, str]:
        """What the records depend on: the generator's and evaluator's identities, the fixed criteria's version and
        the context fit."""
        return {
            "generator": self.generator.identity,
            "evaluator": (
                f"{self.evaluator.backend.identity}|t={self.evaluator.temperature}|seed={self.evaluator.seed}"
                f"|max_tokens={self.evaluator.max_tokens}|logprobs={self.evaluator.use_logprobs}"
                f"|prompt={self.evaluator.prompt_version}"
            ),
            "fixed_criteria_version": FIXED_CRITERIA_VERSION,
            "context_fit": self.context_fit.identity if self.context_fit is not None else "off",
        }

    def _check_out_dir(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        run_file = self.out_dir / RUN
        mine = self.identity()
        if run_file.exists():
            try:
                theirs = json.loads(run_file.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{run_file} is not valid JSON ({exc}); remove it or choose another --out") from exc
            if theirs != mine:
                changed = ", ".join(k for k in mine if theirs.get(k) != mine[k])
                raise ConfigError(
                    f"{self.out_dir} holds records made with another {changed}; choose another output "
                    "directory (or delete it) instead of mixing results"
                )
        else:  # written whole at once
            tmp = run_file.with_name(f"{RUN}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(mine, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, run_file)

    def run(
        self,
        tasks: Sequence[str],
        paths: DataPaths,
        settings: Settings | None = None,
        *,
        on_load: Callable[[str, TaskData], None] | None = None,
        on_start: Callable[[int], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> QualityReport:
        """Load, score what is missing, compute the metrics and write the reports.

        Args:
            tasks: task names (see :data:`~care_lab.bench.tasks.TASKS`).
            paths: where the data lies.
            settings: limit, margin, seed, ...
            on_load: called with each task's name and data once loaded (e.g. to report issues).
            on_start: called with the number of items left to score.
            progress: called with the number of items finished each time records are kept.

        Returns:
            The report.

        Raises:
            ConfigError: the directory holds another model's records.
        """
        settings = settings or Settings()
        unknown = [t for t in tasks if t not in TASKS]
        if unknown:
            raise ConfigError(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
        started = time.perf_counter()
        loaded: dict[str, TaskData] = {}
        for name in tasks:
            loaded[name] = TASKS[name].load(paths, settings)
            if on_load:
                on_load(name, loaded[name])
        self._check_out_dir()
        records_path = self.out_dir / RECORDS
        store = _load_records(records_path)
        todo, reused = self._todo(loaded, store)
        if on_start:
            on_start(len(todo))
        with records_path.open("a", encoding="utf-8") as handle:
            step = self._step or max(1, len(todo))
            for start in range(0, len(todo), step):
                chunk = todo[start : start + step]
                for batch in self.score_batches([i for _, i in chunk]):  # kept as each is scored
                    for index, by_variant in batch:
                        name, item = chunk[index]
                        for variant, record in by_variant.items():
                            full = {"task": name, "variant": variant, "key": item.key, **record}
                            store[(name, item.key, variant)] = full
                            append_jsonl(handle, full)
                    handle.flush()
                    if progress:
                        progress(len(batch))
        self._compact(records_path, loaded, store)

        results = []
        issues: list[LoadIssue] = []
        for name, data in loaded.items():
            by_key: dict[str, dict[str, dict[str, Any]]] = {}
            for item in data.items:
                by_key[item.key] = {
                    v: store[(name, item.key, v)] for v in self.variants if (name, item.key, v) in store
                }
            results.append(TASKS[name].evaluate(data, by_key, settings))
            issues += data.issues
        meta = self._meta(loaded, settings, time.perf_counter() - started)
        report = QualityReport(results, meta, issues, scored=len(todo), reused=reused)
        (self.out_dir / "quality.json").write_text(
            json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        (self.out_dir / "quality.md").write_text(report.markdown() + "\n", encoding="utf-8")
        return report

    def _todo(
        self, loaded: dict[str, TaskData], store: dict[tuple[str, str, str], dict[str, Any]]
    ) -> tuple[list[tuple[str, Item]], int]:
        """This run's items that lack a finished record, and how many do not."""
        per_task: list[list[tuple[str, Item]]] = []
        reused = 0
        for name, data in loaded.items():
            per_task.append([])
            for item in data.items:
                needed = [v for v in self.variants if item.needs_evaluation or v != "length"]
                if all(record_done(store.get((name, item.key, v)), item.needs_evaluation) for v in needed):
                    reused += 1
                else:
                    per_task[-1].append((name, item))
        # Take the tasks in turn, so that a run stopped part-way has made progress on every task.
        return [pair for row in zip_longest(*per_task) for pair in row if pair is not None], reused

    def _compact(
        self, path: Path, loaded: dict[str, TaskData], store: dict[tuple[str, str, str], dict[str, Any]]
    ) -> None:
        """Rewrite the records file: current items in task order first, then anything else kept from before."""
        ordered: list[tuple[str, str, str]] = []
        for name, data in loaded.items():
            ordered += [(name, i.key, v) for i in data.items for v in self.variants if (name, i.key, v) in store]
        seen = set(ordered)
        ordered += [k for k in store if k not in seen]
        replace_jsonl(path, (store[key] for key in ordered))

    def _meta(self, loaded: dict[str, TaskData], settings: Settings, seconds: float) -> dict[str, Any]:
        identity = self.identity()
        return {
            **run_meta("care-quality", seconds),
            "backend": {"generator": identity["generator"], "evaluator": identity["evaluator"]},
            "model": self.model or self.generator.backend.identity,
            "variants": list(self.variants),
            "tasks_run": list(loaded),
            "settings": {
                "limit": settings.limit,
                "max_turns": settings.max_turns,
                "margin": settings.margin,
                "systems": list(settings.systems),
                "seed": settings.seed,
                "resamples": settings.resamples,
            },
            "data": file_hashes(p for data in loaded.values() for p in data.sources),
            "requests": {"sent": self.scorer.requests_sent, "shared": self.scorer.requests_shared},
        }
