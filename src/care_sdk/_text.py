"""Text shortened for a prompt: one rule for every component that cuts what it quotes.

Examples:
    >>> clip("  a long profile  ", 6)
    'a long ...'
    >>> clip(" short ", None)
    'short'
"""

from __future__ import annotations


def clip(text: str, limit: int | None) -> str:
    """``text`` stripped and, past ``limit`` characters, cut there with `` ...`` (``None``: no limit)."""
    text = text.strip()
    if limit is None or len(text) <= limit:
        return text
    return text[:limit].rstrip() + " ..."
