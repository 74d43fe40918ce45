"""The SAGE rollout turns and their roles: the 400 already scored are ``selection``, the rest ``test``.

A turn is an assistant message of a rollout, after the first message, that the simulator gave an
emotion change (``index in rollout.deltas``): exactly the turns ``care bench quality --tasks
simulated`` lists, in the same order (the rollout files sorted by path, rollouts in file order,
messages in order). Its key is ``<model>:<profile id>:<message index>``.

The quality benchmark scored ``care bench quality --limit 400 --max-turns 1 --tasks simulated``
with seed 0 (``--max-turns`` does not apply to this task): the first 400 of a seeded shuffle of
the turn indices (``random.Random(0).shuffle``). Those 400 turns (and the earlier 100-turn runs,
a prefix of them) were read while choices were made: they are ``selection``. Every other turn is
``test``, read once per shipped artifact through the test-read ledger. The profiles stay eval-only.

Examples:
    >>> scored_positions(10, limit=3, seed=0)
    [7, 8, 1]
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from care_lab.data._issues import Loaded, LoadIssue
from care_lab.data.sage import SageRollout, load_sage_rollouts
from care_sdk.types import Message

__all__ = [
    "SCORED_LIMIT",
    "SCORED_SEED",
    "SageTurn",
    "load_sage_turns",
    "sage_rollout_files",
    "sage_scored_keys",
    "sage_test_turns",
    "sage_turn_roles",
    "sage_turns",
    "scored_positions",
]

SCORED_LIMIT = 400
"""How many SAGE turns the quality benchmark has scored (``--limit 400``)."""
SCORED_SEED = 0
"""The seed of that run (``--seed`` default)."""


@dataclass(frozen=True)
class SageTurn:
    """One supporter turn of a SAGE rollout, with the simulated user's emotion change after it.

    Examples:
        >>> SageTurn("gpt-4.1:p1:3", "gpt-4.1", "p1", 3, 2, (), "好的", 5).dialogue_id
        'gpt-4.1:p1'
    """

    key: str
    """``<model>:<profile id>:<message index>``: the quality benchmark's item key."""
    model: str
    """The supporter model."""
    profile: str
    """The profile id."""
    index: int
    """The message index of the reply."""
    turn_number: int
    """The supporter-turn number (1 = the first assistant message)."""
    context: tuple[Message, ...]
    """The messages before the reply."""
    reply: str
    """The supporter's reply."""
    delta: int
    """The simulator's emotion change right after the reply."""
    role: Literal["selection", "test"] = field(default="test")
    """``selection`` for the turns already scored, else ``test``."""

    @property
    def dialogue_id(self) -> str:
        """``<model>:<profile id>``."""
        return f"{self.model}:{self.profile}"


def sage_rollout_files(root: str | Path) -> tuple[Path, ...]:
    """The rollout files under a data directory (``sage_rlver/results_*/*_result.jsonl``), sorted.

    Examples:
        >>> sage_rollout_files("/nowhere")
        ()
    """
    return tuple(sorted((Path(root) / "sage_rlver").glob("results_*/*_result.jsonl")))


def scored_positions(count: int, *, limit: int = SCORED_LIMIT, seed: int = SCORED_SEED) -> list[int]:
    """Positions of the turns a quality run with ``--limit limit --seed seed`` scores, in its order.

    The same seeded shuffle as :func:`care_lab.bench._task_base.select`.

    Examples:
        >>> scored_positions(10, limit=5, seed=0)[:3] == scored_positions(10, limit=3, seed=0)
        True
    """
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return order[: max(0, limit)]


def _rollout_turns(rollout: SageRollout) -> list[SageTurn]:
    """The turns of one rollout: its assistant messages after the first message that have an emotion change."""
    turns: list[SageTurn] = []
    number = 0
    for index, message in enumerate(rollout.messages):
        if message.role != "assistant":
            continue
        number += 1
        if index == 0 or index not in rollout.deltas:
            continue
        turns.append(
            SageTurn(
                key=f"{rollout.model}:{rollout.id}:{index}",
                model=rollout.model,
                profile=rollout.id,
                index=index,
                turn_number=number,
                context=rollout.messages[:index],
                reply=message.content,
                delta=rollout.deltas[index],
            )
        )
    return turns


def load_sage_turns(files: Sequence[str | Path]) -> Loaded[SageTurn]:
    """Every SAGE turn of ``files``, each with its role, and the issues the rollout loader found.

    The turns come in the order of ``files`` as given (rollouts in file order, messages in order);
    the roles do not depend on it: they follow the positions in the sorted files' order, the
    quality benchmark's (:func:`sage_turns`).

    Examples:
        >>> import os
        >>> files = sage_rollout_files(os.environ.get("CARE_DATA_DIR", "/no-data"))
        >>> if files:
        ...     loaded = load_sage_turns(files[::-1])
        ...     assert sorted(t.key for t in loaded if t.role == "selection") == sorted(sage_scored_keys(files))
        >>> len(load_sage_turns([])), load_sage_turns([]).issues
        (0, [])
    """
    paths = [Path(f) for f in files]
    per_file: dict[Path, list[SageTurn]] = {}
    issues: list[LoadIssue] = []
    for path in paths:
        loaded = load_sage_rollouts(path)
        issues += loaded.issues
        per_file[path] = [t for rollout in loaded for t in _rollout_turns(rollout)]
    ordered = [t for path in sorted(paths) for t in per_file[path]]
    scored = set(scored_positions(len(ordered)))
    roles: dict[str, Literal["selection", "test"]] = {
        t.key: "selection" if i in scored else "test" for i, t in enumerate(ordered)
    }
    return Loaded([replace(t, role=roles[t.key]) for path in paths for t in per_file[path]], issues)


def sage_turns(files: Sequence[str | Path]) -> list[SageTurn]:
    """Every SAGE turn, in the quality benchmark's order, each with its role.

    Examples:
        >>> import os, pathlib
        >>> files = sage_rollout_files(os.environ.get("CARE_DATA_DIR", "/no-data"))
        >>> if files:
        ...     turns = sage_turns(files)
        ...     assert sum(t.role == "selection" for t in turns) == 400
    """
    return load_sage_turns(sorted(Path(f) for f in files)).records


def sage_scored_keys(files: Sequence[str | Path]) -> list[str]:
    """The keys of the 400 turns already scored, in the order the quality run scored them.

    Examples:
        >>> sage_scored_keys([])
        []
    """
    turns = sage_turns(files)
    return [turns[i].key for i in scored_positions(len(turns))]


def sage_test_turns(files: Sequence[str | Path]) -> list[SageTurn]:
    """The ``test`` turns: every SAGE turn outside the 400 already scored.

    Examples:
        >>> sage_test_turns([])
        []
    """
    return [t for t in sage_turns(files) if t.role == "test"]


def sage_turn_roles(files: Sequence[str | Path]) -> dict[str, Literal["selection", "test"]]:
    """Every turn's key and role.

    Examples:
        >>> sage_turn_roles([])
        {}
    """
    return {t.key: t.role for t in sage_turns(files)}
