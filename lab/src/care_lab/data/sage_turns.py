"""The SAGE rollout turns and their roles: the 400 already scored are ``selection``, the rest ``test``.

A turn is an assistant message of a rollout, after the first message, that the simulator gave an
emotion change (``index in rollout.deltas``): exactly the turns ``care bench quality --tasks
simulated`` lists, in the same order (the rollout files sorted by path, rollouts in file order,
messages in order). Its key is ``<model>:<profile id>:<message index>``.

The quality benchmark scored ``care bench quality --limit 400 --max-turns 1 --tasks simulated``
with seed 0 (``--max-turns`` does not apply to this task): the first 400 of a seeded shuffle of
the turn indices (``random.Random(0).shuffle``). Those 400 turns (and the earlier 100-turn runs,
a prefix of them) were read while choices were made: they are ``selection``. Every other turn is
``test``, read once per shipped artifact through the test-read ledger: the loaders here hand out a
test turn (its reply and its emotion change, the label) only with that ledger entry
(``test_read=``, :func:`care_lab.data.results.record_test_read`); without it they give the
selection turns alone. The profiles stay eval-only.

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
from care_lab.data.results import check_test_read
from care_lab.data.sage import SageRollout, read_sage_rollouts
from care_sdk.types import Message

__all__ = [
    "LEDGER_NAME",
    "SCORED_LIMIT",
    "SCORED_SEED",
    "SageTurn",
    "load_sage_turns",
    "rollout_test_turns",
    "sage_rollout_files",
    "sage_scored_keys",
    "sage_test_turns",
    "sage_turn_count",
    "sage_turn_roles",
    "sage_turns",
    "scored_positions",
    "scored_turns",
]

LEDGER_NAME = "sage_rlver/test_turns"
"""The test turns' name in the test-read ledger: the entry a loader here is given must be a read of it."""

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
    position: int = -1
    """Its position among all the turns in the quality benchmark's order (the sorted files'): what
    :func:`scored_positions` shuffles."""

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


def _turns(files: Sequence[str | Path]) -> Loaded[SageTurn]:
    """Every turn of ``files`` (test turns included: private), each with its role and position."""
    paths = [Path(f) for f in files]
    per_file: dict[Path, list[SageTurn]] = {}
    issues: list[LoadIssue] = []
    for path in paths:
        loaded = read_sage_rollouts(path)
        issues += loaded.issues
        per_file[path] = [t for rollout in loaded for t in _rollout_turns(rollout)]
    ordered = [t for path in sorted(paths) for t in per_file[path]]
    scored = set(scored_positions(len(ordered)))
    placed: dict[str, tuple[Literal["selection", "test"], int]] = {
        t.key: ("selection" if i in scored else "test", i) for i, t in enumerate(ordered)
    }
    turns = [replace(t, role=placed[t.key][0], position=placed[t.key][1]) for path in paths for t in per_file[path]]
    return Loaded(turns, issues)


def load_sage_turns(files: Sequence[str | Path], *, test_read: object | None = None) -> Loaded[SageTurn]:
    """The SAGE turns of ``files``, each with its role, and the issues the rollout loader found.

    Without ``test_read`` only the ``selection`` turns come out: a test turn, with its emotion
    change, needs the ledger entry of the read (:func:`care_lab.data.results.record_test_read`).
    The turns come in the order of ``files`` as given (rollouts in file order, messages in order);
    the roles do not depend on it: they follow the positions in the sorted files' order, the
    quality benchmark's (:func:`sage_turns`).

    Raises:
        InputError: ``test_read`` is not a recorded read of the SAGE test turns.

    Examples:
        >>> import os
        >>> files = sage_rollout_files(os.environ.get("CARE_DATA_DIR", "/no-data"))
        >>> if files:
        ...     loaded = load_sage_turns(files[::-1])
        ...     assert sorted(t.key for t in loaded) == sorted(sage_scored_keys(files))
        >>> len(load_sage_turns([])), load_sage_turns([]).issues
        (0, [])
    """
    loaded = _turns(files)
    if test_read is not None:
        check_test_read(test_read, LEDGER_NAME, files[0] if files else "sage_rlver")
        return loaded
    return Loaded([t for t in loaded if t.role == "selection"], loaded.issues)


def sage_turns(files: Sequence[str | Path], *, test_read: object | None = None) -> list[SageTurn]:
    """The SAGE turns in the quality benchmark's order, each with its role (the test turns only with ``test_read``).

    Examples:
        >>> import os, pathlib
        >>> files = sage_rollout_files(os.environ.get("CARE_DATA_DIR", "/no-data"))
        >>> if files:
        ...     turns = sage_turns(files)
        ...     assert len(turns) == 400 and {t.role for t in turns} == {"selection"}
    """
    return load_sage_turns(sorted(Path(f) for f in files), test_read=test_read).records


def sage_turn_count(files: Sequence[str | Path]) -> int:
    """How many turns the files hold, test turns included (a count: no turn is handed out).

    Examples:
        >>> sage_turn_count([])
        0
    """
    return len(_turns(files))


def scored_turns(turns: Sequence[SageTurn], count: int, *, limit: int | None, seed: int) -> list[SageTurn]:
    """The turns among ``turns`` that a quality run with ``--limit limit --seed seed`` over ``count`` turns
    scores, in its order (by :attr:`SageTurn.position`).

    Examples:
        >>> turns = [SageTurn(f"m:p:{i}", "m", "p", i, i, (), "", 0, "selection", i) for i in range(10)]
        >>> [t.position for t in scored_turns(turns[:8], 10, limit=3, seed=0)]
        [7, 1]
    """
    by_position = {t.position: t for t in turns}
    positions = scored_positions(count, limit=count if limit is None else limit, seed=seed)
    return [by_position[p] for p in positions if p in by_position]


def sage_scored_keys(files: Sequence[str | Path]) -> list[str]:
    """The keys of the 400 turns already scored, in the order the quality run scored them.

    Examples:
        >>> sage_scored_keys([])
        []
    """
    turns = _turns(sorted(Path(f) for f in files)).records
    return [turns[i].key for i in scored_positions(len(turns))]


def sage_test_turns(files: Sequence[str | Path], *, test_read: object | None) -> list[SageTurn]:
    """The ``test`` turns: every SAGE turn outside the 400 already scored; they need the ledger entry.

    Raises:
        InputError: no ``test_read``, or not a recorded read of the SAGE test turns.

    Examples:
        >>> sage_test_turns([], test_read=None)
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: sage_rlver: test data is read once per shipped artifact: pass test_read=, ...
    """
    check_test_read(test_read, LEDGER_NAME, Path(files[0]).parent if files else "sage_rlver")
    return [t for t in sage_turns(files, test_read=test_read) if t.role == "test"]


def sage_turn_roles(files: Sequence[str | Path]) -> dict[str, Literal["selection", "test"]]:
    """Every turn's key and role (keys and roles only: no reply, no emotion change).

    Examples:
        >>> sage_turn_roles([])
        {}
    """
    return {t.key: t.role for t in _turns(sorted(Path(f) for f in files))}


def rollout_test_turns(path: str | Path) -> dict[str, frozenset[int]] | None:
    """The message indices of the test turns in each rollout of a rollout file, by profile id.

    The roles are those of the rollout files beside it (``<data>/sage_rlver/results_*/``). ``None``
    when they cannot be told: a copy of a published rollout file outside that layout (every turn
    is then withheld); ``{}`` for a file that is none of the published ones.

    Examples:
        >>> rollout_test_turns("/nowhere/mine_result.jsonl")
        {}
    """
    from care_lab.data._content import known_match

    path = Path(path).absolute()
    files = sage_rollout_files(path.parents[2]) if len(path.parents) > 2 else ()
    if path not in {Path(f).absolute() for f in files}:
        known = known_match(path)
        return None if known is not None and known.published.startswith("sage_rlver/results_") else {}
    indices: dict[str, set[int]] = {}
    model = path.name.removesuffix(".jsonl").removesuffix("_result")
    for turn in _turns(sorted(files)):
        if turn.role == "test" and turn.model == model:
            indices.setdefault(turn.profile, set()).add(turn.index)
    return {profile: frozenset(found) for profile, found in indices.items()}
