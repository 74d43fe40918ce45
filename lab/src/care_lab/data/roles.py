"""Data roles: every dataset a recipe reads is ``train``, ``selection``, ``test`` or ``eval-only``.

What each role may be used for (``use`` of :func:`require_role`):

- ``fit`` (anything that moves parameters: SFT, GRPO, a probe or head fit, a gate's threshold):
  ``train`` only.
- ``select`` (choosing or tuning: early stopping, a penalty, a threshold among candidates, which
  variant ships): ``train`` or ``selection``.
- ``evaluate`` (numbers that are reported): ``selection`` and ``eval-only``; ``test`` only through
  :func:`care_lab.data.results.record_test_read`, which records the read in the test-read
  ledger (one read per shipped artifact). ``train`` never.

``valid`` is accepted everywhere as another name for ``selection``. A file's role comes from:

1. its content: a published file of the corpora the recipes know, byte for byte (the table
   ``known_files.json``, by sha256), or a file holding rows or dialogue ids of one (a slice, a
   renamed or converted copy) takes that file's role, the strictest where several match; a
   ``roles.json`` that gives it another role is an error naming both files;
2. else its place in the published layout (:data:`KNOWN_ROLES`): a file whose content matches no
   published file or row but lies at a published path (a toy file, another release) takes that
   path's role, which a ``roles.json`` cannot change either;
3. else a ``roles.json`` in its directory or a parent directory (up to three levels), mapping
   paths relative to that directory (or glob patterns) to roles; ``care train build-data`` writes
   one next to its outputs.

So renaming or moving a copy of a test file, even with a ``roles.json`` saying ``train`` next to
it, does not make it trainable. Some known files hold records of several roles (``by-record``:
Lend-an-Ear's conversations, the SAGE rollouts); their readers pass the records, each with its own
``role`` (or ``split``) field. A file with no declared role is an error too: write a ``roles.json``
next to your own data, e.g. ``{"my_dialogues.jsonl": "train"}``. docs/data.md lists every file's
role and why.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast, get_args

from care_lab.data._content import KnownMatch, known_match
from care_sdk.errors import InputError

__all__ = [
    "BY_RECORD",
    "KNOWN_ROLES",
    "OUTPUT_ROLES",
    "ROLES_FILE",
    "USES",
    "FileRole",
    "Role",
    "Use",
    "check_records",
    "data_role",
    "normalise_role",
    "record_role",
    "require_held_out",
    "require_role",
    "require_trainable",
    "write_roles",
]

Role = Literal["train", "selection", "test", "eval-only"]
"""What a dataset may be used for (see the module docstring)."""

FileRole = Literal["train", "selection", "test", "eval-only", "by-record"]
"""A file's role: one :data:`Role`, or ``by-record`` when its records carry roles of their own."""

Use = Literal["fit", "select", "evaluate"]
"""What a reader is about to do with the data."""

BY_RECORD: Literal["by-record"] = "by-record"
"""The file role of a file whose records have roles of their own."""

ALIASES: dict[str, Role] = {"valid": "selection"}
"""Other names of roles: ``valid`` (ESConv's split name, and this package's old role) reads as ``selection``."""

USES: dict[Use, frozenset[Role]] = {
    "fit": frozenset({"train"}),
    "select": frozenset({"train", "selection"}),
    "evaluate": frozenset({"selection", "test", "eval-only"}),
}
"""The roles each use may read (``test`` for ``evaluate`` only through the test-read ledger)."""

OUTPUT_ROLES: dict[str, Role] = {"train": "train", "valid": "selection", "test": "selection"}
"""The role of each split of the files build-data writes: ``valid`` and ``test`` come from ESConv
valid/test and the held-out Lend-an-Ear conversations, all ``selection``."""

_DOING: dict[Use, str] = {"fit": "fit on", "select": "select or tune on", "evaluate": "evaluate on"}

ROLES_FILE = "roles.json"
"""The name of a role declaration file."""

KNOWN_ROLES: dict[str, FileRole] = {
    "esconv/train.jsonl": "train",
    "esconv/valid.jsonl": "selection",
    "esconv/test.jsonl": "selection",
    "esconv/FailedESConv.json": "eval-only",
    "sage_rlver/profiles/*": "eval-only",
    "sage_rlver/results_*/*": BY_RECORD,
    "eqbench3/*": "eval-only",
    "mint_lend_an_ear/training/conversations_322.json": "train",
    "mint_lend_an_ear/lend_an_ear_eval/*": BY_RECORD,
    "mint_lend_an_ear/judged_turns/*": BY_RECORD,
    "empatheticdialogues_intents/*": "test",
}
"""Roles of the corpora in their published layout, by the file's path under the data directory (glob patterns).

The table of published files by content (``known_files.json``) is built from these patterns; at
read time a file is recognised by its content first, and by its trailing path only when its
content matches no published file or row.

ESConv test and the held-out Lend-an-Ear conversations gated many design choices, so they are
``selection``, like ESConv valid. The SAGE/RLVER profiles are benchmark users (eval-only). The
fresh ``test`` sets: the EmpatheticIntents listener turns, and the SAGE rollout turns outside the
400 the quality benchmark scored (:func:`care_lab.data.sage.sage_turn_role`; those 400 are
``selection``). Lend-an-Ear's role is by conversation (:func:`care_lab.data.splits.lend_an_ear_role`)."""


def normalise_role(value: Any, where: str) -> Role:
    """A role name, aliases resolved (``valid`` -> ``selection``).

    Raises:
        InputError: not a role (the message names ``where``).

    Examples:
        >>> normalise_role("valid", "x"), normalise_role("test", "x")
        ('selection', 'test')
    """
    value = ALIASES.get(value, value) if isinstance(value, str) else value
    if value not in get_args(Role):
        expected = ", ".join([*get_args(Role), *ALIASES])
        raise InputError(f"unknown data role {value!r} (expected one of {expected})", location=where)
    return value  # type: ignore[no-any-return]


def _declared(path: Path) -> tuple[Role, Path] | None:
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
                return normalise_role(role, f"{file}: {pattern}"), file
    return None


def _by_path(path: Path) -> KnownMatch | None:
    posix = path.as_posix()
    for pattern, role in KNOWN_ROLES.items():
        if fnmatch.fnmatchcase(posix, f"*/{pattern}"):
            return KnownMatch(role, pattern, "path")
    return None


_LEDGER_NAMES = {"empatheticdialogues_intents/": "empatheticdialogues_intents", "sage_rlver/": "sage_rlver/test_turns"}
"""The test-read ledger's name of the test set a published file belongs to, by its folder."""


def _ledger_name(path: Path) -> str | None:
    known = _fixed(path)
    published = known.published if known is not None else ""
    return next((name for folder, name in _LEDGER_NAMES.items() if published.startswith(folder)), None)


def _fixed(path: Path) -> KnownMatch | None:
    """The role a file cannot be given another of: by its content, else by its published path."""
    return known_match(path) or _by_path(path)


def data_role(path: str | Path) -> FileRole | None:
    """The role of a data file (``None``: not declared anywhere; ``by-record``: see its records).

    Decided by the file's content first (see the module docstring), so a renamed copy of a
    published file keeps that file's role.

    Raises:
        InputError: a ``roles.json`` gives a known file another role (naming both files and why
            the file is known), or holds an unknown role.

    Examples:
        >>> import os, pathlib, shutil, tempfile
        >>> root = pathlib.Path(os.environ.get("CARE_DATA_DIR", "/no-data"))
        >>> if (root / "esconv").is_dir():
        ...     copy = pathlib.Path(tempfile.mkdtemp()) / "mine.jsonl"
        ...     _ = shutil.copy(root / "esconv" / "valid.jsonl", copy)
        ...     assert data_role(copy) == "selection"  # a renamed copy keeps its role
        >>> data_role("/data/sage_rlver/profiles/users.jsonl")  # no such file: its published path decides
        'eval-only'
        >>> data_role("/tmp/nowhere/mine.jsonl") is None
        True
    """
    path = Path(path).absolute()
    fixed = _fixed(path)
    declared = _declared(path)
    if fixed is not None:
        if declared is not None and declared[0] != fixed.role:
            raise InputError(
                f"relabels {path} as {declared[0]}, but it is a published file whose role is fixed ({fixed.role}): "
                f"{fixed.why if fixed.how != 'path' else f'it lies at the published path {fixed.published}'}; "
                f"remove it from {declared[1].name}",
                location=str(declared[1]),
            )
        return cast(FileRole, fixed.role)
    return declared[0] if declared is not None else None


def record_role(record: Mapping[str, Any], where: str = "record") -> Role | None:
    """A record's own role: its ``role`` field, else its ``split`` field (``valid`` reads as ``selection``).

    Examples:
        >>> record_role({"split": "valid"}), record_role({"split": "test", "role": "selection"}), record_role({})
        ('selection', 'selection', None)
    """
    value = record.get("role", record.get("split"))
    return None if value is None else normalise_role(value, where)


def _name(record: Mapping[str, Any]) -> str:
    return f" ({record['id']})" if "id" in record else ""


def check_records(records: Iterable[Mapping[str, Any]], path: str | Path, use: Use = "fit") -> None:
    """Refuse records whose own role (``role`` or ``split`` field) may not be used for ``use``.

    Raises:
        InputError: naming the file and the first such record.

    Examples:
        >>> check_records([{"split": "train"}, {"id": "x"}], "pairs.jsonl")
        >>> check_records([{"id": "d1#3", "split": "test"}], "pairs.jsonl")
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: pairs.jsonl: record 1 (d1#3): refusing to fit on a test record
        >>> check_records([{"id": "d1#3", "split": "valid"}], "pairs.jsonl", use="select")
    """
    for number, record in enumerate(records, start=1):
        where = f"{path}: record {number}{_name(record)}"
        role = record_role(record, where)
        if role is not None and role not in USES[use]:
            raise InputError(f"refusing to {_DOING[use]} a {role} record", location=where)


def _undeclared(path: Path) -> InputError:
    return InputError(
        f"the data has no declared role; add a {ROLES_FILE} next to it, e.g. "
        f'{{"{path.name}": "train"}} (roles: train, selection, test, eval-only)',
        location=str(path),
    )


def require_role(
    path: str | Path,
    use: Use,
    *,
    records: Sequence[Mapping[str, Any]] | None = None,
    what: str | None = None,
    test_read: object | None = None,
) -> Role:
    """The role of ``path``, which a reader is about to ``fit`` on, ``select`` on or ``evaluate`` on.

    The one gate every reader goes through. With ``records`` (the file's records, read or about
    to be read), every record with its own ``role``/``split`` is checked too; a file without a
    declared role is then accepted when every record declares one, and a ``by-record`` file needs
    them. Reading ``test`` data for evaluation needs ``test_read``, the entry
    :func:`care_lab.data.results.record_test_read` returned.

    Args:
        path: the data file.
        use: ``fit``, ``select`` or ``evaluate``.
        records: the file's records, for files whose records carry roles.
        what: how the message names the data (default: ``<use> data``).
        test_read: the test-read ledger entry of this read (test data only).

    Raises:
        InputError: the file or a record may not be used so (the message names the file and the
            record), or nothing declares a role.

    Examples:
        >>> require_role("/data/esconv/train.jsonl", "fit")
        'train'
        >>> require_role("/data/esconv/valid.jsonl", "select")
        'selection'
        >>> require_role("/data/esconv/test.jsonl", "fit")
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: /data/esconv/test.jsonl: refusing to fit on selection data (fit reads train only)
    """
    path = Path(path)
    allowed = USES[use]
    role = data_role(path)
    if role is not None and role != BY_RECORD and role not in allowed:
        hint = {"fit": "fit reads train only", "select": "selection reads train or selection"}.get(
            use, "evaluation never reads train"
        )
        doing = f"use {role} data as {what}" if what else f"{_DOING[use]} {role} data"
        raise InputError(f"refusing to {doing} ({hint})", location=str(path))
    if records is not None:
        check_records(records, path, use)
    resolved: Role
    if role is None or role == BY_RECORD:
        roles = [r for r in (record_role(x) for x in records or ()) if r is not None]
        if not records or len(roles) < len(records):
            if role == BY_RECORD:
                raise InputError(
                    "its records have roles of their own: read it through its loader, which gives each record its role",
                    location=str(path),
                )
            raise _undeclared(path)
        resolved = "test" if "test" in roles else roles[0]
    else:
        resolved = role
    if resolved == "test" and use == "evaluate":
        if test_read is None:
            raise InputError(
                "test data is read once per shipped artifact: read it through "
                "care_lab.data.results.record_test_read, which records the read",
                location=str(path),
            )
        from care_lab.data.results import check_test_read  # results imports this module

        check_test_read(test_read, _ledger_name(path), path)
    return resolved


def require_trainable(
    path: str | Path, *, what: str = "training data", records: Sequence[Mapping[str, Any]] | None = None
) -> Role:
    """``require_role(path, "fit", ...)``: the data a recipe is about to train on (``train`` only).

    Raises:
        InputError: the file or a record is not ``train``, or nothing declares a role.

    Examples:
        >>> require_trainable("/data/esconv/train.jsonl")
        'train'
        >>> require_trainable("/data/sage_rlver/profiles/p.jsonl")
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: /data/sage_rlver/profiles/p.jsonl: refusing to use eval-only data as ...
    """
    return require_role(path, "fit", records=records, what=what)


def require_held_out(path: str | Path, *, test_read: object | None = None) -> Role:
    """``require_role(path, "evaluate")``: data about to be used for evaluation; refuses training data.

    Raises:
        InputError: the file is declared ``train``, is ``test`` without a ledger entry, or has no
            declared role (the message names the file).

    Examples:
        >>> require_held_out("/data/esconv/test.jsonl")
        'selection'
    """
    return require_role(path, "evaluate", test_read=test_read)


def write_roles(directory: str | Path, roles: Mapping[str, str]) -> Path:
    """Write (or update) the ``roles.json`` of ``directory``; returns its path.

    Examples:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = write_roles(d, {"sft/test.jsonl": "test", "sft/valid.jsonl": "valid"})
        >>> data_role(d / "sft" / "test.jsonl"), data_role(d / "sft" / "valid.jsonl")
        ('test', 'selection')
    """
    directory = Path(directory)
    file = directory / ROLES_FILE
    table: dict[str, str] = {}
    if file.is_file():
        table = json.loads(file.read_text(encoding="utf-8"))
    for name, role in roles.items():
        table[name] = normalise_role(role, str(file))
    directory.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(dict(sorted(table.items())), indent=2) + "\n", encoding="utf-8")
    return file
