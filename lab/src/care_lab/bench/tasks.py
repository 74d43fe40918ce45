"""The five quality tasks: what each reads, what it scores, and the metric it reports.

Every task turns public data into :class:`~care_lab.bench.variants.Item` objects (``load``) and
turns the scored records back into metrics with bootstrap intervals (``evaluate``). Selection
under ``limit`` is a seeded shuffle of the task's units, so a larger limit keeps every unit of a
smaller one (and a re-run reuses them).
"""

from __future__ import annotations

from care_lab.bench._task_base import (
    DataPaths,
    MetricRow,
    Settings,
    Task,
    TaskData,
    TaskResult,
    select,
    spread,
    top_match,
)
from care_lab.bench.dialogue_tasks import ExpertTask, SimulatedTask, SuccessTask, expert_aggregate
from care_lab.bench.turn_tasks import AlignmentTask, PairwiseTask

__all__ = [
    "TASKS",
    "AlignmentTask",
    "DataPaths",
    "ExpertTask",
    "MetricRow",
    "PairwiseTask",
    "Settings",
    "SimulatedTask",
    "SuccessTask",
    "Task",
    "TaskData",
    "TaskResult",
    "expert_aggregate",
    "select",
    "spread",
    "top_match",
]

TASKS: dict[str, Task] = {
    task.name: task for task in (AlignmentTask(), PairwiseTask(), ExpertTask(), SuccessTask(), SimulatedTask())
}
"""The tasks by name, in report order."""
