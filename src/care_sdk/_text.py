"""Small text rules shared by components: text shortened for a prompt (one rule for every
component that cuts what it quotes) and word n-grams (for the checks that look for copied text).

Examples:
    >>> clip("  a long profile  ", 6)
    'a long ...'
    >>> clip(" short ", None)
    'short'
    >>> word_ngrams(["i", "feel", "so", "alone"], 3)
    [('i', 'feel', 'so'), ('feel', 'so', 'alone')]
"""

from __future__ import annotations

from collections.abc import Sequence


def clip(text: str, limit: int | None) -> str:
    """``text`` stripped and, past ``limit`` characters, cut there with `` ...`` (``None``: no limit)."""
    text = text.strip()
    if limit is None or len(text) <= limit:
        return text
    return text[:limit].rstrip() + " ..."


def word_ngrams(words: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """Every run of ``n`` consecutive ``words``, in order (none when there are fewer than ``n``)."""
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
