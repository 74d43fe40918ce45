"""User profiles: who the user is, given to the rubric generator and the evaluator beside the dialogue.

Support depends on who the user is, not only on the dialogue so far. A :class:`UserProfile` is
free text, a small record (traits and a summary of the user's history), or both. Every entry
point that takes a context also takes a profile (``profile=`` for one call, ``profiles=`` with one
entry per context for a batch): :class:`~care_sdk.RubricGenerator`,
:class:`~care_sdk.RubricEvaluator`, :class:`~care_sdk.AdaptiveReward` (and its TRL call, through
a ``profile`` dataset column), ``care score`` (a ``profile`` field on a dialogue line), the
service's ``/v1/score`` items and verl's ``extra_info``. Each reads it through :func:`as_profile`,
the one place a profile is normalised.

A profile enters the prompts as fenced data (see :mod:`care_sdk.prompts.fence`) in their profile
versions (generator and evaluator prompt ``v3``); without a profile the prompts, and so the
cached rubrics, are exactly those of before. A component whose backend carries a trained adapter
(the bundled ``default`` models) drops the profile: the adapter was trained on a prompt without one.

Examples:
    >>> as_profile("A retired teacher who lives alone.").text
    'A retired teacher who lives alone.'
    >>> print(as_profile({"traits": ["shy", "proud"], "history": "Lost her husband last year."}).render())
    Traits: shy; proud
    History: Lost her husband last year.
    >>> as_profile(None), as_profile("  ")
    (None, None)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from care_sdk.errors import InputError

__all__ = [
    "PROFILE_TEXT_LIMIT",
    "ProfileField",
    "ProfileLike",
    "ProfileReader",
    "UserProfile",
    "as_profile",
    "as_profiles",
    "describe_error",
]

logger = logging.getLogger(__name__)

PROFILE_TEXT_LIMIT = 4000
"""Longest free text or history summary a profile accepts, in characters (a prompt must still fit)."""
TRAIT_LIMIT = 200
"""Longest trait, in characters."""
MAX_TRAITS = 20
"""Most traits one profile may list."""


class UserProfile(BaseModel):
    """Who the user is: free text, traits, a summary of their history, or any of them together.

    Strings are stripped; an empty one (or ``None``, as a dataset fills a field some rows lack)
    counts as absent; a profile needs at least one part.

    Examples:
        >>> profile = UserProfile(text="A nurse on night shifts.", traits=["tired", "dutiful"])
        >>> print(profile.render())
        A nurse on night shifts.
        Traits: tired; dutiful
        >>> UserProfile(text=" ")
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.ValidationError: 1 validation error for UserProfile
          Value error, a profile needs text, traits or a history summary ...
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str | None = Field(default=None, max_length=PROFILE_TEXT_LIMIT)
    """The profile as free text (e.g. a persona description)."""
    traits: tuple[str, ...] = Field(default=(), max_length=MAX_TRAITS)
    """Short traits of the user (e.g. ``"anxious about exams"``)."""
    history: str | None = Field(default=None, max_length=PROFILE_TEXT_LIMIT)
    """A summary of the user's history (earlier conversations, what happened to them)."""

    @field_validator("text", "history")
    @classmethod
    def _strip(cls, value: str | None) -> str | None:
        value = value.strip() if value is not None else None
        return value or None

    @field_validator("traits", mode="before")
    @classmethod
    def _no_traits(cls, traits: Any) -> Any:
        return () if traits is None else traits  # a dataset that unifies its rows fills a missing list with None

    @field_validator("traits")
    @classmethod
    def _traits(cls, traits: tuple[str, ...]) -> tuple[str, ...]:
        kept = tuple(t.strip() for t in traits if t.strip())
        for i, trait in enumerate(kept):
            if len(trait) > TRAIT_LIMIT:
                raise ValueError(f"trait {i} has {len(trait)} characters; at most {TRAIT_LIMIT}")
        return kept

    @model_validator(mode="after")
    def _not_empty(self) -> UserProfile:
        if self.text is None and not self.traits and self.history is None:
            raise ValueError("a profile needs text, traits or a history summary")
        return self

    def render(self) -> str:
        """The profile as the prompts quote it: the text, then ``Traits: ...``, then ``History: ...``.

        Examples:
            >>> UserProfile(history="Moved cities twice this year.").render()
            'History: Moved cities twice this year.'
        """
        lines = [self.text] if self.text is not None else []
        if self.traits:
            lines.append("Traits: " + "; ".join(self.traits))
        if self.history is not None:
            lines.append(f"History: {self.history}")
        return "\n".join(lines)


ProfileLike = UserProfile | str | Mapping[str, Any] | None
"""A profile as callers give it: a :class:`UserProfile`, free text, a mapping of its fields, or ``None``."""


def as_profile(value: ProfileLike, where: str = "profile") -> UserProfile | None:
    """The profile ``value`` describes, or ``None`` for no profile: the one place a profile is normalised.

    ``None`` and a blank string are no profile; a string is free text; a mapping holds the
    fields of :class:`UserProfile` (``text``, ``traits``, ``history``).

    Raises:
        InputError: a mapping with other keys, a field of the wrong type, an empty profile, or a
            value of another type; the message names ``where`` and the field.

    Examples:
        >>> as_profile({"text": "An engineer.", "traits": ["blunt"]}).traits
        ('blunt',)
        >>> as_profile(3)
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: profile: a profile is text, a mapping of text/traits/history, or None; got int
        >>> as_profile({"traits": "shy"}, "dialogues.jsonl:line 4: profile")
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: dialogues.jsonl:line 4: profile.traits: Input should be a valid tuple
    """
    if value is None or isinstance(value, UserProfile):
        return value
    if isinstance(value, str):
        return UserProfile(text=value) if value.strip() else None
    if not isinstance(value, Mapping):
        kind = type(value).__name__
        raise InputError(f"{where}: a profile is text, a mapping of text/traits/history, or None; got {kind}")
    try:
        return UserProfile.model_validate(dict(value))
    except ValidationError as exc:
        raise InputError(describe_error(exc, where)) from None


def _profile_field(value: Any) -> Any:
    """A ``profile`` field's value as pydantic validates it: text through :func:`as_profile`, a mapping
    validated in place (so an error names the field inside it)."""
    if value is None or isinstance(value, str | UserProfile):
        return as_profile(value)
    if not isinstance(value, Mapping):
        raise PydanticCustomError("profile_type", "a profile is text or an object with text, traits and history")
    return value


ProfileField = Annotated[UserProfile | None, BeforeValidator(_profile_field)]
"""A user profile as a pydantic field type: free text, ``{"text", "traits", "history"}``, or ``None``
(blank text is ``None`` too); used by :class:`~care_sdk.Dialogue` and the service's request items.

Examples:
    >>> from pydantic import TypeAdapter
    >>> TypeAdapter(ProfileField).validate_python("A widower.").text
    'A widower.'
"""


def as_profiles(values: Sequence[ProfileLike] | None, count: int, what: str = "profiles") -> list[UserProfile | None]:
    """One normalised profile per item of a batch of ``count`` (all ``None`` when ``values`` is ``None``).

    Raises:
        InputError: ``values`` has another length, or an entry is not a profile; the message
            names ``what`` and the entry's index.

    Examples:
        >>> as_profiles(None, 2)
        [None, None]
        >>> as_profiles(["A student.", None], 2)[0].text
        'A student.'
        >>> as_profiles(["A student."], 2)
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: profiles: 1 values for 2 items
        >>> as_profiles([{"name": "Ann"}], 1)
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: profiles[0].name: Extra inputs are not permitted
    """
    if values is None:
        return [None] * count
    if isinstance(values, str | Mapping) or len(values) != count:
        got = "one profile" if isinstance(values, str | Mapping) else f"{len(values)} values"
        raise InputError(f"{what}: {got} for {count} items")
    return [as_profile(value, f"{what}[{i}]") for i, value in enumerate(values)]


def describe_error(exc: ValidationError, where: str) -> str:
    """A profile's first validation error, as ``where.field: reason``.

    Examples:
        >>> try:
        ...     UserProfile(traits=[1])
        ... except ValidationError as exc:
        ...     describe_error(exc, "profile")
        'profile.traits[0]: Input should be a valid string'
    """
    first = exc.errors(include_url=False)[0]
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}{field}: {message}"


class ProfileReader:
    """What the generator and the evaluator share about profiles: whether they read them, and
    dropping (with one warning per component) the profiles they do not read.

    Examples:
        >>> class Trained(ProfileReader):
        ...     reads_profiles = False
        >>> Trained().read_profile(UserProfile(text="A nurse.")) is None
        True
        >>> ProfileReader().read_profile(UserProfile(text="A nurse.")).text
        'A nurse.'
    """

    reads_profiles: bool = True
    """Whether a user profile reaches the prompt (``False``: the component was trained on the prompt
    without one, e.g. a backend that carries a trained adapter, and drops it)."""
    _dropped_profile = False

    def read_profile(self, profile: UserProfile | None) -> UserProfile | None:
        """``profile`` as this component reads it: ``None`` when it drops profiles (the first one logged)."""
        if profile is None or self.reads_profiles:
            return profile
        if not self._dropped_profile:
            self._dropped_profile = True
            logger.warning("%r drops user profiles: it was trained on the prompt without one", self)
        return None
