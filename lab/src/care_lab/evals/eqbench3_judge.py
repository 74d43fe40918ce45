"""EQ-Bench 3's judge: its rubric and pairwise prompts, the replies' parsing, its scoring.

The judge scores a finished transcript on the benchmark's criteria, 0-20 each
(:func:`rubric_prompt`, :func:`parse_rubric_scores`); a scenario's score is the mean of its
"higher is better" criteria (:func:`task_rubric_score`), and the run's rubric score is the mean
over scenarios, times 5 (0-100). In pairwise judging the judge compares two respondents'
transcripts criterion by criterion, naming a winner with one to five "+" (:func:`pairwise_prompt`,
:func:`plus_tally`, :func:`pairwise_fraction`). The scenarios and the respondent's side are
:mod:`care_lab.evals.eqbench3`; the runner is :mod:`care_lab.evals.eqbench3_run`.

Examples:
    >>> plus_tally({"chain_of_thought_reasoning": "...", "pragmatic_ei": "A0493++", "warmth": "A0488+"})
    (1.0, 2, 1)
    >>> task_rubric_score({"demonstrated_empathy": 15.0, "warmth": 2.0})
    15.0
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from care_lab.evals.eqbench3 import EqBench3Data, Kind, Scenario

__all__ = [
    "pairwise_criteria",
    "pairwise_fraction",
    "pairwise_prompt",
    "pairwise_schema",
    "parse_pairwise",
    "parse_rubric_scores",
    "plus_tally",
    "rubric_prompt",
    "rubric_schema",
    "task_rubric_score",
]

# Character limits used when transcripts are shown to the pairwise judge (utils/constants.py).
_SECTION_LIMITS: dict[str, dict[str, int]] = {
    "roleplay": {"thinking_feeling": 2200, "their_thinking_feeling": 1600, "response": 1600},
    "drafting": {"perspective_taking": 2200, "draft_brainstorming": 1600, "draft": 1600},
}
_RAW_LIMIT = 4000
_DEBRIEF_LIMIT = 4000
_ANALYSIS_LIMIT = 6000
_MAX_PLUS_DIFF = 30
_HEADINGS = {
    "thinking_feeling": "# I'm thinking & feeling",
    "their_thinking_feeling": "# They're thinking & feeling",
    "response": "# My response",
    "perspective_taking": "# Perspective-taking",
    "draft_brainstorming": "# Draft brainstorming",
    "draft": "# Draft",
}
# The criteria averaged into a scenario's rubric score (core/benchmark.py: calculate_final_rubric_score).
_SCORED_CRITERIA = frozenset(
    {
        "demonstrated_empathy",
        "pragmatic_ei",
        "depth_of_insight",
        "social_dexterity",
        "emotional_reasoning",
        "message_tailoring",
        "theory_of_mind",
        "subtext_identification",
        "intellectual_grounding",
        "correctness",
    }
)
_REASONING = "chain_of_thought_reasoning"
_RESPONDENTS = ("A0493", "A0488")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "... [truncated]"


def _assistant_text(kind: Kind, sections: Mapping[str, str], *, for_pairwise: bool) -> str:
    """A respondent turn as the judge sees it: its sections re-rendered (role-play, drafting) or raw."""
    if kind in _SECTION_LIMITS:
        limits = _SECTION_LIMITS[kind]
        if for_pairwise:
            blocks = [(_HEADINGS[k], _cut(sections.get(k, ""), limits[k])) for k in limits]
            return "\n\n".join([*(part for block in blocks for part in block), "--"])
        return "\n\n".join(f"{_HEADINGS[k]}\n{sections.get(k, '')}" for k in limits) + "\n\n--"
    raw = sections.get("raw", "")
    return _cut(raw, _ANALYSIS_LIMIT if kind == "analysis" else _RAW_LIMIT) if for_pairwise else raw


def _transcript(
    kind: Kind, messages: Sequence[Mapping[str, str]], parsed: Sequence[Mapping[str, str]], *, for_pairwise: bool
) -> str:
    turns = iter(parsed)
    parts = []
    for message in messages:
        if message["role"] == "user":
            role, body = "User", message["content"]
        else:
            role, body = "Assistant", _assistant_text(kind, next(turns), for_pairwise=for_pairwise)
        if for_pairwise:
            parts.append(f"{role}:\n{body.replace('*', '').replace('#', '')}\n---")
        else:
            parts.append(f"{role}:\n{body}\n")
    return "\n".join(parts) if for_pairwise else "---\n".join(parts)


def rubric_prompt(
    data: EqBench3Data,
    scenario: Scenario,
    messages: Sequence[Mapping[str, str]],
    parsed: Sequence[Mapping[str, str]],
    debrief: str | None,
) -> str:
    """The rubric judge's prompt for one finished transcript (not truncated, as the benchmark's default).

    Examples:
        >>> from pathlib import Path
        >>> data = EqBench3Data(Path("."), (), {}, {"rubric_prompt_analysis": "{transcript}|{output_format}"},
        ...                     {"analysis": ("depth_of_insight",)})
        >>> s = Scenario("401", "Analytical Interpretation", "t", ("x",))
        >>> print(rubric_prompt(data, s, [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
        ...                     [{"raw": "y"}], None))
        User:
        x
        ---
        Assistant:
        y
        |{
          "chain_of_thought_reasoning": "detailed chain of thought reasoning about the coming scoring decisions",
          "depth_of_insight": 0-20
        }
    """
    analysis = scenario.kind == "analysis"
    criteria = data.criteria["analysis" if analysis else "standard"]
    shape: dict[str, Any] = {_REASONING: "detailed chain of thought reasoning about the coming scoring decisions"}
    shape.update({c: 0 for c in criteria})
    output_format = json.dumps(shape, indent=2).replace(": 0", ": 0-20")
    fields = {
        "transcript": _transcript(scenario.kind, messages, parsed, for_pairwise=False),
        "output_format": output_format,
    }
    if not analysis:
        fields["debrief"] = debrief or ""
    return data.templates["rubric_prompt_analysis" if analysis else "rubric_prompt"].format(**fields)


def rubric_schema(criteria: Sequence[str], max_reasoning_chars: int = 2000) -> dict[str, Any]:
    """The rubric verdict's JSON schema: the reasoning first, then each criterion as an integer 0-20.

    Examples:
        >>> list(rubric_schema(["warmth"])["properties"])
        ['chain_of_thought_reasoning', 'warmth']
    """
    properties: dict[str, Any] = {_REASONING: {"type": "string", "minLength": 1, "maxLength": max_reasoning_chars}}
    properties.update({c: {"type": "integer", "minimum": 0, "maximum": 20} for c in criteria})
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _json_object(text: str, what: str) -> dict[str, Any]:
    start, end = text.find("{"), text.rfind("}")
    try:
        data = json.loads(text[start : end + 1] if 0 <= start < end else text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} is not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} is not a JSON object")
    return data


def parse_rubric_scores(text: str, criteria: Sequence[str]) -> dict[str, float]:
    """The judge's 0-20 score for every criterion; raises ``ValueError`` naming a missing or bad one.

    Examples:
        >>> parse_rubric_scores('{"chain_of_thought_reasoning": "..", "warmth": 12}', ["warmth"])
        {'warmth': 12.0}
        >>> parse_rubric_scores('{"warmth": 25}', ["warmth"])
        Traceback (most recent call last):
        ...
        ValueError: rubric verdict: warmth: 25 is outside 0-20
    """
    data = _json_object(text, "rubric verdict")
    scores: dict[str, float] = {}
    for name in criteria:
        value = data.get(name)
        if isinstance(value, str):  # "15/20", as the benchmark's parser accepts
            match = re.search(r"\b(\d+(?:\.\d+)?)\b", value)
            value = float(match.group(1)) if match else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"rubric verdict: {name}: missing or not a number")
        if not 0 <= value <= 20:
            raise ValueError(f"rubric verdict: {name}: {value} is outside 0-20")
        scores[name] = float(value)
    return scores


def task_rubric_score(scores: Mapping[str, float]) -> float | None:
    """A scenario's rubric score (0-20): the mean of its "higher is better" criteria, as the benchmark averages.

    Style descriptors (warmth, moralising, ...) are reported but not averaged in.

    Examples:
        >>> task_rubric_score({"demonstrated_empathy": 12, "pragmatic_ei": 14, "warmth": 20})
        13.0
    """
    kept = [v for k, v in scores.items() if k in _SCORED_CRITERIA]
    return sum(kept) / len(kept) if kept else None


def pairwise_criteria(template: str) -> tuple[str, ...]:
    """The criteria a pairwise template asks about: the keys of its JSON answer, reasoning left out.

    Examples:
        >>> template = '{\\n  "chain_of_thought_reasoning": "..",\\n  "warmth": "winner & disparity rating",\\n}'
        >>> pairwise_criteria(template)
        ('warmth',)
    """
    return tuple(re.findall(r'"(\w+)":\s*"winner & disparity rating"', template))


def pairwise_prompt(
    data: EqBench3Data,
    scenario: Scenario,
    first: Mapping[str, Any],
    second: Mapping[str, Any],
) -> str:
    """The pairwise judge's prompt: ``first`` as respondent A0493, ``second`` as A0488.

    Each side is a transcript record with ``messages``, ``parsed`` and ``debrief``. Transcripts
    are shown as the benchmark shows them to its pairwise judge: sections cut to their character
    limits, ``*`` and ``#`` removed, the debrief cut to 4,000 characters.

    Examples:
        >>> from pathlib import Path
        >>> templates = {"pairwise_analysis": "{response_A} vs {response_B}"}
        >>> data = EqBench3Data(Path("."), (), {"401": "notes"}, templates, {})
        >>> side = lambda t: {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": t}],
        ...                   "parsed": [{"raw": t}], "debrief": None}
        >>> pairwise_prompt(data, Scenario("401", "Analytical Interpretation", "t", ("x",)), side("#a"), side("b"))
        'a vs b'
    """
    note = data.notes.get(scenario.id, "[No scenario notes available]")
    if scenario.kind == "analysis":

        def analysis(side: Mapping[str, Any]) -> str:
            raw = next((m["content"] for m in side["messages"] if m["role"] == "assistant"), "")
            return _cut(raw.replace("*", "").replace("#", ""), _ANALYSIS_LIMIT)

        fields = {
            "{scenario_notes}": note,
            "{transcript_being_analysed}": scenario.prompts[0].strip(),
            "{response_A}": analysis(first),
            "{response_B}": analysis(second),
        }
        template = data.templates["pairwise_analysis"]
    else:

        def debrief(side: Mapping[str, Any]) -> str:
            text = side.get("debrief")
            return _cut(text.replace("*", "").replace("#", ""), _DEBRIEF_LIMIT) if text else "[No Debrief Provided]"

        def history(side: Mapping[str, Any]) -> str:
            return _transcript(scenario.kind, side["messages"], side["parsed"], for_pairwise=True)

        fields = {
            "{scenario_notes}": note,
            "{conversation_history_A}": history(first),
            "{conversation_history_B}": history(second),
            "{debrief_A}": debrief(first),
            "{debrief_B}": debrief(second),
        }
        template = data.templates["pairwise"]
    for key, value in fields.items():
        template = template.replace(key, value)
    return template


def pairwise_schema(criteria: Sequence[str], max_reasoning_chars: int = 2000) -> dict[str, Any]:
    """The pairwise verdict's JSON schema: reasoning, then a winner code with one to five "+" per criterion.

    Examples:
        >>> pairwise_schema(["warmth"])["properties"]["warmth"]["enum"][:2]
        ['A0493+', 'A0493++']
    """
    choices = [f"{code}{'+' * n}" for code in _RESPONDENTS for n in range(1, 6)]
    properties: dict[str, Any] = {_REASONING: {"type": "string", "minLength": 1, "maxLength": max_reasoning_chars}}
    properties.update({c: {"type": "string", "enum": choices} for c in criteria})
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def parse_pairwise(text: str, criteria: Sequence[str]) -> dict[str, str]:
    """The winner and margin the judge gives each criterion; raises ``ValueError`` naming a missing one.

    Examples:
        >>> parse_pairwise('{"warmth": "A0488+++"}', ["warmth"])
        {'warmth': 'A0488+++'}
        >>> parse_pairwise('{"warmth": "a draw"}', ["warmth"])
        Traceback (most recent call last):
        ...
        ValueError: pairwise verdict: warmth: no winner code (A0493 or A0488) in 'a draw'
    """
    data = _json_object(text, "pairwise verdict")
    verdict: dict[str, str] = {}
    for name in criteria:
        value = data.get(name)
        if not isinstance(value, str):
            raise ValueError(f"pairwise verdict: {name}: missing or not a string")
        if not any(code in value for code in _RESPONDENTS):
            raise ValueError(f"pairwise verdict: {name}: no winner code (A0493 or A0488) in {value!r}")
        verdict[name] = value
    return verdict


def plus_tally(verdict: Mapping[str, Any]) -> tuple[float, int, int]:
    """``(outcome for A0493, pluses for A0493, pluses for A0488)``: the benchmark's interpretation.

    Every criterion adds its "+" count to the side it names; the side with more pluses wins
    (outcome 1.0 or 0.0), equal tallies tie (0.5).

    Examples:
        >>> plus_tally({"a": "A0488+++++", "b": "A0493++"})
        (0.0, 2, 5)
    """
    first = second = 0
    for key, value in verdict.items():
        if key == _REASONING or not isinstance(value, str):
            continue
        if _RESPONDENTS[0] in value:
            first += value.count("+")
        elif _RESPONDENTS[1] in value:
            second += value.count("+")
    return (1.0 if first > second else 0.0 if second > first else 0.5), first, second


def pairwise_fraction(outcome: float, plus_for: int, plus_against: int) -> float:
    """The benchmark's margin-weighted result of one comparison for a side: 0.5 ± |plus diff| / 60.

    Examples:
        >>> pairwise_fraction(1.0, 12, 3), pairwise_fraction(0.0, 3, 12), pairwise_fraction(0.5, 4, 4)
        (0.65, 0.35, 0.5)
    """
    margin = min(abs(plus_for - plus_against) / _MAX_PLUS_DIFF, 1.0) / 2 + 0.5
    return 0.5 if outcome == 0.5 else round(margin if outcome == 1.0 else 1 - margin, 6)
