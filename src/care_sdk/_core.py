"""Definitions below both :mod:`care_sdk.types` and :mod:`care_sdk.prompts`: score bounds, criterion
length bounds and the text of the fixed criteria.

Nothing here imports another module of the package, so every layer may use it.

Examples:
    >>> SCORES[0], SCORES[-1]
    (1, 5)
    >>> sorted(fixed_criteria_texts())
    ['affective', 'cognitive', 'proactive']
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

__all__ = [
    "CRITERION_MAX_CHARS",
    "CRITERION_MIN_CHARS",
    "CRITERION_TEXT_LIMIT",
    "FIXED_CRITERIA_VERSION",
    "MAX_CRITERIA",
    "MAX_SCORE",
    "MIN_SCORE",
    "PERSONA_CRITERIA_VERSION",
    "SCORES",
    "fixed_criteria_texts",
    "persona_criteria_texts",
]

SCORES: tuple[int, ...] = (1, 2, 3, 4, 5)
"""The scores an evaluator may give one criterion."""
MIN_SCORE = SCORES[0]
"""The lowest score: the criterion is not met."""
MAX_SCORE = SCORES[-1]
"""The highest score: the criterion is fully met."""

CRITERION_MIN_CHARS = 8
"""Shortest criterion the generator's JSON schema asks for."""
CRITERION_MAX_CHARS = 200
"""Longest criterion the generator's JSON schema asks for (a grammar needs a bound to end a string)."""
CRITERION_TEXT_LIMIT = 400
"""Longest criterion text a :class:`~care_sdk.Criterion` accepts (room for hand-written rubrics)."""
MAX_CRITERIA = 15
"""Most criteria one rubric may hold."""

FIXED_CRITERIA_VERSION = "v1"
"""Version of the fixed six-criterion set (package data ``prompts/fixed_criteria_v1.json``)."""
PERSONA_CRITERIA_VERSION = "v1"
"""Version of the persona-consistency criteria (package data ``prompts/persona_criteria_v1.json``)."""


@cache
def fixed_criteria_texts() -> dict[str, tuple[str, ...]]:
    """The fixed criteria's texts by dimension name, two per dimension.

    Examples:
        >>> len(fixed_criteria_texts()["affective"])
        2
    """
    return _criteria_file(f"fixed_criteria_{FIXED_CRITERIA_VERSION}.json")


@cache
def persona_criteria_texts() -> dict[str, tuple[str, ...]]:
    """The persona-consistency criteria's texts by dimension name, one per dimension (see
    :func:`care_sdk.types.persona_criteria`).

    Examples:
        >>> [len(texts) for texts in persona_criteria_texts().values()]
        [1, 1, 1]
    """
    return _criteria_file(f"persona_criteria_{PERSONA_CRITERIA_VERSION}.json")


def _criteria_file(name: str) -> dict[str, tuple[str, ...]]:
    path = resources.files("care_sdk").joinpath("prompts", name)
    data = json.loads(path.read_text(encoding="utf-8"))
    return {str(dim): tuple(str(t) for t in texts) for dim, texts in data.items()}
