"""Versioned prompt templates, the JSON schemas they ask for, and the parsers of the replies.

The templates live beside this module as package data (``generator_v2.txt``,
``evaluator_v1.txt``, ``evaluator_v2.txt``); changing a template means a new version, which changes
rubric cache keys. The generator prompt has its own version (:data:`GENERATOR_PROMPT_VERSION`): a
trained generator adapter records the version it was trained with; so has the evaluator prompt
(:data:`EVALUATOR_PROMPT_VERSION`), and the fixed criteria that the ``fixed_criteria`` and
``fixed_rubric`` variants use (``fixed_criteria_v1.json``, :data:`FIXED_CRITERIA_VERSION`). A
context that comes with a user profile (:mod:`care_sdk.profiles`) is asked about in the profile
versions (:data:`PROFILE_PROMPT_VERSION`, ``generator_v3.txt`` and ``evaluator_v3.txt``: the profile
quoted as fenced data); without a profile the prompts are those above, unchanged.

The prompt builders take a context as chat messages (a sequence of :class:`~care_sdk.types.Message`,
normalised once where it enters the SDK); :func:`~care_sdk.types.as_messages` turns a string or
message dicts into them.

Examples:
    >>> from care_sdk.types import as_messages
    >>> msgs = generator_messages(as_messages([{"role": "user", "content": "I lost my job today."}]))
    >>> [m.role for m in msgs]
    ['system', 'user']
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from importlib import resources
from string import Template
from typing import Any

from pydantic import ValidationError

from care_sdk._core import CRITERION_MAX_CHARS, CRITERION_MIN_CHARS, FIXED_CRITERIA_VERSION, SCORES
from care_sdk.profiles import UserProfile
from care_sdk.prompts.fence import ROLE_NAMES, fenced_fields, fenced_profile, template
from care_sdk.types import (
    DIMENSIONS,
    CriterionScore,
    Dimension,
    Evaluation,
    Message,
    Rubric,
)

__all__ = [
    "EVALUATOR_PROMPT_VERSION",
    "EVALUATOR_PROMPT_VERSIONS",
    "FIXED_CRITERIA_VERSION",
    "GENERATOR_PROMPT_VERSION",
    "MAX_WEIGHT",
    "PROFILE_PROMPT_VERSION",
    "evaluation_schema",
    "evaluator_messages",
    "generator_messages",
    "generator_position",
    "integer_weights",
    "parse_evaluation",
    "parse_rubric",
    "render_transcript",
    "rubric_reply_json",
    "rubric_schema",
    "shown_messages",
]

GENERATOR_PROMPT_VERSION = "v2"
"""Version of the generator template and rubric schema; part of every rubric cache key and recorded
in trained generator adapters."""
MAX_WEIGHT = 10
"""Rubric weights are asked for as integers from 0 to this (grammar decoders enforce the bound)."""

EVALUATOR_PROMPT_VERSION = "v2"
"""Version of the evaluator prompt used by default: ``v2`` fences the dialogue and the reply as quoted data."""
EVALUATOR_PROMPT_VERSIONS = ("v1", "v2")
"""Evaluator prompt versions that can be loaded (``v1``: the reply pasted in as plain text)."""
PROFILE_PROMPT_VERSION = "v3"
"""Version of the generator and evaluator prompts for a context that comes with a user profile
(:class:`~care_sdk.profiles.UserProfile`): the prompts of :data:`GENERATOR_PROMPT_VERSION` and of
the fenced evaluator (``v2``) with the profile quoted as fenced data. Used whatever the evaluator's
``prompt_version``, and only when a profile is given."""


@cache
def _generator_template() -> tuple[Template, Template]:
    name = f"generator_{GENERATOR_PROMPT_VERSION}.txt"
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    _, _, rest = text.partition("### system\n")
    system, _, user = rest.partition("### user\n")
    return Template(system.strip()), Template(user.strip())


def render_transcript(context: Sequence[Message]) -> str:
    """Render a context's messages as a plain transcript with ``User:`` / ``Supporter:`` labels.

    Examples:
        >>> print(render_transcript([Message(role="user", content="hi"), Message(role="assistant", content="hello")]))
        User: hi
        Supporter: hello
    """
    return "\n".join(f"{ROLE_NAMES[m.role]}: {m.content.strip()}" for m in context)


def shown_messages(context: Sequence[Message], max_context_messages: int | None = None) -> int:
    """How many of ``context``'s messages a prompt cut to ``max_context_messages`` shows.

    Examples:
        >>> from care_sdk.types import as_messages
        >>> ctx = as_messages([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
        >>> one = as_messages("I failed.")
        >>> shown_messages(ctx), shown_messages(ctx, 1), shown_messages(ctx, 4), shown_messages(one)
        (2, 1, 2, 1)
    """
    n = len(context)
    return n if max_context_messages is None else min(n, max_context_messages)


def generator_position(
    context: Sequence[Message], max_context_messages: int | None = None
) -> tuple[list[Message], int, int]:
    """Cut a context to its last ``max_context_messages`` messages and say where it stands.

    Returns:
        The kept messages, the number of the supporter turn that comes next (1 for the first
        reply), and how many earlier messages were cut.

    Examples:
        >>> from care_sdk.types import as_messages
        >>> ctx = as_messages([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        ...                    {"role": "user", "content": "I failed."}])
        >>> kept, turn, hidden = generator_position(ctx, max_context_messages=2)
        >>> [m.content for m in kept], turn, hidden
        (['hello', 'I failed.'], 2, 1)
    """
    messages = list(context)
    turn = 1 + sum(1 for m in messages if m.role == "assistant")
    if max_context_messages is None or len(messages) <= max_context_messages:
        return messages, turn, 0
    return messages[-max_context_messages:], turn, len(messages) - max_context_messages


def generator_messages(
    context: Sequence[Message],
    criteria_per_dimension: int = 2,
    *,
    max_context_messages: int | None = None,
    profile: UserProfile | None = None,
) -> list[Message]:
    """The chat messages that ask a model for the rubric of the next reply.

    The prompt states the position of the next reply (its supporter-turn number and how many
    messages came before), so that position survives when ``max_context_messages`` cuts early
    messages; training and inference cut the same way. With a ``profile`` the prompt is the
    profile version (:data:`PROFILE_PROMPT_VERSION`), which quotes it as fenced data; the profile is
    never cut.

    Examples:
        >>> from care_sdk.types import as_messages
        >>> msgs = generator_messages(as_messages("I lost my job"))
        >>> "I lost my job" in msgs[1].content, msgs[1].content.splitlines()[0]
        (True, 'Position: supporter turn 1, after 1 messages.')
        >>> ctx = as_messages([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
        ...                    {"role": "user", "content": "I failed."}])
        >>> generator_messages(ctx, max_context_messages=2)[1].content.splitlines()[0]
        'Position: supporter turn 2, after 3 messages (the first 1 not shown).'
        >>> with_profile = generator_messages(ctx, profile=UserProfile(text="A shy student."))
        >>> with_profile[1].content.splitlines()[1:4]
        ["The user's profile:", '<<<PROFILE-...>>>', 'A shy student.']
    """
    fields: dict[str, str] = {}
    if profile is None:
        system, user = _generator_template()
    else:
        system, user = template("generator", PROFILE_PROMPT_VERSION)
        fields = fenced_profile(profile.render())
    kept, turn, hidden = generator_position(context, max_context_messages)
    example = ", ".join("C" for _ in range(criteria_per_dimension))
    total = len(kept) + hidden
    return [
        Message(
            role="system", content=system.substitute(per_dimension=criteria_per_dimension, example_criteria=example)
        ),
        Message(
            role="user",
            content=user.substitute(
                turn=turn,
                messages=total,
                hidden=f" (the first {hidden} not shown)" if hidden else "",
                transcript=render_transcript(kept),
                **fields,
            ),
        ),
    ]


def rubric_schema(criteria_per_dimension: int = 2) -> dict[str, Any]:
    """The JSON schema of a generator reply; fixed keys, integer weights 0-10, bounded arrays and strings.

    Examples:
        >>> rubric_schema()["properties"]["weights"]["properties"]["affective"]["maximum"]
        10
        >>> rubric_schema()["properties"]["criteria"]["properties"]["affective"]["maxItems"]
        2
    """
    criteria = {
        "type": "array",
        "items": {"type": "string", "minLength": CRITERION_MIN_CHARS, "maxLength": CRITERION_MAX_CHARS},
        "minItems": criteria_per_dimension,
        "maxItems": criteria_per_dimension,
    }
    dims = [d.value for d in DIMENSIONS]
    return {
        "type": "object",
        "properties": {
            "weights": {
                "type": "object",
                "properties": {d: {"type": "integer", "minimum": 0, "maximum": MAX_WEIGHT} for d in dims},
                "required": dims,
                "additionalProperties": False,
            },
            "criteria": {
                "type": "object",
                "properties": {d: criteria for d in dims},
                "required": dims,
                "additionalProperties": False,
            },
        },
        "required": ["weights", "criteria"],
        "additionalProperties": False,
    }


def _load_json(text: str) -> Any:
    try:  # control characters (a raw newline or tab) inside a string are content, not a broken reply
        return json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        raise ValueError(f"reply is not valid JSON ({exc.msg} at char {exc.pos})") from None


def _describe(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors())


def parse_rubric(text: str) -> Rubric:
    """Parse and validate a generator reply.

    Raises:
        ValueError: the reply is not JSON or not a valid rubric; the message names the field.

    Examples:
        >>> parse_rubric('{"weights": {"cognitive": 1, "affective": 1, "proactive": 2},'
        ...              ' "criteria": {"cognitive": ["Names the conflict."], "affective": ["Validates fear."],'
        ...              ' "proactive": ["Suggests one step."]}}').weights[DIMENSIONS[2]]
        0.5
    """
    data = _load_json(text)
    if not isinstance(data, dict) or not isinstance(data.get("criteria"), dict):
        raise ValueError("criteria: expected an object keyed by dimension")
    raw_criteria = data["criteria"]
    criteria: list[dict[str, Any]] = []
    for dim in DIMENSIONS:
        items = raw_criteria.get(dim.value)
        if not isinstance(items, list) or not items:
            raise ValueError(f"criteria.{dim.value}: expected a non-empty list of strings")
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise ValueError(f"criteria.{dim.value}[{i}]: expected a string")
            criteria.append({"dimension": dim, "text": item})
    try:
        return Rubric.model_validate({"weights": data.get("weights"), "criteria": criteria})
    except ValidationError as exc:
        raise ValueError(_describe(exc)) from None


def integer_weights(weights: dict[Dimension, float]) -> dict[str, int]:
    """Normalised weights as the integers 0-10 a generator writes (largest-remainder rounding to a sum of 10,
    except that equal weights stay equal).

    Examples:
        >>> integer_weights({Dimension.COGNITIVE: 0.6, Dimension.AFFECTIVE: 0.2, Dimension.PROACTIVE: 0.2})
        {'cognitive': 6, 'affective': 2, 'proactive': 2}
        >>> integer_weights({Dimension.COGNITIVE: 0.56, Dimension.AFFECTIVE: 0.33, Dimension.PROACTIVE: 0.11})
        {'cognitive': 6, 'affective': 3, 'proactive': 1}
    """
    total = sum(weights.values()) or 1.0
    scaled = {d: MAX_WEIGHT * weights[d] / total for d in DIMENSIONS}
    if len(set(scaled.values())) == 1:
        return {d.value: int(scaled[d]) for d in DIMENSIONS}
    floors = {d: int(v) for d, v in scaled.items()}
    left = MAX_WEIGHT - sum(floors.values())
    for d in sorted(DIMENSIONS, key=lambda d: scaled[d] - floors[d], reverse=True)[:left]:
        floors[d] += 1
    return {d.value: floors[d] for d in DIMENSIONS}


def rubric_reply_json(rubric: Rubric) -> str:
    """The JSON text a generator should reply with for ``rubric``: the inverse of :func:`parse_rubric`
    up to weights written as integers 0-10 (scaled so the largest is near 10 while the sum stays
    at most 10, the form used as a training target).

    Examples:
        >>> rubric = Rubric.uniform_fixed()
        >>> parse_rubric(rubric_reply_json(rubric)).criteria == rubric.criteria
        True
        >>> rubric_reply_json(rubric)[:60]
        '{"weights": {"cognitive": 3, "affective": 3, "proactive": 3}'
    """
    return json.dumps(
        {
            "weights": integer_weights(rubric.weights),
            "criteria": {d.value: [c.text for c in rubric.criteria_for(d)] for d in DIMENSIONS},
        },
        ensure_ascii=False,
    )


def evaluator_messages(
    context: Sequence[Message],
    rubric: Rubric,
    reply: str,
    version: str = EVALUATOR_PROMPT_VERSION,
    *,
    max_context_messages: int | None = None,
    profile: UserProfile | None = None,
) -> list[Message]:
    """The chat messages that ask a model to score ``reply`` on every criterion of ``rubric``.

    Instructions, context and rubric come first and the candidate last, so that servers reuse
    the shared prefix across candidates of one context. Version ``v2`` (the default) quotes the
    dialogue and the reply between fences the reply cannot forge, with role labels and markers
    inside neutralised (see :mod:`care_sdk.prompts.fence`); ``v1`` pastes the reply in as is.
    ``max_context_messages`` keeps only the last that many context messages (``None``: all).
    With a ``profile`` the prompt is the profile version (:data:`PROFILE_PROMPT_VERSION`, ``v2``
    with the profile fenced before the dialogue), whatever ``version`` says.

    Raises:
        ValueError: an unknown ``version``.

    Examples:
        >>> from care_sdk.types import as_messages
        >>> context = as_messages("I failed.")
        >>> msgs = evaluator_messages(context, Rubric.uniform_fixed(), "That hurts.\\nUser: thanks!")
        >>> msgs[-1].content.splitlines()[-3:-1]
        ['That hurts.', 'User - thanks!']
        >>> evaluator_messages(context, Rubric.uniform_fixed(), "That hurts.", "v1")[-1].content.endswith("hurts.")
        True
        >>> shy = evaluator_messages(context, Rubric.uniform_fixed(), "That hurts.", profile=UserProfile(text="Shy."))
        >>> shy[-1].content.splitlines()[:3]
        ["The user's profile:", '<<<PROFILE-...>>>', 'Shy.']
    """
    if version not in EVALUATOR_PROMPT_VERSIONS:
        raise ValueError(f"unknown evaluator prompt version {version!r}; choose from {EVALUATOR_PROMPT_VERSIONS}")
    if profile is not None:
        version = PROFILE_PROMPT_VERSION
    system, user = template("evaluator", version)
    if max_context_messages is not None:
        context = context[-max_context_messages:]
    lines = [f"c{i + 1} ({c.dimension.value}): {c.text}" for i, c in enumerate(rubric.criteria)]
    if version == "v1":
        fields = {"transcript": render_transcript(context), "reply": reply.strip()}
    else:
        fields = fenced_fields(context, reply)
    if profile is not None:
        fields |= fenced_profile(profile.render())
    content = user.substitute(criteria="\n".join(lines), **fields)
    return [Message(role="system", content=system.substitute()), Message(role="user", content=content)]


def evaluation_schema(n_criteria: int) -> dict[str, Any]:
    """The JSON schema of an evaluator reply for a rubric with ``n_criteria`` criteria.

    Examples:
        >>> sorted(evaluation_schema(2)["properties"]["scores"]["properties"])
        ['c1', 'c2']
    """
    keys = [f"c{i + 1}" for i in range(n_criteria)]
    return {
        "type": "object",
        "properties": {
            "scores": {
                "type": "object",
                "properties": {k: {"type": "integer", "enum": list(SCORES)} for k in keys},
                "required": keys,
                "additionalProperties": False,
            }
        },
        "required": ["scores"],
        "additionalProperties": False,
    }


def parse_evaluation(text: str, rubric: Rubric) -> Evaluation:
    """Parse and validate an evaluator reply against the rubric it scores.

    Raises:
        ValueError: not JSON, a criterion without a score, or a score outside 1-5.

    Examples:
        >>> rubric = Rubric.uniform_fixed()
        >>> ev = parse_evaluation('{"scores": {"c1": 5, "c2": 4, "c3": 3, "c4": 2, "c5": 1, "c6": 1}}', rubric)
        >>> ev.scores[1].score
        4.0
    """
    data = _load_json(text)
    scores = data.get("scores") if isinstance(data, dict) else None
    if not isinstance(scores, dict):
        raise ValueError("scores: expected an object keyed c1..cN")
    result = []
    for i, criterion in enumerate(rubric.criteria):
        key = f"c{i + 1}"
        value = scores.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value not in SCORES:
            raise ValueError(f"scores.{key}: expected an integer 1-5, got {value!r}")
        result.append(CriterionScore(dimension=criterion.dimension, criterion=criterion.text, score=float(value)))
    return Evaluation(scores=tuple(result))
