"""Copy measures on word 4-grams: how much of a reply repeats given texts, or itself.

The guards read them (:mod:`care_sdk.guards` re-exports the public ones), and context fit discounts
what a reply copies. Words are runs of letters and digits, lower-cased; for copies of other texts,
first and second person are made one ("I lost my job" matches "you lost your job"). A reply of
fewer than 8 words is too short to tell a quote from a copy, unless it is the whole of one of the
texts, 3 words or more ("Not good. You?" said back).

Examples:
    >>> copied_share("you lost your job and your wife left you", ["I lost my job and my wife left me"])
    1.0
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from care_sdk._text import word_ngrams

__all__ = ["copied_share", "own_share", "repeated_share", "strip_copied"]

_COPY_N = 4
_WHOLE_COPY_MIN = 3
"""The fewest words a reply under 8 words needs to count as a copy when it is a whole text of the
context: a two-word greeting said back ("Hi there") is a greeting, not a copy."""
_WORD = re.compile(r"\w+")
_PERSON = {
    "i": "<p>", "me": "<p>", "you": "<p>", "my": "<pp>", "your": "<pp>", "mine": "<ps>", "yours": "<ps>",
    "myself": "<px>", "yourself": "<px>", "am": "<be>", "are": "<be>", "m": "<be>", "re": "<be>",
    "was": "<was>", "were": "<was>",
}  # fmt: skip


def _copy_key(word: str) -> str:
    """A word as copy detection compares it: lower-cased, first and second person made one ("I am"
    and "you are" match), so turning the user's words around does not hide a copy."""
    word = word.lower()
    return _PERSON.get(word, word)


def _keys(text: str) -> list[str]:
    return [_copy_key(w) for w in _WORD.findall(text)]


def _context_grams(context: Sequence[str]) -> set[tuple[str, ...]]:
    return {g for text in context for g in word_ngrams(_keys(text), _COPY_N)}


def _covered(keys: Sequence[str], seen: set[tuple[str, ...]], *, grow: bool = False) -> list[bool]:
    """For every word of ``keys``, whether it lies in a word 4-gram found in ``seen``; with ``grow``,
    each 4-gram joins ``seen`` once read, so a later repeat of an earlier one counts too."""
    covered = [False] * len(keys)
    for i, gram in enumerate(word_ngrams(keys, _COPY_N)):
        if gram in seen:
            covered[i : i + _COPY_N] = [True] * _COPY_N
        if grow:
            seen.add(gram)
    return covered


def _copied(reply: str, context: Sequence[str]) -> list[tuple[re.Match[str], bool]]:
    """Every word of ``reply`` with whether it lies in a word 4-gram that occurs in ``context``."""
    words = list(_WORD.finditer(reply))
    covered = _covered([_copy_key(w.group()) for w in words], _context_grams(context))
    return list(zip(words, covered, strict=True))


def copied_share(reply: str, context: Sequence[str]) -> float | None:
    """The share of the reply's word 4-grams that occur in the ``context`` texts (lower-cased, first
    and second person made one). A reply of fewer than 8 words is too short to tell a quote from a
    copy: ``None``, unless it is the whole of one ``context`` text (3 to 7 words, the same words in
    the same order): then 1.0.

    Examples:
        >>> context = ["I failed my exam and my parents will be so angry with me"]
        >>> copied_share("I failed my exam and my parents will be so angry", context)
        1.0
        >>> copied_share("You failed your exam and your parents will be so angry", context)
        1.0
        >>> copied_share("Failing an exam is hard. What do you think your parents will say?", context)
        0.0
        >>> copied_share("I failed my exam", context) is None
        True
        >>> copied_share("Not good. You?", ["Hello.", "Not good. You?"])
        1.0
    """
    words = _keys(reply)
    if len(words) < 2 * _COPY_N:
        whole = len(words) >= _WHOLE_COPY_MIN and any(words == _keys(text) for text in context)
        return 1.0 if whole else None
    seen = _context_grams(context)
    grams = word_ngrams(words, _COPY_N)
    return sum(g in seen for g in grams) / len(grams)


def repeated_share(reply: str) -> float | None:
    """The share of the reply's words that lie in a word 4-gram (lower-cased) said earlier in the
    reply; ``None`` for a reply of fewer than 8 words. A text said twice scores 0.5, said ``k``
    times ``(k - 1) / k``.

    Examples:
        >>> repeated_share("That sounds hard. What happened at work today, if you want to say?")
        0.0
        >>> repeated_share("I am here for you and I care. " * 4)
        0.75
        >>> repeated_share("I hear you.") is None
        True
    """
    words = [w.lower() for w in _WORD.findall(reply)]
    if len(words) < 2 * _COPY_N:
        return None
    return sum(_covered(words, set(), grow=True)) / len(words)


def own_share(reply: str, context: Sequence[str]) -> float:
    """The share of the reply that is its own: one minus :func:`copied_share` (1 for a reply under
    8 words that is not a whole text of the context). Context fit multiplies its value by it.

    Examples:
        >>> own_share("You lost your job today. That is a lot to take in.", ["I lost my job today."])
        0.777...
        >>> own_share("That is hard.", ["It is."]), own_share("That is hard.", ["That is hard."])
        (1.0, 0.0)
    """
    return 1.0 - (copied_share(reply, context) or 0.0)


def strip_copied(reply: str, context: Sequence[str]) -> str:
    """``reply`` without the runs of words it repeats from the ``context`` texts (word 4-grams, as
    :func:`copied_share` finds them): what the reply adds to the dialogue. Context fit reads this,
    so that repeating the user's words back does not make a reply look written for the conversation.

    Examples:
        >>> context = ["I lost my job and my wife left me"]
        >>> strip_copied("So you lost your job and your wife left you. That is a lot at once.", context)
        'So. That is a lot at once.'
        >>> strip_copied("That is a lot to carry.", context)
        'That is a lot to carry.'
    """
    spans: list[tuple[int, int]] = []
    for word, covered in _copied(reply, context):
        if not covered:
            continue
        if spans and not reply[spans[-1][1] : word.start()].strip(" ,;'\""):
            spans[-1] = (spans[-1][0], word.end())
        else:
            spans.append((word.start(), word.end()))
    out, last = [], 0
    for start, end in spans:
        out.append(reply[last:start])
        last = end
    out.append(reply[last:])
    text = re.sub(r"\s+([.,;:!?])", r"\1", re.sub(r"\s{2,}", " ", "".join(out)))
    return text.strip().lstrip(".,;:!? ")
