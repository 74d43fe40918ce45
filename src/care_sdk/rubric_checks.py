"""Sanity checks of a rubric against the context it was written for.

The same checks judge generated rubrics (benchmarks, tests), the training targets a generator
learns from (``care train build-data`` with template targets), so a target that would be a defect
in a model's output is never taught, and the criteria :class:`~care_sdk.RubricGenerator` repairs:
:func:`criteria_defects` names the defect of each criterion a person could not read as written
(the last four checks), with no model and no context.

Checks (each a flag on :class:`RubricCheck`):

- ``near_uniform``: every weight within 0.05 of 1/3.
- ``copied``: a criterion repeats six or more consecutive words of the context.
- ``repeated_phrase``: a criterion repeats a 4-word phrase within itself.
- ``placeholder``: a criterion holds schema or placeholder text (JSON punctuation, key names,
  a lone ``C`` or ``W``).
- ``repeated_word``: a criterion repeats a word in a row (``same same``, ``the the``).
- ``unfilled_slot``: a criterion holds a slot nobody filled (``{topic}``, ``<topic>``, ``[X]``,
  ``...``, ``___``, a lone ``X``).
- ``garbled_slot``: a criterion reads as a garbled slot fill: a word three times within six
  words, two determiners in a row (``the their job``), or an ending on a word that cannot end a
  sentence (an article, a possessive, ``and``/``or``/``but``).
- ``duplicate``: a criterion copies another one of the rubric: the same words once case,
  punctuation, articles and possessives are set aside.
- ``grounded``: some criterion names a content word of the conversation (not a check that fails,
  a property that should hold).

:func:`top_match` scores a rubric's priorities against the reference reply's strategies.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from care_sdk._text import word_ngrams
from care_sdk.types import DIMENSIONS, Context, Dimension, Rubric, as_messages

__all__ = [
    "CRITERION_DEFECTS",
    "STOPWORDS",
    "CriterionDefect",
    "RubricCheck",
    "check_rubric",
    "content_words",
    "criteria_defects",
    "criterion_defect",
    "same_criterion",
    "top_match",
]

_STOPWORDS_TEXT = """
a about above after again against all also am an and any are aren't as at be because been before
being below between both but by can can't cannot could couldn't did didn't do does doesn't doing
don't down during each even ever every few for from further get gets getting got had hadn't has
hasn't have haven't having he he'd he'll he's her here here's hers herself him himself his how how's
i i'd i'll i'm i've if im in into is isn't it it's its itself just know let's like lot make many me
more most much must mustn't my myself need never no nor not now of off oh ok okay on once one only
or other ought our ours ourselves out over own really right said same say see she she'd she'll she's
should shouldn't so some something still such sure take than thank thanks that that's the their
theirs them themselves then there there's these they they'd they'll they're they've thing things
think this those though through to too under until up upon us very want was wasn't we we'd we'll
we're we've well were weren't what what's when when's where where's which while who who's whom why
why's will with won't would wouldn't yeah yes yet you you'd you'll you're you've your yours yourself
yourselves going go feel feeling felt hello hi hey good morning afternoon evening today day time
maybe kind sort way back able always anything everything nothing someone people person help talk
talking told tell trying try keep bit pretty glad great nice fine hope
"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
"""Words that never count as naming something from a conversation."""

_WORD = re.compile(r"[a-z][a-z']+")
_PLACEHOLDER = re.compile(r"[{}\[\]\"]|\b(?:weights?|criteria|criterion_?\d|non-negative)\b|^\s*[CW]\s*$|_\d|:\s*\d")
_TEMPLATE_WORDS = frozenset(d.value for d in DIMENSIONS) | {"user", "supporter", "reply", "criterion"}


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def content_words(text: str) -> set[str]:
    """The words of ``text`` that can name something specific: four letters or more, not a stopword.

    Examples:
        >>> sorted(content_words("I'm so anxious about my thesis defence"))
        ['anxious', 'defence', 'thesis']
    """
    return {w.strip("'") for w in _words(text) if len(w) >= 4 and w not in STOPWORDS and w.strip("'") not in STOPWORDS}


def _stems(words: Iterable[str]) -> set[str]:
    return {w[:6] for w in words}


CriterionDefect = Literal["unfilled_slot", "repeated_word", "garbled_slot", "copy"]
"""Why a person could not read a criterion as written (see :func:`criterion_defect`)."""

CRITERION_DEFECTS: tuple[CriterionDefect, ...] = ("unfilled_slot", "repeated_word", "garbled_slot", "copy")
"""The criterion defects, in the order :func:`criteria_defects` tests them."""

_SLOT = re.compile(r"[{}<>\[\]]|\.\.\.|…|_{2,}|(?<![\w'-])[XY](?![\w'-])")
_CLAUSES = re.compile(r"[,.;:!?()\u2014\u2013\"]+|\s-\s")
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_DETERMINERS = frozenset({"a", "an", "the", "my", "your", "their", "our", "its"})
_CANNOT_END = _DETERMINERS | {"and", "or", "but", "nor", "because", "whose", "very"}
_DOUBLES = frozenset({"that", "had"})  # "says that that helps", "had had": grammatical twice in a row
_SET_ASIDE = _DETERMINERS | {"his", "her", "this", "that", "these", "those"}
_WINDOW = 6


def _clauses(text: str) -> list[list[str]]:
    """The words of each clause of ``text`` (punctuation ends a clause), lowercased."""
    return [words for part in _CLAUSES.split(text.lower()) if (words := _TOKEN.findall(part))]


def criterion_defect(text: str) -> CriterionDefect | None:
    """Why a person could not read one criterion as written, or ``None`` when nothing is wrong.

    The rules, tested in this order (all deterministic, no model):

    - ``unfilled_slot``: braces, angle or square brackets, ``...``, ``…``, ``___``, or a lone
      capital ``X`` or ``Y`` (``Asks about {topic}.``, ``Names [X].``).
    - ``repeated_word``: the same word twice in a row within a clause (``the same same``,
      ``the the``), except ``that that`` and ``had had``.
    - ``garbled_slot``: a word three times within six consecutive words of a clause (``the same
      same as same``); two determiners in a row (``the their job``); or a last word that cannot end
      a sentence: an article, a possessive, ``and``, ``or``, ``but``, ``nor``, ``because``,
      ``whose``, ``very`` (``Asks about the.``). A preposition may end one (``what they are
      worried about``).

    None of these holds for the fixed criteria or for any criterion of the template bank the
    bundled generator was trained on, slots filled as in training (``benchmarks/bench_criteria_checks.py``
    counts them).

    Examples:
        >>> criterion_defect("Asks one open question about the same same same as them.")
        'repeated_word'
        >>> criterion_defect("Shows warmth about what the user shared about {topic}.")
        'unfilled_slot'
        >>> criterion_defect("Invites the user to say what might help with the their job.")
        'garbled_slot'
        >>> criterion_defect("Builds on what the user can still control about the.")
        'garbled_slot'
        >>> criterion_defect("Names what the user is worried about.") is None
        True
    """
    if _SLOT.search(text):
        return "unfilled_slot"
    clauses = _clauses(text)
    for words in clauses:
        if any(a == b and a not in _DOUBLES for a, b in pairwise(words)):
            return "repeated_word"
    for words in clauses:
        windows = (words[i : i + _WINDOW] for i in range(max(1, len(words) - _WINDOW + 1)))
        if any(max(window.count(w) for w in window) >= 3 for window in windows):
            return "garbled_slot"
        if any(a in _DETERMINERS and b in _DETERMINERS for a, b in pairwise(words)):
            return "garbled_slot"
    if clauses and clauses[-1][-1] in _CANNOT_END:
        return "garbled_slot"
    return None


def _gist(text: str) -> tuple[str, ...]:
    return tuple(w for w in _TOKEN.findall(text.lower()) if w not in _SET_ASIDE)


def same_criterion(a: str, b: str) -> bool:
    """Whether two criteria say the same thing word for word once case, punctuation, articles,
    possessives and demonstratives (``a``, ``the``, ``their``, ``this``, ...) are set aside.

    Examples:
        >>> same_criterion("Validates the fear.", "validates their fear")
        True
        >>> same_criterion("Asks what happened.", "Asks why it happened.")
        False
    """
    return _gist(a) == _gist(b)


def criteria_defects(texts: Sequence[str]) -> list[CriterionDefect | None]:
    """The defect of each criterion of a rubric, in order: its own (:func:`criterion_defect`), else
    ``copy`` when it is the same as an earlier criterion (:func:`same_criterion`; the first stays).

    Examples:
        >>> criteria_defects(["Names the fear.", "Asks about <topic>.", "Names their fear!", "Offers a step."])
        [None, 'unfilled_slot', 'copy', None]
    """
    seen: set[tuple[str, ...]] = set()
    out: list[CriterionDefect | None] = []
    for text in texts:
        defect = criterion_defect(text)
        gist = _gist(text)
        if defect is None and gist in seen:
            defect = "copy"
        if defect is None:
            seen.add(gist)
        out.append(defect)
    return out


@dataclass(frozen=True)
class RubricCheck:
    """What :func:`check_rubric` found; the ``*_criteria`` fields count criteria, the rest are per rubric.

    Examples:
        >>> RubricCheck(criteria=6).clean
        True
    """

    criteria: int
    """Number of criteria in the rubric."""
    near_uniform: bool = False
    """Every weight within 0.05 of 1/3."""
    copied_criteria: int = 0
    """Criteria that repeat six or more consecutive words of the context."""
    repeated_phrase_criteria: int = 0
    """Criteria that repeat a 4-word phrase within themselves."""
    placeholder_criteria: int = 0
    """Criteria holding schema or placeholder text."""
    unfilled_slot_criteria: int = 0
    """Criteria holding a slot nobody filled (:func:`criterion_defect`)."""
    repeated_word_criteria: int = 0
    """Criteria repeating a word in a row (:func:`criterion_defect`)."""
    garbled_slot_criteria: int = 0
    """Criteria that read as a garbled slot fill (:func:`criterion_defect`)."""
    duplicate: bool = False
    """A criterion copies another one of the rubric (:func:`same_criterion`)."""
    grounded: bool = True
    """Some criterion names a content word of the conversation."""

    @property
    def clean(self) -> bool:
        """No defect found (grounding included)."""
        return (
            not self.near_uniform
            and not self.duplicate
            and self.grounded
            and not (self.copied_criteria or self.repeated_phrase_criteria or self.placeholder_criteria)
            and not (self.unfilled_slot_criteria or self.repeated_word_criteria or self.garbled_slot_criteria)
        )

    def problems(self) -> list[str]:
        """The defects found, as short reasons.

        Examples:
            >>> RubricCheck(criteria=6, duplicate=True, grounded=False).problems()
            ['a criterion is repeated', 'no criterion names anything from the conversation']
        """
        out = []
        if self.near_uniform:
            out.append("near-uniform weights")
        if self.copied_criteria:
            out.append(f"{self.copied_criteria} criteria copied from the context")
        if self.repeated_phrase_criteria:
            out.append(f"{self.repeated_phrase_criteria} criteria repeat a phrase")
        if self.placeholder_criteria:
            out.append(f"{self.placeholder_criteria} criteria hold placeholder or schema text")
        if self.unfilled_slot_criteria:
            out.append(f"{self.unfilled_slot_criteria} criteria hold an unfilled slot")
        if self.repeated_word_criteria:
            out.append(f"{self.repeated_word_criteria} criteria repeat a word")
        if self.garbled_slot_criteria:
            out.append(f"{self.garbled_slot_criteria} criteria read as a garbled slot fill")
        if self.duplicate:
            out.append("a criterion is repeated")
        if not self.grounded:
            out.append("no criterion names anything from the conversation")
        return out


def _copied(criterion: list[str], context_grams: set[tuple[str, ...]]) -> bool:
    return any(g in context_grams for g in word_ngrams(criterion, 6))


def _repeats(criterion: list[str]) -> bool:
    grams = word_ngrams(criterion, 4)
    return len(grams) != len(set(grams))


def check_rubric(rubric: Rubric, context: Context, *, extra_context: Iterable[str] = ()) -> RubricCheck:
    """Check ``rubric`` against the ``context`` it was written for.

    Args:
        rubric: the rubric to check.
        context: the dialogue before the reply the rubric judges.
        extra_context: more text counted as the conversation for grounding (e.g. corpus metadata).

    Examples:
        >>> from care_sdk.types import Criterion, Dimension
        >>> ctx = [{"role": "user", "content": "My sister stopped talking to me after the wedding."}]
        >>> rubric = Rubric(weights={"cognitive": 1, "affective": 3, "proactive": 1}, criteria=[
        ...     Criterion(dimension=Dimension.COGNITIVE, text="Asks what happened at the wedding."),
        ...     Criterion(dimension=Dimension.AFFECTIVE, text="Names the hurt of the silence."),
        ...     Criterion(dimension=Dimension.PROACTIVE, text="Suggests one way to reach out.")])
        >>> check_rubric(rubric, ctx).clean
        True
        >>> check_rubric(Rubric.uniform_fixed(), ctx).problems()
        ['near-uniform weights', 'no criterion names anything from the conversation']
    """
    messages = as_messages(context)
    context_text = " ".join(m.content for m in messages)
    context_grams = set(word_ngrams(_words(context_text), 6))
    vocabulary = _stems(
        (content_words(context_text) | set().union(*(content_words(t) for t in extra_context))) - _TEMPLATE_WORDS
    )
    texts = [c.text for c in rubric.criteria]
    words = [_words(t) for t in texts]
    defects = criteria_defects(texts)
    weights = list(rubric.weights.values())
    return RubricCheck(
        criteria=len(texts),
        near_uniform=all(abs(w - 1 / 3) <= 0.05 for w in weights),
        copied_criteria=sum(_copied(w, context_grams) for w in words),
        repeated_phrase_criteria=sum(_repeats(w) for w in words),
        placeholder_criteria=sum(bool(_PLACEHOLDER.search(t)) for t in texts),
        unfilled_slot_criteria=defects.count("unfilled_slot"),
        repeated_word_criteria=defects.count("repeated_word"),
        garbled_slot_criteria=defects.count("garbled_slot"),
        duplicate="copy" in defects,
        grounded=any(_stems(content_words(t)) & vocabulary for t in texts),
    )


def top_match(weights: Mapping[Dimension, float], counts: Mapping[Dimension, int]) -> float | None:
    """How well a rubric's largest weight matches the reference reply's most used dimension.

    The share of the rubric's top dimensions (every dimension within 1e-9 of the largest weight)
    that are among the reference's top dimensions (largest strategy count): 1 or 0 for a single
    top dimension, and for tied weights the chance that a uniformly random tie-break lands on a
    reference top dimension (uniform weights score ``|reference tops| / 3``). ``None`` when every
    count is 0.

    Examples:
        >>> c, a, p = DIMENSIONS
        >>> top_match({c: 0.6, a: 0.2, p: 0.2}, {c: 1, a: 0, p: 0})
        1.0
        >>> top_match({c: 0.4, a: 0.4, p: 0.2}, {c: 1, a: 0, p: 0})
        0.5
        >>> round(top_match({c: 1, a: 1, p: 1}, {c: 2, a: 2, p: 0}), 3)
        0.667
    """
    best = max(counts.get(d, 0) for d in DIMENSIONS)
    if best == 0:
        return None
    reference = {d for d in DIMENSIONS if counts.get(d, 0) == best}
    largest = max(weights[d] for d in DIMENSIONS)
    tops = [d for d in DIMENSIONS if weights[d] >= largest - 1e-9]
    return sum(d in reference for d in tops) / len(tops)
