"""Data roles: every dataset a recipe reads is ``train``, ``valid``, ``test`` or ``eval-only``.

A recipe refuses to train on ``test`` or ``eval-only`` data, with an error naming the file. A
file's role comes from, in order:

1. a ``roles.json`` in its directory or a parent directory (up to three levels), mapping paths
   relative to that directory (or glob patterns) to roles; ``care train build-data`` writes one
   next to its outputs (``sft/train.jsonl: train``, ``pairs/test.jsonl: test``, ...);
2. the published layout of the corpora the recipes know (:data:`KNOWN_ROLES`): ESConv keeps its
   own splits, the SAGE/RLVER profiles are benchmark test users (eval-only), and so on.

A file with no declared role is an error too: write a ``roles.json`` next to your own data, e.g.
``{"my_dialogues.jsonl": "train"}``. Records may carry their own ``split`` field (build-data
records do); :func:`check_records` refuses a training file holding a ``test`` record.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from care_sdk.errors import InputError

__all__ = [
    "KNOWN_ROLES",
    "ROLES_FILE",
    "Role",
    "check_records",
    "data_role",
    "require_held_out",
    "require_trainable",
    "write_roles",
]

Role = Literal["train", "valid", "test", "eval-only"]
"""What a dataset may be used for: ``train`` and ``valid`` may be trained on, ``test`` and
``eval-only`` may not."""

ROLES_FILE = "roles.json"
"""The name of a role declaration file."""

KNOWN_ROLES: dict[str, Role] = {
    "esconv/train.jsonl": "train",
    "esconv/valid.jsonl": "valid",
    "esconv/test.jsonl": "test",
    "esconv/FailedESConv.json": "eval-only",
    "sage_rlver/profiles/*": "eval-only",
    "sage_rlver/results_*/*": "eval-only",
    "eqbench3/*": "eval-only",
    "mint_lend_an_ear/training/conversations_322.json": "train",
}
"""Roles of the corpora in their published layout, by the file's trailing path (glob patterns).

The SAGE/RLVER profiles are the SAGE / SentientBench evaluation users (byte-identical to RLVER's
test profiles), so they are eval-only. Lend-an-Ear (``mint_lend_an_ear/lend_an_ear_eval``,
``judged_turns``) has no role of its own: build-data splits it by a seeded hash of the
conversation id and writes the split into every record."""

_TRAINABLE: frozenset[str] = frozenset({"train", "valid"})
_HELD_OUT: frozenset[str] = frozenset({"valid", "test", "eval-only"})


def _valid_role(value: Any, where: str) -> Role:
    if value not in get_args(Role):
        raise InputError(f"unknown data role {value!r} (expected one of {', '.join(get_args(Role))})", location=where)
    return value  # type: ignore[no-any-return]


def _declared(path: Path) -> tuple[Role, str] | None:
    for parent in list(path.parents)[:3]:
        file = parent / ROLES_FILE
        if not file.is_file():
            continue
        try:
            table = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON: {exc.msg}", location=str(file)) from None
        if not isinstance(table, dict):
            raise InputError("expected a mapping of file to role", location=str(file))
        relative = path.relative_to(parent).as_posix()
        for pattern, role in table.items():
            if relative == pattern or fnmatch.fnmatchcase(relative, pattern):
                return _valid_role(role, f"{file}: {pattern}"), str(file)
    return None


def data_role(path: str | Path) -> Role | None:
    """The declared role of a data file (``None``: not declared anywhere).

    Examples:
        >>> data_role("/data/esconv/test.jsonl"), data_role("/data/sage_rlver/profiles/users.jsonl")
        ('test', 'eval-only')
        >>> data_role("/tmp/nowhere/mine.jsonl") is None
        True
    """
    path = Path(path).absolute()
    declared = _declared(path)
    if declared is not None:
        return declared[0]
    posix = path.as_posix()
    for pattern, role in KNOWN_ROLES.items():
        if fnmatch.fnmatchcase(posix, f"*/{pattern}"):
            return role
    return None


def _undeclared(path: Path) -> InputError:
    return InputError(
        f"the data has no declared role; add a {ROLES_FILE} next to it, e.g. "
        f'{{"{path.name}": "train"}} (roles: train, valid, test, eval-only)',
        location=str(path),
    )


def require_trainable(
    path: str | Path, *, what: str = "training data", records: Sequence[Mapping[str, Any]] | None = None
) -> Role:
    """The role of ``path``, which a recipe is about to train on; refuses test and eval-only data.

    With ``records`` (the file's records), a file without a declared role is accepted when every
    record declares its own ``split`` (as build-data records do), and every record is checked
    with :func:`check_records`.

    Raises:
        InputError: the file or a record is declared ``test`` or ``eval-only``, or nothing declares
            a role (the message names the file).

    Examples:
        >>> require_trainable("/data/esconv/train.jsonl")
        'train'
        >>> require_trainable("/data/sage_rlver/profiles/p.jsonl")
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: /data/sage_rlver/profiles/p.jsonl: refusing to use eval-only data as training data
    """
    path = Path(path)
    role = data_role(path)
    if role is not None and role not in _TRAINABLE:
        raise InputError(f"refusing to use {role} data as {what}", location=str(path))
    if records is not None:
        check_records(records, path)
        if role is None and records and all("split" in r for r in records):
            return "train"
    if role is None:
        raise _undeclared(path)
    return role


def require_held_out(path: str | Path) -> Role:
    """The role of ``path``, which is about to be used for evaluation; refuses training data.

    Raises:
        InputError: the file is declared ``train``, or has no declared role (the message names the file).

    Examples:
        >>> require_held_out("/data/esconv/test.jsonl")
        'test'
    """
    path = Path(path)
    role = data_role(path)
    if role is None:
        raise _undeclared(path)
    if role not in _HELD_OUT:
        raise InputError(
            f"refusing to evaluate on {role} data (held-out data is valid, test or eval-only)", location=str(path)
        )
    return role


def check_records(records: Iterable[Mapping[str, Any]], path: str | Path) -> None:
    """Refuse training records whose own ``split`` field says ``test`` or ``eval-only``.

    Raises:
        InputError: naming the file and the first such record.

    Examples:
        >>> check_records([{"split": "train"}, {"id": "x"}], "pairs.jsonl")
        >>> check_records([{"id": "d1#3", "split": "test"}], "pairs.jsonl")
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: pairs.jsonl: record 1 (d1#3): refusing to train on a test record
    """
    for number, record in enumerate(records, start=1):
        split = record.get("split")
        if split is not None and split not in _TRAINABLE:
            name = f" ({record['id']})" if "id" in record else ""
            raise InputError(f"refusing to train on a {split} record", location=f"{path}: record {number}{name}")


def write_roles(directory: str | Path, roles: Mapping[str, Role]) -> Path:
    """Write (or update) the ``roles.json`` of ``directory``; returns its path.

    Examples:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = write_roles(d, {"sft/test.jsonl": "test"})
        >>> data_role(d / "sft" / "test.jsonl")
        'test'
    """
    directory = Path(directory)
    file = directory / ROLES_FILE
    table: dict[str, str] = {}
    if file.is_file():
        table = json.loads(file.read_text(encoding="utf-8"))
    for name, role in roles.items():
        table[name] = _valid_role(role, str(file))
    directory.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(dict(sorted(table.items())), indent=2) + "\n", encoding="utf-8")
    return file
