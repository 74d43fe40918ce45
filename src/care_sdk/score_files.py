"""Scoring logged dialogue files: one output record per assistant turn, resumable.

Output records are JSON lines ``{"id", "turn", "reward", "error", "rubric", "evaluation",
"dimension_scores", "scored_by", "flags", "raw_reward", "note", "context_fit", "parts", "provenance"}``
in input order (``flags``: what the guards found in the reply; a reply they settled without a model call
has no rubric; ``context_fit``: the reply's fit to its context, when the opt-in add-on reads it;
``parts``: what produced the reward, ``["care"]`` for the method's; ``provenance``: the rubric's
content hash and source, the generator's and evaluator's identity and prompt version, and what the
reward cost, see :mod:`care_sdk.provenance`). Records are appended as they finish, so an interrupted
run loses nothing; re-running with the same output file keeps every scored record, recomputes only
missing or failed ones, and rewrites the file in input order, identical to an uninterrupted run except
for each record's ``provenance``, which describes the run that scored it (its seconds, and whether its
rubric was written or read from the cache). Files written before records carried ``provenance`` are
read and resumed as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from care_sdk.dialogues import read_dialogues
from care_sdk.errors import InputError
from care_sdk.jsonl import BadLine, append_jsonl, iter_jsonl, replace_jsonl
from care_sdk.provenance import Cost, record_provenance
from care_sdk.reward import AdaptiveReward
from care_sdk.types import DIMENSIONS, Dialogue, Provenance, RewardResult, Turn

logger = logging.getLogger("care_sdk")

__all__ = [
    "RecordSink",
    "ScoreSummary",
    "finish_scoring",
    "load_records",
    "plan_scoring",
    "score_file",
    "scored_by",
    "turn_record",
]

Key = tuple[str, int]


@dataclass
class ScoreSummary:
    """Counts and means of one :func:`score_file` run.

    Examples:
        >>> ScoreSummary().ok
        True
    """

    dialogues: int = 0
    turns: int = 0
    scored: int = 0
    reused: int = 0
    failed: int = 0
    input_errors: list[InputError] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    weights: dict[str, list[float]] = field(default_factory=lambda: {d.value: [] for d in DIMENSIONS})
    cost: Cost | None = None
    """What the records' rewards cost together (their :attr:`~care_sdk.types.Provenance.cost` summed),
    over the records that carry a provenance; ``None`` when none does."""
    rubric_sources: dict[str, int] = field(default_factory=dict)
    """How many records had their rubric ``generated``, ``cached`` or ``fixed``."""

    def add_provenance(self, made: Provenance) -> None:
        """Count one record's provenance into :attr:`cost` and :attr:`rubric_sources`.

        Examples:
            >>> summary = ScoreSummary()
            >>> summary.add_provenance(Provenance(evaluator="e", evaluator_prompt="v2", rubric_source="cached",
            ...                                   evaluation_cost=Cost(calls=1, seconds=0.5)))
            >>> summary.cost.calls, summary.rubric_sources
            (1.0, {'cached': 1})
        """
        self.cost = made.cost if self.cost is None else self.cost + made.cost
        if made.rubric_source is not None:
            self.rubric_sources[made.rubric_source] = self.rubric_sources.get(made.rubric_source, 0) + 1

    @property
    def ok(self) -> bool:
        """Whether every line was readable and every turn got a reward."""
        return not self.failed and not self.input_errors

    @property
    def mean_reward(self) -> float | None:
        """Mean reward over scored turns."""
        return sum(self.rewards) / len(self.rewards) if self.rewards else None

    def table(self) -> str:
        """A plain-text summary table."""
        rows: list[tuple[str, str]] = [
            ("dialogues", str(self.dialogues)),
            ("assistant turns", str(self.turns)),
            ("scored (reused from output)", f"{self.scored} ({self.reused})"),
            ("failed", str(self.failed)),
            ("malformed lines", str(len(self.input_errors))),
            ("mean reward", "-" if self.mean_reward is None else f"{self.mean_reward:.3f}"),
        ]
        for dim, values in self.weights.items():
            rows.append((f"mean weight {dim}", f"{sum(values) / len(values):.3f}" if values else "-"))
        if self.cost is not None:
            rows.append(("backend calls", f"{self.cost.calls:.0f}"))
            if self.cost.prompt_tokens is not None or self.cost.completion_tokens is not None:
                tokens = f"{self.cost.prompt_tokens or 0:.0f} + {self.cost.completion_tokens or 0:.0f}"
                rows.append(("tokens (prompt + completion)", tokens))
            rows.append(("backend seconds", f"{self.cost.seconds:.1f}"))
            sources = ", ".join(f"{n} {source}" for source, n in sorted(self.rubric_sources.items()))
            rows.append(("rubrics", sources or "-"))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def turn_record(dialogue_id: str, turn: int, result: RewardResult) -> dict[str, Any]:
    """The output record of one scored turn.

    Examples:
        >>> turn_record("d1", 3, RewardResult.failed("boom"))["error"]
        'boom'
    """
    return {"id": dialogue_id, "turn": turn, **result.model_dump(mode="json")}


def scored_by(reward: AdaptiveReward) -> dict[str, str | None]:
    """What produced a record: backend identities and settings, criteria version, package version, ablations.

    ``generator`` is the generator's identity (its backend, prompt version and sampling settings), or
    ``None`` when every turn is judged against one fixed rubric; ``evaluator`` is the evaluator's
    backend identity and settings (its prompt version included); ``fixed_criteria_version`` is the
    fixed criteria's version, :data:`care_sdk.FIXED_CRITERIA_VERSION`; ``guards`` is the reward's guards
    settings (``"off"`` without); ``context_fit`` is the context fit's model, window and gate (``"off"`` without).

    Examples:
        >>> from care_sdk import RubricEvaluator, Rubric
        >>> from care_sdk.testing import ScriptedBackend
        >>> evaluator = RubricEvaluator(ScriptedBackend([]))
        >>> by = scored_by(AdaptiveReward(evaluator=evaluator, rubric=Rubric.uniform_fixed()))
        >>> by["generator"], by["evaluator"].split("|")[0], by["criteria"]
        (None, 'scripted:scripted', 'fixed rubric')
    """
    from care_sdk import __version__
    from care_sdk.prompts import FIXED_CRITERIA_VERSION

    return {
        "generator": reward.generator.identity if reward.generator and reward.rubric is None else None,
        "evaluator": reward.evaluator.identity,
        "fixed_criteria_version": FIXED_CRITERIA_VERSION,
        "guards": repr(reward.guards) if reward.guards is not None else "off",
        "context_fit": reward.context_fit.identity if reward.context_fit is not None else "off",
        "care_sdk": __version__,
        "weights": "fixed rubric" if reward.rubric is not None else reward.weights,
        "criteria": "fixed rubric" if reward.rubric is not None else reward.criteria,
    }


def load_records(path: Path) -> dict[Key, dict[str, Any]]:
    """Read an output file to resume from; a bad line (e.g. one cut off by an interrupt) is logged and
    its turn scored again.

    Examples:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "scores.jsonl"
        >>> _ = path.write_text('{"id": "d1", "turn": 1, "reward": 0.5}\\n{"id": "d1", "tu\\n')
        >>> load_records(path)
        {('d1', 1): {'id': 'd1', 'turn': 1, 'reward': 0.5}}
    """
    records: dict[Key, dict[str, Any]] = {}
    if not path.exists():
        return records
    for _, record in iter_jsonl(path, on_bad=_rescore, check=_turn_key):
        records[(str(record["id"]), int(record["turn"]))] = record
    return records


def _turn_key(record: dict[str, Any]) -> tuple[str | None, str] | None:
    if "id" not in record:
        return "id", "missing"
    if isinstance(record.get("turn"), bool) or not isinstance(record.get("turn"), int):
        return "turn", "expected an integer"
    return None


def _rescore(bad: BadLine) -> None:
    logger.warning("%s; that turn is scored again", bad)


def _chunks(items: list[tuple[Dialogue, Turn]], size: int) -> Iterator[list[tuple[Dialogue, Turn]]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def plan_scoring(
    input_path: str | Path,
    out: str | Path | None,
    on_input_error: Callable[[InputError], None] | None = None,
) -> tuple[ScoreSummary, list[tuple[Dialogue, Turn]], dict[Key, dict[str, Any]], list[tuple[Dialogue, Turn]]]:
    """Read a dialogue file and an output file to resume from: the summary so far, every turn in
    input order, the records reused by ``(id, turn)`` and the turns still to score.

    Examples:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "d.jsonl")
        >>> _ = open(p, "w").write('{"id": "a", "messages": [{"role": "user", "content": "hi"},'
        ...                        ' {"role": "assistant", "content": "hello"}]}\\n')
        >>> summary, turns, done, todo = plan_scoring(p, None)
        >>> summary.turns, len(done), [(d.id, t.index) for d, t in todo]
        (1, 0, [('a', 1)])
    """
    summary = ScoreSummary()
    turns: list[tuple[Dialogue, Turn]] = []
    for line in read_dialogues(input_path):
        if line.error is not None:
            summary.input_errors.append(line.error)
            if on_input_error:
                on_input_error(line.error)
            continue
        assert line.dialogue is not None
        summary.dialogues += 1
        turns.extend((line.dialogue, t) for t in line.dialogue.turns())
    summary.turns = len(turns)

    previous = load_records(Path(out)) if out is not None else {}
    done: dict[Key, dict[str, Any]] = {}
    for dialogue, turn in turns:
        key = (str(dialogue.id), turn.index)
        record = previous.get(key)
        if record is not None and record.get("reward") is not None:
            done[key] = record
    summary.reused = len(done)
    todo = [(d, t) for d, t in turns if (str(d.id), t.index) not in done]

    return summary, turns, done, todo


class RecordSink:
    """Where newly scored records go, a batch at a time: into ``done`` by ``(id, turn)``, appended
    to the output file (flushed after each batch, so an interrupted run keeps them), to
    ``on_record``; ``progress`` hears of the reused records on entry and of each batch.

    Examples:
        >>> done = {}
        >>> with RecordSink(done, None) as sink:
        ...     sink.add_batch([{"id": "a", "turn": 1, "reward": 0.5}])
        >>> done
        {('a', 1): {'id': 'a', 'turn': 1, 'reward': 0.5}}
    """

    def __init__(
        self,
        done: dict[Key, dict[str, Any]],
        out_path: Path | None,
        *,
        on_record: Callable[[dict[str, Any]], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.done = done
        self.out_path = out_path
        self.on_record = on_record
        self.progress = progress
        self._handle: TextIO | None = None

    def __enter__(self) -> RecordSink:
        if self.progress and self.done:
            self.progress(len(self.done))
        self._handle = self.out_path.open("a", encoding="utf-8") if self.out_path else None
        return self

    def add_batch(self, records: Iterable[dict[str, Any]]) -> None:
        """Keep, write and report one batch of records (each with its ``id`` and ``turn``)."""
        count = 0
        for record in records:
            self.done[(str(record["id"]), int(record["turn"]))] = record
            if self._handle:
                append_jsonl(self._handle, record)
            if self.on_record:
                self.on_record(record)
            count += 1
        if self._handle:
            self._handle.flush()
        if self.progress:
            self.progress(count)

    def __exit__(self, *exc: object) -> None:
        if self._handle:
            self._handle.close()
            self._handle = None


def finish_scoring(
    summary: ScoreSummary,
    turns: list[tuple[Dialogue, Turn]],
    done: dict[Key, dict[str, Any]],
    out_path: Path | None,
) -> ScoreSummary:
    """Count the records of every turn into ``summary`` and rewrite ``out_path`` in input order.

    Examples:
        >>> finish_scoring(ScoreSummary(), [], {}, None).ok
        True
    """
    ordered = [done[(str(d.id), t.index)] for d, t in turns]
    for record in ordered:
        made = record_provenance(record)
        if made is not None:
            summary.add_provenance(made)
        if record["reward"] is None:
            summary.failed += 1
            continue
        summary.scored += 1
        summary.rewards.append(record["reward"])
        for dim, weight in (record.get("rubric") or {}).get("weights", {}).items():
            summary.weights[dim].append(weight)
    if out_path:
        replace_jsonl(out_path, ordered)
    return summary


def score_file(
    input_path: str | Path,
    reward: AdaptiveReward,
    *,
    out: str | Path | None = None,
    batch_size: int = 8,
    on_input_error: Callable[[InputError], None] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> ScoreSummary:
    """Score every assistant turn of a JSONL dialogue file.

    Args:
        input_path: dialogues, one ``{"id": ..., "messages": [...]}`` per line, each with an optional
            ``"profile"`` (the user's: free text or ``{"text", "traits", "history"}``, see
            :mod:`care_sdk.profiles`) that every turn of the dialogue is judged with.
        reward: the reward to apply.
        out: output JSONL; when it exists, its scored records are reused (resume).
        batch_size: turns scored per backend batch.
        on_input_error: called for each malformed line.
        on_record: called with each newly scored record.
        progress: called with the number of turns finished after each batch.

    Examples:
        >>> from care_sdk import RubricEvaluator, Rubric
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "d.jsonl")
        >>> _ = open(p, "w").write('{"id": "a", "messages": [{"role": "user", "content": "hi"},'
        ...                        ' {"role": "assistant", "content": "hello"}]}\\n')
        >>> reward = AdaptiveReward(evaluator=RubricEvaluator(ScriptedBackend(lambda r: evaluation_json([3] * 6))),
        ...                         rubric=Rubric.uniform_fixed())
        >>> score_file(p, reward).mean_reward
        0.5
    """
    summary, turns, done, todo = plan_scoring(input_path, out, on_input_error)
    out_path = Path(out) if out is not None else None

    producer = scored_by(reward)
    with RecordSink(done, out_path, on_record=on_record, progress=progress) as sink:
        for chunk in _chunks(todo, max(1, batch_size)):
            results = reward.score_batch([(list(t.context), t.reply) for _, t in chunk], [d.profile for d, _ in chunk])
            sink.add_batch(
                {**turn_record(str(dialogue.id), turn.index, result), "scored_by": producer}
                for (dialogue, turn), result in zip(chunk, results, strict=True)
            )

    return finish_scoring(summary, turns, done, out_path)
