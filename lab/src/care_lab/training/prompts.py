"""Prompts of the data-construction roles: the teacher, the target judges, the candidate
repliers, the pair judges and the strategy annotator.

Each role that answers in JSON has a ``*_messages`` builder, a bounded JSON schema and a parser
that raises ``ValueError`` naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

from care_sdk.prompts import render_transcript
from care_sdk.types import DIMENSIONS, Dimension, Message, Rubric

__all__ = [
    "ANNOTATOR_STRATEGIES",
    "DATA_PROMPT_VERSION",
    "annotator_messages",
    "annotator_schema",
    "candidate_messages",
    "judge_messages",
    "judge_schema",
    "pair_judge_messages",
    "pair_judge_schema",
    "parse_annotation",
    "parse_pair_verdict",
    "parse_verdict",
    "teacher_messages",
]

DATA_PROMPT_VERSION = "data-v2"
"""Version of the data-construction prompts (recorded in build-data reports). v2: the teacher is
asked for a good rubric, not for weights that follow the strategy counts, and the target judges
check quality and consistency with the reference, not alignment; pairwise judges are new."""

_FILES = {
    "teacher": "teacher_system_v2.txt",
    "judge": "judge_system_v2.txt",
    "annotator": "annotator_system_v1.txt",
    "pair_judge": "pair_judge_system_v1.txt",
    "candidate": "candidate_system_v1.txt",
}

ANNOTATOR_STRATEGIES: dict[str, str] = {
    "Question": "asks for information to help the seeker articulate the problem",
    "Restatement or Paraphrasing": "restates the seeker's words to help them see their situation more clearly",
    "Reflection of feelings": "names and reflects the seeker's feelings",
    "Self-disclosure": "shares a similar experience or feeling of the supporter's own",
    "Affirmation and Reassurance": "affirms the seeker's strengths, motivation and capabilities, or reassures them",
    "Providing Suggestions": "suggests ways forward (without telling the seeker what to do)",
    "Information": "gives useful information: data, facts, opinions, resources",
    "Others": "pleasantries and anything else",
}
"""The annotator's label set: ESConv's eight strategies, with the definitions of the ESConv paper."""


@cache
def _system(name: str) -> str:
    """The system prompt of a role, from package data (``<role>_system_v<N>.txt``)."""
    return resources.files("care_lab.training").joinpath(_FILES[name]).read_text(encoding="utf-8").strip()


def _counts_text(counts: Mapping[Dimension, int]) -> str:
    return ", ".join(f"{d.value} {counts.get(d, 0)}" for d in DIMENSIONS)


def teacher_messages(
    context: Sequence[Message],
    reference: str,
    strategies: Sequence[str],
    dimensions: Mapping[str, Dimension | None],
    counts: Mapping[Dimension, int],
    *,
    criteria_per_dimension: int = 2,
) -> list[Message]:
    """The teacher's prompt: context, reference reply, its strategies and their dimensions.

    Examples:
        >>> msgs = teacher_messages([Message(role="user", content="I lost my job.")], "That is a shock.",
        ...                         ["Reflection of feelings"], {"Reflection of feelings": Dimension.AFFECTIVE},
        ...                         {Dimension.AFFECTIVE: 1})
        >>> "Reflection of feelings (affective)" in msgs[1].content
        True
    """
    labels = ", ".join(f"{s} ({d.value if (d := dimensions.get(s)) else 'no dimension'})" for s in strategies)
    user = (
        f"Conversation so far:\n{render_transcript(list(context))}\n\n"
        f"Reference reply: {reference.strip()}\n"
        f"Its strategies: {labels or 'none'}\n"
        f"Strategy count per dimension: {_counts_text(counts)}\n\n"
        "Write the target rubric."
    )
    return [
        Message(role="system", content=_system("teacher").format(k=criteria_per_dimension)),
        Message(role="user", content=user),
    ]


def judge_messages(
    context: Sequence[Message], reference: str, counts: Mapping[Dimension, int], rubric: Rubric
) -> list[Message]:
    """A target judge's prompt: context, reference reply, the strategy counts and the candidate target rubric.

    Examples:
        >>> judge_messages([Message(role="user", content="hi")], "hello", {Dimension.COGNITIVE: 1},
        ...                Rubric.uniform_fixed())[1].content.count("cognitive") > 0
        True
    """
    rubric_text = "\n".join(
        [f"weights: {_weights_text(rubric)}"] + [f"- ({c.dimension.value}) {c.text}" for c in rubric.criteria]
    )
    user = (
        f"Conversation so far:\n{render_transcript(list(context))}\n\n"
        f"Reference reply: {reference.strip()}\n"
        f"Strategy count per dimension of the reference reply: {_counts_text(counts)}\n\n"
        f"Proposed rubric:\n{rubric_text}\n\nAccept or reject it."
    )
    return [Message(role="system", content=_system("judge")), Message(role="user", content=user)]


def _weights_text(rubric: Rubric) -> str:
    return ", ".join(f"{d.value} {rubric.weights[d]:.2f}" for d in DIMENSIONS)


def judge_schema() -> dict[str, Any]:
    """The judge's reply schema: ``{"accept": bool, "reason": str}`` (bounded).

    Examples:
        >>> judge_schema()["required"]
        ['accept', 'reason']
    """
    return {
        "type": "object",
        "properties": {"accept": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 160}},
        "required": ["accept", "reason"],
        "additionalProperties": False,
    }


def parse_verdict(text: str) -> tuple[bool, str]:
    """Parse a judge reply into ``(accept, reason)``.

    Raises:
        ValueError: not JSON, or ``accept`` is not a boolean.

    Examples:
        >>> parse_verdict('{"accept": false, "reason": "generic"}')
        (False, 'generic')
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"verdict is not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("accept"), bool):
        raise ValueError("accept: expected true or false")
    return data["accept"], str(data.get("reason", "")).strip()


def annotator_messages(context: Sequence[Message], reply: str) -> list[Message]:
    """The annotator's prompt: label the strategies of ``reply`` (ESConv's eight).

    Examples:
        >>> "Self-disclosure" in annotator_messages([Message(role="user", content="hi")], "hey")[0].content
        True
    """
    strategies = "\n".join(f"- {name}: {text}" for name, text in ANNOTATOR_STRATEGIES.items())
    user = f"Conversation so far:\n{render_transcript(list(context))}\n\nReply to label: {reply.strip()}"
    return [
        Message(role="system", content=_system("annotator").format(strategies=strategies)),
        Message(role="user", content=user),
    ]


def annotator_schema() -> dict[str, Any]:
    """The annotator's reply schema: one to four strategy names from :data:`ANNOTATOR_STRATEGIES`.

    Examples:
        >>> annotator_schema()["properties"]["strategies"]["maxItems"]
        4
    """
    return {
        "type": "object",
        "properties": {
            "strategies": {
                "type": "array",
                "items": {"type": "string", "enum": list(ANNOTATOR_STRATEGIES)},
                "minItems": 1,
                "maxItems": 4,
            }
        },
        "required": ["strategies"],
        "additionalProperties": False,
    }


def parse_annotation(text: str) -> list[str]:
    """Parse an annotator reply into strategy names.

    Raises:
        ValueError: not JSON, or a name outside :data:`ANNOTATOR_STRATEGIES`.

    Examples:
        >>> parse_annotation('{"strategies": ["Question", "Information"]}')
        ['Question', 'Information']
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"annotation is not valid JSON ({exc.msg})") from None
    names = data.get("strategies") if isinstance(data, dict) else None
    if not isinstance(names, list) or not names:
        raise ValueError("strategies: expected a non-empty list")
    for i, name in enumerate(names):
        if name not in ANNOTATOR_STRATEGIES:
            raise ValueError(f"strategies[{i}]: unknown strategy {name!r}")
    return list(names)


def candidate_messages(context: Sequence[Message]) -> list[Message]:
    """A candidate replier's prompt: a supporter's system prompt, then the conversation so far.

    Examples:
        >>> [m.role for m in candidate_messages([Message(role="user", content="I lost my job.")])]
        ['system', 'user']
    """
    return [Message(role="system", content=_system("candidate")), *[m for m in context if m.role != "system"]]


def pair_judge_messages(context: Sequence[Message], reply_a: str, reply_b: str) -> list[Message]:
    """A pair judge's prompt: the conversation so far and two candidate replies, ``A`` and ``B``.

    Examples:
        >>> msgs = pair_judge_messages([Message(role="user", content="I lost my job.")], "Oh no.", "Tell me more.")
        >>> "Reply A: Oh no." in msgs[1].content
        True
    """
    user = (
        f"Conversation so far:\n{render_transcript(list(context))}\n\n"
        f"Reply A: {reply_a.strip()}\n\nReply B: {reply_b.strip()}\n\nWhich reply is better?"
    )
    return [Message(role="system", content=_system("pair_judge")), Message(role="user", content=user)]


def pair_judge_schema() -> dict[str, Any]:
    """A pair judge's reply schema: ``{"better": "A" | "B" | "tie", "reason": str}`` (bounded).

    Examples:
        >>> pair_judge_schema()["properties"]["better"]["enum"]
        ['A', 'B', 'tie']
    """
    return {
        "type": "object",
        "properties": {
            "better": {"type": "string", "enum": ["A", "B", "tie"]},
            "reason": {"type": "string", "maxLength": 160},
        },
        "required": ["better", "reason"],
        "additionalProperties": False,
    }


def parse_pair_verdict(text: str) -> str:
    """Parse a pair judge's reply into ``"A"``, ``"B"`` or ``"tie"``.

    Raises:
        ValueError: not JSON, or ``better`` is not one of the three.

    Examples:
        >>> parse_pair_verdict('{"better": "B", "reason": "more specific"}')
        'B'
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"verdict is not valid JSON ({exc.msg})") from None
    better = data.get("better") if isinstance(data, dict) else None
    if better not in ("A", "B", "tie"):
        raise ValueError("better: expected A, B or tie")
    return str(better)
