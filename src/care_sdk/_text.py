"""Word n-grams, for the checks that look for copied text (rubric checks, copied replies).

Examples:
    >>> word_ngrams(["i", "feel", "so", "alone"], 3)
    [('i', 'feel', 'so'), ('feel', 'so', 'alone')]
"""

from __future__ import annotations

from collections.abc import Sequence


def word_ngrams(words: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """Every run of ``n`` consecutive ``words``, in order (none when there are fewer than ``n``)."""
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
