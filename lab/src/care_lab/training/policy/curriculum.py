"""Competence-boundary sampling for ``care train policy-grpo``: scenarios near the policy's boundary more often.

GRPO learns nothing from a group whose replies all pass or all fail (every advantage is 0). The
dual-loop curriculum samples scenarios whose pass rate lies near the policy's competence boundary
more often, and rehearses every scenario so none is dropped. Here:

- **Pass rates come from the groups already rolled out**: every time the reward scores a group,
  :meth:`BoundaryCurriculum.observe` records, per scenario (a row's ``profile_id`` in multi-turn
  mode, its ``id`` in single-turn mode), the share of the group's rewards at or above
  ``pass_threshold``. No extra rollouts; a reward of ``None`` is left out. With several processes
  each process's rewards are gathered first, so every process holds the same pass rates.
- **Weights**: a scenario's boundary score is ``(1 - |p - target| / max(target, 1 - target)) **
  sharpness``: 1 at the target pass rate, 0 at the far end; a scenario not yet rolled out scores 1
  (it is explored first). The sampling probability mixes the normalised boundary scores with a
  uniform share: ``(1 - rehearsal) * b_i / sum(b) + rehearsal / N``, so every scenario keeps at
  least ``rehearsal / N`` (the rehearsal floor).
- **Sampler**: :class:`BoundarySampler` replaces TRL's ``RepeatSampler`` (through
  ``GRPOTrainer._get_train_sampler``, see :func:`care_lab.training._common.with_train_sampler`) and
  keeps its layout: each generation batch draws ``batch_size`` distinct scenarios with the current probabilities (a
  seeded generator, so every process draws the same), repeats each ``num_generations`` times and
  the batch ``num_iterations * steps_per_generation`` times, and has the same length per epoch.
  Draws happen as the dataloader asks for a batch, so a weight update reaches the batch after
  the next one at the latest (the dataloader looks one batch ahead).
- **Logged per step**: ``curriculum.jsonl`` in the run's output directory gets one ``observe``
  line per scored batch (the step, the pass rates observed) and one ``draw`` line per generation
  batch (the step, every scenario's probability and pass rate, the scenarios drawn); the reward
  logs ``care/curriculum/mean_pass_rate``, ``care/curriculum/near_boundary`` (share of the scenarios
  rolled out whose pass rate lies within 0.25 of the target), ``care/curriculum/seen``,
  ``care/curriculum/min_weight`` and ``care/curriculum/max_weight`` through TRL (so they are in the
  run's ``rewards.jsonl``); at the end the run writes ``curriculum.json`` (:meth:`BoundaryCurriculum.summary`).

Examples:
    >>> c = BoundaryCurriculum(["a", "b", "c", "d"], CurriculumSettings(rehearsal=0.2))
    >>> c.observe(["a", "a", "b", "b", "c", "c"], [1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    >>> c.pass_rates
    {'a': 1.0, 'b': 0.5, 'c': 0.0}
    >>> [round(w, 3) for w in c.probabilities()]  # b at the target and d unseen: 0.8/2 + 0.05 each
    [0.05, 0.45, 0.05, 0.45]
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from care_lab.training.policy.config import CurriculumSettings

__all__ = ["BoundaryCurriculum", "BoundarySampler", "CurriculumSettings"]


class BoundaryCurriculum:
    """Per-scenario pass rates from the rolled-out groups, and the sampling probabilities they give.

    Args:
        keys: one scenario key per dataset row, in row order (unique).
        settings: target, pass threshold, rehearsal share and sharpness.
        log_path: where to append the ``observe`` and ``draw`` lines (``None``: nowhere).
    """

    def __init__(self, keys: Sequence[str], settings: CurriculumSettings, log_path: str | Path | None = None) -> None:
        if not keys:
            raise ValueError("a curriculum needs at least one scenario")
        if len(set(keys)) != len(keys):
            raise ValueError("curriculum scenario keys must be unique (one per dataset row)")
        self.keys = list(keys)
        self.settings = settings
        self.pass_rates: dict[str, float] = {}
        self.log_path = Path(log_path) if log_path is not None else None
        self.draws = 0
        self.history: list[dict[str, Any]] = []

    def boundary(self, pass_rate: float | None) -> float:
        """A scenario's boundary score: 1 at the target pass rate (or unseen), falling to 0 at the far end.

        Examples:
            >>> c = BoundaryCurriculum(["a"], CurriculumSettings(target=0.5))
            >>> c.boundary(0.5), c.boundary(0.25), c.boundary(1.0), c.boundary(None)
            (1.0, 0.5, 0.0, 1.0)
        """
        if pass_rate is None:
            return 1.0
        target = self.settings.target
        span = max(target, 1 - target)
        return float(max(0.0, 1 - abs(pass_rate - target) / span) ** self.settings.sharpness)

    def probabilities(self) -> list[float]:
        """The sampling probability of every row: boundary-weighted, mixed with the uniform rehearsal share."""
        scores = [self.boundary(self.pass_rates.get(k)) for k in self.keys]
        n, total, rehearsal = len(self.keys), sum(scores), self.settings.rehearsal
        if total <= 0:
            return [1 / n] * n
        return [(1 - rehearsal) * s / total + rehearsal / n for s in scores]

    def observe(self, keys: Sequence[Any], rewards: Sequence[float | None], *, step: int | None = None) -> None:
        """Record the pass rate of each scenario scored in this batch (its newest group replaces the old).

        With ``torch.distributed`` initialised, every process's keys and rewards are gathered first.
        """
        if len(keys) != len(rewards):
            raise ValueError(f"{len(keys)} keys for {len(rewards)} rewards")
        pairs = _gathered(list(zip((str(k) for k in keys), rewards, strict=True)))
        passed: dict[str, list[float]] = {}
        for key, reward in pairs:
            if reward is not None:
                passed.setdefault(key, []).append(float(reward >= self.settings.pass_threshold))
        observed = {k: sum(v) / len(v) for k, v in passed.items()}
        self.pass_rates.update(observed)
        self._log({"event": "observe", "step": step, "pass_rates": observed})

    def metrics(self) -> dict[str, float]:
        """The numbers the reward logs each step (see the module docstring).

        Examples:
            >>> c = BoundaryCurriculum(["a", "b"], CurriculumSettings())
            >>> c.observe(["a", "a"], [1.0, 0.0])
            >>> c.metrics()["care/curriculum/near_boundary"], c.metrics()["care/curriculum/seen"]
            (1.0, 0.5)
        """
        probabilities = self.probabilities()
        rates = list(self.pass_rates.values())
        near = [abs(p - self.settings.target) <= 0.25 for p in rates]
        out = {
            "care/curriculum/seen": len(rates) / len(self.keys),
            "care/curriculum/min_weight": min(probabilities),
            "care/curriculum/max_weight": max(probabilities),
        }
        if rates:
            out["care/curriculum/mean_pass_rate"] = sum(rates) / len(rates)
            out["care/curriculum/near_boundary"] = sum(near) / len(near)
        return out

    def record_draw(self, chosen: Sequence[int], probabilities: Sequence[float], step: int | None) -> None:
        """Log one generation batch's draw: every scenario's probability and pass rate, and the rows drawn."""
        self.draws += 1
        self._log(
            {
                "event": "draw",
                "draw": self.draws,
                "step": step,
                "chosen": [self.keys[i] for i in chosen],
                "probabilities": {k: round(p, 6) for k, p in zip(self.keys, probabilities, strict=True)},
                "pass_rates": {k: self.pass_rates.get(k) for k in self.keys},
            }
        )

    def sampler(self, trainer: Any, dataset: Any) -> BoundarySampler:
        """The sampler for a TRL ``GRPOTrainer`` (the ``RepeatSampler`` layout of its settings)."""
        args = trainer.args
        if len(dataset) != len(self.keys):
            raise ValueError(f"the curriculum has {len(self.keys)} scenarios but the dataset {len(dataset)} rows")
        return BoundarySampler(
            self,
            mini_repeat_count=int(trainer.num_generations),
            batch_size=int(args.generation_batch_size) // int(trainer.num_generations),
            repeat_count=int(trainer.num_iterations) * int(args.steps_per_generation),
            seed=int(args.seed),
            step=lambda: int(trainer.state.global_step),
        )

    def summary(self) -> dict[str, Any]:
        """Settings, scenarios, every ``observe`` and ``draw`` line so far, and the final pass rates and probabilities.

        Examples:
            >>> c = BoundaryCurriculum(["a", "b"], CurriculumSettings())
            >>> c.observe(["a", "a"], [0.9, None])
            >>> s = c.summary()
            >>> s["final"]["pass_rates"], [e["event"] for e in s["events"]]
            ({'a': 1.0, 'b': None}, ['observe'])
        """
        return {
            "settings": self.settings.model_dump(),
            "scenarios": list(self.keys),
            "events": list(self.history),
            "final": {
                "pass_rates": {k: self.pass_rates.get(k) for k in self.keys},
                "probabilities": dict(zip(self.keys, (round(p, 6) for p in self.probabilities()), strict=True)),
            },
        }

    def _log(self, line: dict[str, Any]) -> None:
        self.history.append(line)
        if self.log_path is None or not _is_main_process():
            return
        with self.log_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")


class BoundarySampler:
    """TRL's ``RepeatSampler`` layout with each generation batch drawn from the curriculum's probabilities.

    Examples:
        >>> c = BoundaryCurriculum(["a", "b", "c"], CurriculumSettings())
        >>> s = BoundarySampler(c, mini_repeat_count=2, batch_size=1, repeat_count=2, seed=0)
        >>> out = list(s)
        >>> len(out) == len(s) == 12, out[:4] == [out[0]] * 4
        (True, True)
    """

    def __init__(
        self,
        curriculum: BoundaryCurriculum,
        *,
        mini_repeat_count: int,
        batch_size: int,
        repeat_count: int,
        seed: int = 0,
        step: Callable[[], int] | None = None,
    ) -> None:
        import torch

        if batch_size > len(curriculum.keys):
            raise ValueError(f"a generation batch of {batch_size} scenarios, but only {len(curriculum.keys)} exist")
        self.curriculum = curriculum
        self.mini_repeat_count, self.batch_size, self.repeat_count = mini_repeat_count, batch_size, repeat_count
        self.num_samples = len(curriculum.keys)
        self.generator = torch.Generator()
        self.generator.manual_seed(seed)
        self.step = step

    def __iter__(self) -> Iterator[int]:
        import torch

        for _ in range(self.num_samples // self.batch_size):
            probabilities = self.curriculum.probabilities()
            weights = torch.tensor(probabilities, dtype=torch.float64)
            chosen = torch.multinomial(weights, self.batch_size, replacement=False, generator=self.generator).tolist()
            self.curriculum.record_draw(chosen, probabilities, self.step() if self.step else None)
            for _ in range(self.repeat_count):
                for index in chosen:
                    for _ in range(self.mini_repeat_count):
                        yield index

    def __len__(self) -> int:
        return (self.num_samples // self.batch_size) * self.batch_size * self.mini_repeat_count * self.repeat_count


def _is_main_process() -> bool:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is part of the train extra
        return True
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def _gathered(pairs: list[tuple[str, float | None]]) -> list[tuple[str, float | None]]:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return pairs
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return pairs
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, pairs)
    return [pair for part in everyone for pair in part]
