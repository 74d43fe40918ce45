"""The contrast benchmark: does a reward rank the real reply above replies any judge must rank lower?

For each context, the supporter's real reply and one reply of each family of
:data:`FAMILY_NAMES`: written ones (``contrast_families.json``: dismissive, platitude, bare
question, one word, off-topic advice, harm-validating, another language) and two built from the
data (``other_conversation``: the real reply of the next context in the sample; ``echo``: the
user's last message said back). Every reply of a context is scored by one reward (one rubric per
context). The rule that reads these numbers is ``benchmarks/rules/contrast.md``.

Measures (:func:`summarise`): per family, the share of contexts where the real reply scores
strictly above the family's reply (a tie or a missing score fails); the share of contexts where
every reply ties; per criterion, how often the real reply's ``cognitive`` criteria beat the
one-word reply's when the real reply asks an open question, and its ``affective`` criteria when
it names a feeling. Baselines of the same run: reply length and the feeling-word count, which
need no model (:func:`baseline_scores`).

Examples:
    >>> items = [ContrastItem("a", [{"role": "user", "content": "My cat died."}], "I'm so sorry. How are you?"),
    ...          ContrastItem("b", [{"role": "user", "content": "I failed."}], "That hurts. What happened?")]
    >>> replies = contrast_replies(items)
    >>> [r.family for r in replies[0]][:3], replies[0][FAMILY_NAMES.index("other_conversation") + 1].text
    (['real', 'dismissive', 'platitude'], 'That hurts. What happened?')
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from care_lab.bench.metrics import bootstrap

__all__ = [
    "FAMILY_NAMES",
    "FEELINGS",
    "SALT",
    "ContrastItem",
    "ContrastReply",
    "asks_open_question",
    "baseline_scores",
    "contrast_replies",
    "family_texts",
    "feeling_words",
    "names_feeling",
    "order_key",
    "summarise",
]

SALT = "contrast-v1:"
"""The salt of every ordering and choice the rule fixes (``benchmarks/rules/contrast.md``)."""

FAMILY_NAMES = (
    "dismissive",
    "platitude",
    "bare_question",
    "one_word",
    "other_conversation",
    "echo",
    "off_topic_advice",
    "harm_validating",
    "other_language",
)
"""The families of worse replies, in the order replies are scored (after the real one)."""

_FEELINGS_TEXT = """afraid alone angry anxious anxiety ashamed awful betrayed bitter broken confused depressed
    desperate disappointed down drained embarrassed exhausted fear frightened frustrated frustrating
    grief grieving guilty heartbroken helpless hopeless hurt hurting insecure isolated jealous lonely
    loss lost nervous overwhelmed overwhelming pain painful panic rejected sad sadness scared shame
    shocked sorry stress stressed stressful terrified tired trapped upset worried worry worrying"""
FEELINGS = frozenset(_FEELINGS_TEXT.split())
"""Words that name a feeling: the per-criterion measure's test of "the real reply names a feeling"."""

_FEELING_COUNT = re.compile(r"\b(feel\w*|understand\w*|sounds|hard|tough)\b", re.IGNORECASE)
_OPEN = re.compile(r"\b(how|what|why|when|where|who|which|tell|would|could)\b", re.IGNORECASE)
_WORD = re.compile(r"[a-z']+")


def order_key(key: str) -> str:
    """The sort key of a context or a choice: ``sha256(SALT + key)``.

    Examples:
        >>> order_key("d1")[:8]
        '8fb8ad93'
    """
    return hashlib.sha256((SALT + key).encode()).hexdigest()


def feeling_words(text: str) -> int:
    """How many of the five feeling words (and their forms) a reply holds: the feeling-word baseline.

    Examples:
        >>> feeling_words("That sounds so hard. I understand how you feel.")
        4
    """
    return len(_FEELING_COUNT.findall(text))


def asks_open_question(text: str) -> bool:
    """Whether a reply asks an open question: a ``?`` and a question word.

    Examples:
        >>> asks_open_question("How did that go?"), asks_open_question("Are you ok?"), asks_open_question("How sad.")
        (True, False, False)
    """
    return "?" in text and _OPEN.search(text) is not None


def names_feeling(text: str) -> bool:
    """Whether a reply names a feeling (a word of :data:`FEELINGS`).

    Examples:
        >>> names_feeling("You sound so lonely."), names_feeling("What happened next?")
        (True, False)
    """
    return any(word in FEELINGS for word in _WORD.findall(text.lower()))


@cache
def family_texts() -> dict[str, tuple[str, ...]]:
    """The written families' texts (``contrast_families.json``), family name to texts.

    Examples:
        >>> len(family_texts()["harm_validating"]) >= 3
        True
    """
    raw = json.loads(resources.files("care_lab.bench").joinpath("contrast_families.json").read_text("utf-8"))
    return {name: tuple(texts) for name, texts in raw.items() if not name.startswith("_")}


@dataclass(frozen=True)
class ContrastItem:
    """One context of the benchmark and its real reply.

    Examples:
        >>> ContrastItem("d1#3", [{"role": "user", "content": "Hi"}], "Hello!").id
        'd1#3'
    """

    id: str
    """A stable id (dialogue and turn)."""
    context: list[dict[str, str]]
    """The dialogue before the reply, as chat messages."""
    reply: str
    """The supporter's real reply."""
    group: str = ""
    """A sub-population the measures are also reported within (a SAGE system); empty when none."""


@dataclass(frozen=True)
class ContrastReply:
    """One reply to score: its family (``real`` or one of :data:`FAMILY_NAMES`) and its text.

    Examples:
        >>> ContrastReply("one_word", "Okay.").family
        'one_word'
    """

    family: str
    text: str


def _last_user(context: Sequence[Mapping[str, str]]) -> str:
    return next((m["content"] for m in reversed(context) if m["role"] == "user"), "")


def contrast_replies(items: Sequence[ContrastItem]) -> list[list[ContrastReply]]:
    """The replies of every context: the real one first, then one per family in :data:`FAMILY_NAMES` order.

    ``other_conversation`` is the real reply of the next item (the last item takes the first's);
    ``echo`` is the user's last message; a written family's text is chosen by
    ``order_key(id + family)`` among its texts.
    """
    texts = family_texts()
    out = []
    for i, item in enumerate(items):
        replies = [ContrastReply("real", item.reply)]
        for family in FAMILY_NAMES:
            if family == "other_conversation":
                text = items[(i + 1) % len(items)].reply
            elif family == "echo":
                text = _last_user(item.context)
            else:
                options = texts[family]
                text = options[int(order_key(item.id + family), 16) % len(options)]
            replies.append(ContrastReply(family, text))
        out.append(replies)
    return out


def baseline_scores(replies: Sequence[ContrastReply]) -> dict[str, list[float]]:
    """The no-model baselines' scores of one context's replies: ``length`` and ``feeling_words``.

    Examples:
        >>> baseline_scores([ContrastReply("real", "That sounds hard."), ContrastReply("one_word", "Ok.")])
        {'length': [17.0, 3.0], 'feeling_words': [2.0, 0.0]}
    """
    return {
        "length": [float(len(r.text)) for r in replies],
        "feeling_words": [float(feeling_words(r.text)) for r in replies],
    }


def _beats(record: Mapping[str, Any], arm: str, family: str) -> float:
    scores = record["scores"][arm]
    families = record["families"]
    real, other = scores[0], scores[families.index(family)]
    return 1.0 if real is not None and other is not None and real > other else 0.0


def _all_tie(record: Mapping[str, Any], arm: str) -> float:
    values = record["scores"][arm]
    return 1.0 if None not in values and len(set(values)) == 1 else 0.0


def _dimension_win(record: Mapping[str, Any], arm: str, dimension: str) -> float | None:
    criteria = record.get("criteria", {}).get(arm)
    if not criteria:
        return None
    families = record["families"]
    real, one = criteria[0], criteria[families.index("one_word")]
    if real is None or one is None or dimension not in real or dimension not in one:
        return None
    return 1.0 if real[dimension] > one[dimension] else 0.0


def _share(
    records: Sequence[Mapping[str, Any]], value: Callable[[Mapping[str, Any]], float | None], resamples: int
) -> dict[str, Any]:
    def mean(sample: Sequence[Mapping[str, Any]]) -> float | None:
        values = [v for v in (value(r) for r in sample) if v is not None]
        return sum(values) / len(values) if values else None

    return bootstrap(records, mean, resamples=resamples, seed=0).to_json()


def summarise(records: Sequence[Mapping[str, Any]], arms: Sequence[str], resamples: int = 2000) -> dict[str, Any]:
    """The measures of the rule for every arm: family shares, the all-tie share, per-criterion wins.

    A record holds ``families`` (``real`` first), ``scores`` (arm to one score per reply, ``None``
    where the arm gave none), optionally ``criteria`` (arm to each reply's mean criterion score per
    dimension) and the real reply's ``asks_question`` and ``names_feeling``.

    Examples:
        >>> rec = {"families": ["real", *FAMILY_NAMES], "scores": {"len": [9.0] + [1.0] * len(FAMILY_NAMES)},
        ...        "asks_question": False, "names_feeling": False}
        >>> out = summarise([rec, rec], ["len"], resamples=10)
        >>> out["len"]["families"]["dismissive"]["value"], out["len"]["all_tie"]["value"], out["len"]["worst"]
        (1.0, 0.0, 1.0)
    """
    out: dict[str, Any] = {}
    for arm in arms:
        out[arm] = _arm_summary(records, arm, resamples)
    return out


def _arm_summary(records: Sequence[Mapping[str, Any]], arm: str, resamples: int) -> dict[str, Any]:
    scored = [r for r in records if arm in r["scores"]]
    families = {f: _share(scored, _family_win(arm, f), resamples) for f in FAMILY_NAMES}
    estimates = [v["value"] for v in families.values() if v["value"] is not None]
    return {
        "n": len(scored),
        "families": families,
        "worst": min(estimates) if estimates else None,
        "all_tie": _share(scored, lambda r: _all_tie(r, arm), resamples),
        "criteria": {
            "cognitive_when_real_asks": _share(
                [r for r in scored if r.get("asks_question")],
                lambda r: _dimension_win(r, arm, "cognitive"),
                resamples,
            ),
            "affective_when_real_names_feeling": _share(
                [r for r in scored if r.get("names_feeling")],
                lambda r: _dimension_win(r, arm, "affective"),
                resamples,
            ),
        },
    }


def _family_win(arm: str, family: str) -> Callable[[Mapping[str, Any]], float]:
    return lambda record: _beats(record, arm, family)
