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

A run can be split over processes (:class:`Shard`, ``care bench quality --shard K/N``): shard K
scores every N-th item into ``records.shard-K-of-N.jsonl`` and writes no report; a run without a
shard then merges those files into ``records.jsonl``, scores whatever is still missing and writes
the reports. A shard also reuses the records of shards that hold some of its items when split
another way, so a slow shard can be stopped and its items split finer (1/2 into 1/4 and 3/4).

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
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import IO, Any

from care_sdk._run_dir import file_hashes, run_meta
from care_sdk.bench.tasks import TASKS, DataPaths, Settings, TaskData, TaskResult
from care_sdk.bench.variants import VARIANT_LABELS, VARIANTS, Item, VariantScorer, record_done
from care_sdk.context_fit import ContextFit
from care_sdk.data import LoadIssue
from care_sdk.errors import ConfigError
from care_sdk.evaluator import RubricEvaluator
from care_sdk.generator import RubricGenerator
from care_sdk.jsonl import BadLine, append_jsonl, iter_jsonl, replace_jsonl
from care_sdk.prompts import PROMPT_VERSION

__all__ = ["QualityReport", "QualityRunner", "Shard", "markdown_report"]

logger = logging.getLogger("care_sdk")

RECORDS = "records.jsonl"
RUN = "run.json"
SHARD_RECORDS = "records.shard-*-of-*.jsonl"
_SHARD_FORM = "expected K/N with 1 <= K <= N, e.g. 1/2"


@dataclass(frozen=True)
class Shard:
    """One of ``count`` parts of a quality run, for scoring on several processes at once.

    Shard ``index`` (1-based) holds the items whose position in their task's seeded order is
    ``index - 1`` modulo ``count``, so the shards of one run split every task evenly and a shard
    stopped part-way leaves a near-prefix of its items done. It appends its records to
    :attr:`records_name` in the run's directory; the same run without a shard merges them.

    Examples:
        >>> shard = Shard.parse("2/3")
        >>> shard, shard.records_name
        (Shard(index=2, count=3), 'records.shard-2-of-3.jsonl')
        >>> [p for p in range(7) if shard.holds(p)]
        [1, 4]
        >>> Shard.parse("4/3")
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: --shard '4/3': expected K/N with 1 <= K <= N, e.g. 1/2
    """

    index: int
    """Which part, from 1."""
    count: int
    """How many parts the run is split into."""

    def __post_init__(self) -> None:
        if not 1 <= self.index <= self.count:
            raise ConfigError(f"--shard '{self.index}/{self.count}': {_SHARD_FORM}")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """A shard from ``K/N`` text (the ``--shard`` option)."""
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if match is None:
            raise ConfigError(f"--shard '{text}': {_SHARD_FORM}")
        return cls(int(match[1]), int(match[2]))

    @classmethod
    def of_records(cls, name: str) -> Shard | None:
        """The shard whose records file is called ``name``, or ``None`` for another file.

        Examples:
            >>> Shard.of_records("records.shard-3-of-4.jsonl"), Shard.of_records("records.jsonl")
            (Shard(index=3, count=4), None)
        """
        match = re.fullmatch(r"records\.shard-(\d+)-of-(\d+)\.jsonl", name)
        if match is None or not 1 <= int(match[1]) <= int(match[2]):
            return None
        return cls(int(match[1]), int(match[2]))

    def holds(self, position: int) -> bool:
        """Whether the item at ``position`` of its task's seeded order belongs to this shard."""
        return position % self.count == self.index - 1

    def overlaps(self, other: Shard) -> bool:
        """Whether some item belongs to both shards, as with a shard split finer (1/2 holds 1/4 and 3/4).

        Examples:
            >>> half = Shard.parse("1/2")
            >>> [half.overlaps(Shard.parse(other)) for other in ("3/4", "2/4", "2/3")]
            [True, False, True]
        """
        return (self.index - other.index) % math.gcd(self.count, other.count) == 0

    @property
    def records_name(self) -> str:
        """The file, in the run's directory, this shard appends its records to."""
        return f"records.shard-{self.index}-of-{self.count}.jsonl"

    def cores(self, usable: Sequence[int]) -> list[int]:
        """This shard's share of the ``usable`` cores: every ``count``-th from the ``index``-th, or
        where there are fewer cores than shards, one core, the shards taking the cores in equal runs
        (of four shards on two cores, 1/4 and 2/4 take the first, 3/4 and 4/4 the second), so on
        two cores or more the two halves of a shard split finer (K/N as K/2N and (K+N)/2N) never
        share one.

        Examples:
            >>> Shard.parse("2/2").cores([0, 1, 2, 3])
            [1, 3]
            >>> [Shard.parse(f"{k}/4").cores([0, 1]) for k in (1, 2, 3, 4)]
            [[0], [0], [1], [1]]
        """
        ordered = sorted(usable)
        if self.count <= len(ordered):
            return ordered[self.index - 1 :: self.count]
        return [ordered[(self.index - 1) * len(ordered) // self.count]]

    def pin(self) -> list[int] | None:
        """Keep this process to its share of the cores it may run on (:meth:`cores`), so that the
        ``count`` shards of a run started at once do not compete for the same cores; a llama.cpp
        backend built afterwards sizes its threads to that share (one core: one thread, for
        decoding and prompts alike). A process already pinned to fewer cores (``taskset``) keeps
        its share of those.

        Returns:
            The cores this process now runs on, or ``None`` where the platform cannot pin processes.

        Examples:
            >>> Shard.parse("1/2").pin()  # doctest: +SKIP
            [0]
        """
        if not hasattr(os, "sched_setaffinity"):
            return None
        usable = sorted(os.sched_getaffinity(0))
        share = self.cores(usable)
        if share != usable:
            os.sched_setaffinity(0, share)
        return share


@contextmanager
def _claimed(path: Path) -> Iterator[IO[str]]:
    """``path`` opened for appending, locked against a second writer for as long as it is open.

    Where the platform has no ``fcntl`` (Windows) the file is opened without a lock.
    """
    with path.open("a", encoding="utf-8") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield handle
            return
        _lock(handle, path, fcntl.LOCK_EX)
        yield handle


def _check_idle(path: Path) -> None:
    """Raise :class:`ConfigError` while another process writes ``path`` (:func:`_claimed`). The
    lock taken for the check is shared, so two processes checking the same file at once do not
    stop each other."""
    with path.open("r", encoding="utf-8") as handle:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return
        _lock(handle, path, fcntl.LOCK_SH)


def _lock(handle: IO[str], path: Path, kind: int) -> None:
    import fcntl

    try:
        fcntl.flock(handle.fileno(), kind | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ConfigError(
            f"{path} is being written by another run (a shard or a run into the same --out) that is "
            "still going; wait for it to finish"
        ) from None


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
        >>> from care_sdk.bench.tasks import MetricRow
        >>> from care_sdk.bench.metrics import Estimate
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
            (:mod:`care_sdk.context_fit`); ``care bench quality`` turns it on for the bundled
            ``default`` evaluator, as the reward factories do.
        shard: score only this part of the items, into the shard's own records file, and write no
            report (see :class:`Shard`); ``None`` (the default) scores everything that is missing,
            after merging the records of finished shards, and writes the reports.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> import tempfile
        >>> backend = ScriptedBackend(lambda req: "{}")
        >>> runner = QualityRunner(RubricGenerator(backend), RubricEvaluator(backend), out_dir=tempfile.mkdtemp())
        >>> runner.identity()["prompt_version"] == PROMPT_VERSION
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
        context_fit: ContextFit | None = None,
        shard: Shard | None = None,
    ) -> None:
        self.shard = shard
        self.scorer = VariantScorer(generator, evaluator, variants, context_fit)
        self.context_fit = context_fit
        self.variants = self.scorer.variants
        self.generator = generator
        self.evaluator = evaluator
        self.out_dir = Path(out_dir)
        self.batch_size = max(1, batch_size)
        self.model = model

    def identity(self) -> dict[str, str]:
        """What the records depend on: generator and evaluator identities, the prompt version and the context fit."""
        return {
            "generator": self.generator.identity,
            "evaluator": (
                f"{self.evaluator.backend.identity}|t={self.evaluator.temperature}|seed={self.evaluator.seed}"
                f"|max_tokens={self.evaluator.max_tokens}|logprobs={self.evaluator.use_logprobs}"
                f"|prompt={self.evaluator.prompt_version}"
            ),
            "prompt_version": PROMPT_VERSION,
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
        else:  # written whole at once: shards starting together read it complete or not at all
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
            tasks: task names (see :data:`~care_sdk.bench.tasks.TASKS`).
            paths: where the data lies.
            settings: limit, margin, seed, ...
            on_load: called with each task's name and data once loaded (e.g. to report issues).
            on_start: called with the number of items left to score.
            progress: called with the number of items finished each time records are kept.

        Returns:
            The report; a shard's run (``shard=``) has no task results and writes no report files.

        Raises:
            ConfigError: another run is writing the same records file (a shard still going, when
                this run is the one that merges), or the directory holds another model's records.
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
        target = records_path if self.shard is None else self.out_dir / self.shard.records_name
        with _claimed(target) as handle:
            if self.shard is None:
                shard_files = sorted(self.out_dir.glob(SHARD_RECORDS))
                for path in shard_files:
                    _check_idle(path)  # refuses while that shard is still running
                store = _load_records(records_path, *shard_files)
            else:  # and the files of shards that hold some of this one's items, split another way
                shard_files = []
                others = [p for p in self._overlapping(self.shard) if p != target]
                for path in others:
                    _check_idle(path)  # refuses while that shard is still scoring some of these items
                store = _load_records(records_path, *others, target)
            todo, reused = self._todo(loaded, store)
            if on_start:
                on_start(len(todo))
            for start in range(0, len(todo), self.batch_size):
                chunk = todo[start : start + self.batch_size]
                for batch in self.scorer.score_batches([i for _, i in chunk]):  # kept as each is scored
                    for index, by_variant in batch:
                        name, item = chunk[index]
                        for variant, record in by_variant.items():
                            full = {"task": name, "variant": variant, "key": item.key, **record}
                            store[(name, item.key, variant)] = full
                            append_jsonl(handle, full)
                    handle.flush()
                    if progress:
                        progress(len(batch))
            if self.shard is not None:  # the run without a shard merges and reports
                meta = self._meta(loaded, settings, time.perf_counter() - started)
                return QualityReport([], meta, [], scored=len(todo), reused=reused)
            self._compact(records_path, loaded, store)
            for path in shard_files:  # their records are in records.jsonl now
                path.unlink()

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

    def _overlapping(self, shard: Shard) -> list[Path]:
        """The records files, in the run's directory, of shards holding some of ``shard``'s items."""
        found = [(path, Shard.of_records(path.name)) for path in sorted(self.out_dir.glob(SHARD_RECORDS))]
        return [path for path, other in found if other is not None and other.overlaps(shard)]

    def _todo(
        self, loaded: dict[str, TaskData], store: dict[tuple[str, str, str], dict[str, Any]]
    ) -> tuple[list[tuple[str, Item]], int]:
        """This run's items (its shard's, if any) that lack a finished record, and how many do not."""
        per_task: list[list[tuple[str, Item]]] = []
        reused = 0
        for name, data in loaded.items():
            per_task.append([])
            for position, item in enumerate(data.items):
                if self.shard is not None and not self.shard.holds(position):
                    continue
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
