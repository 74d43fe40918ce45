"""How much a recipe will train: optimiser steps, samples per step and epochs, worked out before training.

``care train sft | pref-grpo | policy-grpo`` prints the plan and refuses a run that plans fewer
than ``--min-steps`` optimiser steps (20 by default; ``--min-steps 0`` runs anything, e.g. the
smoke configs). The arithmetic follows the trainers':

- SFT (``transformers.Trainer``): ``samples per step = batch × grad_acc × processes``; steps per
  epoch ``= ceil(ceil(rows / (batch × processes)) / grad_acc)``.
- GRPO (TRL's ``RepeatSampler``): every prompt is sampled ``num_generations`` times; a generation
  batch holds ``P = batch × processes × steps_per_generation / num_generations`` distinct prompts,
  and an epoch uses ``floor(rows / P)`` generation batches (the remainder is unused), each for
  ``steps_per_generation × num_iterations / grad_acc`` optimiser steps.

``max_steps > 0`` overrides the epochs, as in the trainers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["DEFAULT_MIN_STEPS", "TrainingPlan", "check_plan", "plan_from_args", "plan_training"]

DEFAULT_MIN_STEPS = 20
"""The fewest optimiser steps ``care train`` runs without ``--min-steps``."""


@dataclass(frozen=True)
class TrainingPlan:
    """The planned size of a training run.

    Examples:
        >>> plan_training("sft", 1000, batch=4, grad_acc=4, processes=2, epochs=2).steps  # 2 x ceil(125 / 4)
        64
    """

    kind: Literal["sft", "grpo"]
    """The trainer."""
    rows: int
    """Training rows (records, pairs, profiles or prompts)."""
    processes: int
    """Data-parallel processes."""
    samples_per_step: int
    """Samples per optimiser step: examples (SFT) or completions (GRPO)."""
    prompts_per_step: float
    """Distinct rows per optimiser step (GRPO: samples / num_generations)."""
    steps_per_epoch: int
    """Optimiser steps in one pass over the rows."""
    steps: int
    """Planned optimiser steps."""
    epochs: float
    """Planned passes over the rows."""
    unused_rows: int = 0
    """Rows an epoch leaves out (GRPO: the remainder of a partial generation batch)."""

    def describe(self) -> str:
        """One line for the log.

        Examples:
            >>> plan = plan_training("grpo", 85, batch=8, grad_acc=4, processes=7, num_generations=8)
            >>> print(plan.describe())  # doctest: +NORMALIZE_WHITESPACE
            grpo plan: 85 rows, 7 processes: 224 samples per optimiser step (28 rows x 8 generations),
            3 steps per epoch, 1 epoch -> 3 optimiser steps (1 row unused per epoch)
        """
        per = (
            f" ({self.prompts_per_step:g} rows x {self.samples_per_step / self.prompts_per_step:g} generations)"
            if self.kind == "grpo"
            else ""
        )
        unused = (
            f" ({self.unused_rows} row{'s' * (self.unused_rows != 1)} unused per epoch)" if self.unused_rows else ""
        )
        return (
            f"{self.kind} plan: {self.rows} rows, {self.processes} process{'es' * (self.processes != 1)}: "
            f"{self.samples_per_step} samples per optimiser step{per}, {self.steps_per_epoch} steps per epoch, "
            f"{self.epochs:g} epoch{'s' * (self.epochs != 1)} -> {self.steps} optimiser steps{unused}"
        )


def plan_training(
    kind: Literal["sft", "grpo"],
    rows: int,
    *,
    batch: int,
    grad_acc: int = 1,
    processes: int = 1,
    epochs: float = 1.0,
    max_steps: int = -1,
    num_generations: int = 1,
    steps_per_generation: int | None = None,
    num_iterations: int = 1,
) -> TrainingPlan:
    """The plan of a run from its numbers (``batch`` is the per-device batch size).

    Examples:
        >>> p = plan_training("grpo", 10_000, batch=8, grad_acc=4, processes=7, epochs=1, num_generations=8)
        >>> p.steps, p.prompts_per_step
        (357, 28.0)
    """
    samples = batch * grad_acc * processes
    if kind == "sft":
        batches = math.ceil(rows / (batch * processes))
        per_epoch = max(math.ceil(batches / grad_acc), 1)
        prompts: float = float(samples)
        unused = 0
    else:
        spg = steps_per_generation or grad_acc
        distinct = batch * processes * spg // num_generations
        generation_batches = rows // distinct if distinct else 0
        per_epoch = max(math.ceil(generation_batches * spg * num_iterations / grad_acc), 1 if generation_batches else 0)
        prompts = samples / num_generations
        unused = rows - generation_batches * distinct
    steps = max_steps if max_steps > 0 else math.ceil(epochs * per_epoch)
    planned_epochs = steps / per_epoch if max_steps > 0 and per_epoch else epochs
    return TrainingPlan(kind, rows, processes, samples, prompts, per_epoch, steps, round(planned_epochs, 3), unused)


def plan_from_args(kind: Literal["sft", "grpo"], rows: int, args: Any) -> TrainingPlan:
    """The plan of a run from its TRL config (``SFTConfig`` / ``GRPOConfig``, with its world size)."""
    return plan_training(
        kind,
        rows,
        batch=int(args.per_device_train_batch_size),
        grad_acc=int(args.gradient_accumulation_steps),
        processes=int(args.world_size),
        epochs=float(args.num_train_epochs),
        max_steps=int(args.max_steps),
        num_generations=int(getattr(args, "num_generations", 1) or 1),
        steps_per_generation=getattr(args, "steps_per_generation", None),
        num_iterations=int(getattr(args, "num_iterations", 1) or 1),
    )


def check_plan(plan: TrainingPlan, min_steps: int, source: str) -> None:
    """Refuse a plan with fewer than ``min_steps`` optimiser steps (``0``: accept anything).

    Raises:
        ConfigError: naming the source, the plan and the option that overrides the check.

    Examples:
        >>> check_plan(plan_training("sft", 8, batch=2, max_steps=4), 20, "sft.yaml")
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: sft.yaml: the run plans 4 optimiser steps, fewer than the minimum of 20 ...
    """
    from care_sdk.errors import ConfigError

    if plan.steps < min_steps:
        raise ConfigError(
            f"{source}: the run plans {plan.steps} optimiser steps, fewer than the minimum of {min_steps} "
            f"({plan.describe()}); add data, epochs or max_steps, or pass --min-steps 0 to run it anyway"
        )
