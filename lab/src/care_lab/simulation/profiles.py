"""Simulated-user profiles: a persona, a situation, a hidden support goal and an opening line.

Profiles are seeded from real data: the situations of ESConv dialogues (English) and the SAGE /
RLVER simulator profiles (Chinese). Both become :class:`UserProfile`. Training and held-out users
come from different files with declared data roles (ESConv's train split for training, its
valid/test splits or the eval-only SAGE profiles for evaluation; see
:func:`load_profiles`, configured by :class:`UserSettings`); :func:`split_profiles` carves a
held-out share out of one file of your own that has no splits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from care_lab.data.locations import data_dir as find_data_dir
from care_lab.data.roles import require_held_out, require_trainable
from care_sdk.errors import InputError
from care_sdk.types import Message

__all__ = [
    "Split",
    "UserProfile",
    "UserSettings",
    "esconv_profiles",
    "load_profiles",
    "profiles_file",
    "sage_profiles",
    "split_profiles",
]

Split = Literal["train", "held_out", "all"]


class UserProfile(BaseModel):
    """Who the simulated user is and what would truly help them.

    Examples:
        >>> p = UserProfile(id="p1", source="demo", persona="A nurse, 34.", situation="Burnt out after night shifts.",
        ...                 goal="Feel understood and find one way to rest.", opening="I'm exhausted all the time.")
        >>> p.first_message().content
        "I'm exhausted all the time."
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    """Profile id (unique within its source)."""
    source: str
    """Where it came from: ``esconv``, ``sage`` or your own label."""
    language: Literal["en", "zh"] = "en"
    """The language the user speaks."""
    persona: str
    """Who the user is."""
    situation: str
    """What happened and how the user reacts."""
    goal: str
    """The hidden support goal: what would help; the user never states it outright."""
    opening: str = Field(min_length=1)
    """The user's first message."""
    emotion: str | None = None
    """A label of the user's emotion or character type (for plots), when known."""
    user_type: str = "cooperative"
    """How the simulated user behaves: ``cooperative``, or an adversarial type of
    :data:`care_lab.simulation.adversarial.USER_TYPES` (set by
    :func:`~care_lab.simulation.adversarial.with_user_types`; evaluation only)."""

    def first_message(self) -> Message:
        """The opening line as a user message."""
        return Message(role="user", content=self.opening)


def esconv_profiles(path: str | Path, *, limit: int | None = None) -> list[UserProfile]:
    """Profiles from ESConv dialogues: the seeker's first-person situation opens the conversation.

    ESConv has no hidden goal; each profile's goal is to feel understood about its problem type
    and leave with one concrete idea the user believes they can act on. Dialogues without a
    situation are skipped (a skipped dialogue is a data issue reported by the loader).

    Args:
        path: an ESConv ``.jsonl`` split (or the directory of splits).
        limit: keep at most this many profiles (file order).

    Raises:
        InputError: the file is missing or yields no profile.

    Examples:
        >>> import os, pathlib
        >>> p = pathlib.Path(os.environ.get("CARE_DATA_DIR", "no-data-dir")) / "esconv" / "test.jsonl"
        >>> if p.exists():
        ...     assert esconv_profiles(p, limit=2)[0].language == "en"
    """
    from care_lab.data import load_esconv

    loaded = load_esconv(path)
    profiles: list[UserProfile] = []
    for dialogue in loaded.records:
        meta = dialogue.metadata
        situation = str(meta.get("situation") or "").strip()
        if not situation:
            continue
        emotion = str(meta.get("emotion_type") or "").strip() or None
        problem = str(meta.get("problem_type") or "").strip() or "a personal problem"
        feeling = emotion or "upset"
        profiles.append(
            UserProfile(
                id=dialogue.id,
                source="esconv",
                language="en",
                persona=f"An adult who feels {feeling} because of {problem}. Speaks casually, in short messages.",
                situation=situation,
                goal=(
                    f"Feel that the supporter truly understands your {feeling} about {problem}, "
                    "and leave with one concrete idea you believe you can act on."
                ),
                opening=situation,
                emotion=emotion,
            )
        )
        if limit is not None and len(profiles) >= limit:
            break
    if not profiles:
        raise InputError("no ESConv dialogue with a situation", location=str(path))
    return profiles


def sage_profiles(path: str | Path, *, limit: int | None = None) -> list[UserProfile]:
    """Profiles from the SAGE / RLVER simulator file (``profiles/simulator_profile_withfirsttalk.jsonl``; Chinese).

    Raises:
        InputError: the file is missing or yields no profile.

    Examples:
        >>> import os, pathlib
        >>> root = pathlib.Path(os.environ.get("CARE_DATA_DIR", "no-data-dir"))
        >>> p = root / "sage_rlver/profiles/simulator_profile_withfirsttalk.jsonl"
        >>> if p.exists():
        ...     assert sage_profiles(p, limit=1)[0].language == "zh"
    """
    from care_lab.data import load_sage_profiles

    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", location=str(path))
    profiles = [
        UserProfile(
            id=p.id,
            source="sage",
            language="zh",
            persona=p.player,
            situation=p.scene,
            goal=p.task,
            opening=p.first_talk,
            emotion=p.main_cha or None,
        )
        for p in load_sage_profiles(path).records
        if p.first_talk.strip()
    ]
    if limit is not None:
        profiles = profiles[:limit]
    if not profiles:
        raise InputError("no SAGE profile with an opening line", location=str(path))
    return profiles


def _held_out(profile_id: str, fraction: float, seed: int) -> bool:
    digest = hashlib.sha256(f"{seed}:{profile_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def split_profiles(
    profiles: Sequence[UserProfile], split: Split, *, held_out_fraction: float = 0.2, seed: int = 0
) -> list[UserProfile]:
    """The training or held-out share of ``profiles`` (a seeded hash of each id decides; stable across runs),
    for a source of your own without splits. Never use it to train on part of a test or eval-only file.

    Examples:
        >>> ps = [UserProfile(id=str(i), source="d", persona="", situation="", goal="", opening="hi")
        ...       for i in range(100)]
        >>> train, held = split_profiles(ps, "train"), split_profiles(ps, "held_out")
        >>> len(train) + len(held), set(p.id for p in train) & set(p.id for p in held)
        (100, set())
    """
    if split == "all":
        return list(profiles)
    if not 0.0 <= held_out_fraction <= 1.0:
        raise ValueError(f"held_out_fraction must be in [0, 1], got {held_out_fraction}")
    want_held = split == "held_out"
    return [p for p in profiles if _held_out(p.id, held_out_fraction, seed) == want_held]


class UserSettings(BaseModel):
    """Simulated-user profiles for multi-turn episodes: training users and held-out users come from
    different files, each with a declared data role (see :mod:`care_lab.data.roles`).

    Examples:
        >>> UserSettings().held_out_split
        'test'
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    source: Literal["esconv", "sage"] = "esconv"
    """``esconv`` (English: situations and openings of ESConv dialogues) or ``sage`` (Chinese:
    the SAGE/RLVER profiles, benchmark test users: eval-only, never trained on)."""
    path: str | None = None
    """The training users' file; default ``<data dir>/esconv/train.jsonl``. It must be declared
    trainable (``train`` or ``valid``): training refuses test and eval-only files."""
    held_out_path: str | None = None
    """The held-out users' file (evaluation); default ``<data dir>/esconv/<held_out_split>.jsonl``, or
    ``<data dir>/sage_rlver/profiles/simulator_profile_withfirsttalk.jsonl`` for ``sage``. It
    must be declared held-out (``valid``, ``test`` or ``eval-only``)."""
    held_out_split: Literal["valid", "test"] = "test"
    """Which ESConv split the held-out users come from by default (``valid`` for model selection)."""
    max_profiles: int | None = Field(default=None, ge=1)
    """Use at most this many profiles (file order)."""


_SAGE_PROFILES = ("sage_rlver", "profiles", "simulator_profile_withfirsttalk.jsonl")


def profiles_file(settings: UserSettings, split: Literal["train", "held_out"], root: Path) -> Path:
    """The file of the training or held-out users: the settings' path, else the source's default under ``root``.

    Examples:
        >>> profiles_file(UserSettings(), "held_out", Path("data")).as_posix()
        'data/esconv/test.jsonl'
    """
    if split == "train":
        if settings.path:
            return Path(settings.path)
        return root.joinpath(*_SAGE_PROFILES) if settings.source == "sage" else root / "esconv" / "train.jsonl"
    if settings.held_out_path:
        return Path(settings.held_out_path)
    return (
        root.joinpath(*_SAGE_PROFILES)
        if settings.source == "sage"
        else root / "esconv" / f"{settings.held_out_split}.jsonl"
    )


def load_profiles(settings: UserSettings, split: Split, data_dir: str | None = None) -> list[UserProfile]:
    """The simulated-user profiles of ``split``: ``train`` (``users.path``), ``held_out``
    (``users.held_out_path``) or ``all`` (both).

    Training users must come from a file declared trainable and held-out users from one declared
    held-out (:mod:`care_lab.data.roles`): the SAGE profiles are eval-only, so training on
    them is refused. ``data_dir`` is where the default files are looked up (else ``$CARE_DATA_DIR``);
    it is not needed when the settings name every file.

    Raises:
        InputError: a file is missing, has the wrong data role (named), or yields no profile.

    Examples:
        >>> load_profiles(UserSettings(source="sage", path="profiles.jsonl"), "train")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: profiles.jsonl: the data has no declared role; add a roles.json next to it, ...
    """
    parts: list[Literal["train", "held_out"]] = ["train", "held_out"] if split == "all" else [split]
    given = {"train": settings.path, "held_out": settings.held_out_path}
    if data_dir is None and all(given[p] for p in parts):
        root = Path()  # not used: the settings name every file
    else:
        root = Path(data_dir) if data_dir is not None else find_data_dir()
    chosen: list[UserProfile] = []
    for part in parts:
        path = profiles_file(settings, part, root)
        if part == "train":
            require_trainable(path, what="training users")
        else:
            require_held_out(path)
        chosen += esconv_profiles(path) if settings.source == "esconv" else sage_profiles(path)
    if settings.max_profiles is not None:
        chosen = chosen[: settings.max_profiles]
    if not chosen:
        raise InputError(f"no {split} profile", location=f"users ({settings.source})")
    return chosen
