"""EQ-Bench 3 as the benchmark defines it: its scenarios and templates, and the respondent's side.

EQ-Bench 3 (Sam Paech, 2025, MIT; ``eqbench3/`` in the data directory) has 46 scenarios of four
kinds, told apart by scenario id as in the benchmark's own code:

- **role-play** (most ids): each user turn is wrapped in the master prompt, which asks for three
  sections ("I'm thinking & feeling", "They're thinking & feeling", "My response"); after the last
  turn the respondent is asked to debrief out of character;
- **message drafting** (ids 201-209): sections "Perspective-taking", "Draft brainstorming", "Draft",
  then the debrief;
- **analysis** (ids 401-420): one turn, a transcript to analyse, no debrief;
- **direct** (ids 8, 10, 12, 14; none in the current prompts file): plain turns, then the debrief.

This module reads the benchmark's files and plays the respondent's side (the turn messages, the
sections of a reply). Its judge, the rubric and pairwise prompts and their scoring, is
:mod:`care_lab.evals.eqbench3_judge`; the runner is :mod:`care_lab.evals.eqbench3_run`.

Examples:
    >>> parse_sections("roleplay", "# I'm thinking & feeling\\nUneasy.\\n# They're thinking & feeling\\nHurt."
    ...                "\\n# My response\\nLet's talk.\\n--")["response"]
    "Let's talk."
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from care_sdk.errors import InputError

__all__ = [
    "MIN_REPLY_CHARS",
    "EqBench3Data",
    "Kind",
    "Scenario",
    "load_eqbench3",
    "parse_sections",
    "scenario_kind",
    "turn_message",
]

Kind = Literal["roleplay", "drafting", "analysis", "direct"]
"""A scenario's kind, which decides its respondent template, its judge template and its debrief."""

# Scenario ids by kind, as in the benchmark's utils/constants.py.
_DIRECT_IDS = frozenset({"8", "10", "12", "14"})
_DRAFTING_IDS = frozenset(str(i) for i in range(201, 210))
_ANALYSIS_IDS = frozenset(str(i) for i in range(401, 421))

MIN_REPLY_CHARS = 100
"""A transcript is judged only if at least one respondent turn has this many characters (the
benchmark's completeness check, with incomplete responses allowed as in its default)."""

# Section headings, as in the benchmark's core/conversation.py (straight or curly apostrophes).
_SECTION_PATTERNS: dict[str, dict[str, str]] = {
    "roleplay": {
        "thinking_feeling": r"#\s*I[’']m thinking & feeling\s*\n([\s\S]*?)(?=#|\Z)",
        "their_thinking_feeling": r"#\s*They[’']re thinking & feeling\s*\n([\s\S]*?)(?=#|\Z)",
        "response": r"#\s*My response\s*\n([\s\S]*?)(?=--|\Z)",
    },
    "drafting": {
        "perspective_taking": r"#\s*Perspective[- ]taking\s*\n([\s\S]*?)(?=#|\Z)",
        "draft_brainstorming": r"#\s*Draft brainstorming\s*\n([\s\S]*?)(?=#|\Z)",
        "draft": r"#\s*Draft\s*\n([\s\S]*?)(?=--|\Z)",
    },
}
_FILES = {
    "prompts": "scenario_prompts.txt",
    "notes": "scenario_notes.txt",
    "debrief": "debrief_prompt.txt",
    "master_roleplay": "scenario_master_prompt.txt",
    "master_drafting": "scenario_master_prompt_message_drafting.txt",
    "master_analysis": "scenario_master_prompt_analysis.txt",
    "rubric_prompt": "rubric_scoring_prompt.txt",
    "rubric_prompt_analysis": "rubric_scoring_prompt_analysis.txt",
    "rubric_criteria": "rubric_scoring_criteria.txt",
    "rubric_criteria_analysis": "rubric_scoring_criteria_analysis.txt",
    "pairwise": "pairwise_prompt_eqbench3.txt",
    "pairwise_analysis": "pairwise_prompt_eqbench3_analysis.txt",
}


def scenario_kind(scenario_id: str) -> Kind:
    """The kind of a scenario id, as the benchmark decides it.

    Examples:
        >>> scenario_kind("1"), scenario_kind("208"), scenario_kind("405")
        ('roleplay', 'drafting', 'analysis')
    """
    if scenario_id in _ANALYSIS_IDS:
        return "analysis"
    if scenario_id in _DRAFTING_IDS:
        return "drafting"
    if scenario_id in _DIRECT_IDS:
        return "direct"
    return "roleplay"


@dataclass(frozen=True)
class Scenario:
    """One EQ-Bench 3 scenario: its canned user turns and how it is run and judged.

    Examples:
        >>> s = Scenario(id="405", category="Analytical Interpretation", title="Flirtation", prompts=("...",))
        >>> s.kind, s.debriefed
        ('analysis', False)
    """

    id: str
    """The benchmark's scenario id."""
    category: str
    """E.g. "Work Dilemma", "Mediation – School", "Analytical Interpretation"."""
    title: str
    """The scenario's title."""
    prompts: tuple[str, ...]
    """The canned user turns, in order."""

    @property
    def kind(self) -> Kind:
        """Role-play, message drafting, analysis or direct."""
        return scenario_kind(self.id)

    @property
    def debriefed(self) -> bool:
        """Whether the respondent is asked to debrief after the last turn (all but analysis)."""
        return self.kind != "analysis"


@dataclass(frozen=True)
class EqBench3Data:
    """The benchmark's files: scenarios, judging notes and templates.

    Examples:
        >>> data = EqBench3Data(root=Path("."), scenarios=(), notes={}, templates={}, criteria={})
        >>> data.scenario_ids
        []
    """

    root: Path
    """The ``eqbench3`` directory."""
    scenarios: tuple[Scenario, ...]
    """In file order."""
    notes: dict[str, str]
    """Judging notes by scenario id (what a high-EQ answer does)."""
    templates: dict[str, str]
    """The respondent and judge templates by name (the keys of the benchmark's file table)."""
    criteria: dict[str, tuple[str, ...]]
    """Rubric criteria: ``standard`` and ``analysis``."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Scenarios left out, with where and why: a header without a ``####### PromptN`` line (the
    benchmark's own parser skips it too; in the published file, scenario 409)."""

    @property
    def scenario_ids(self) -> list[str]:
        """The scenario ids, in file order."""
        return [s.id for s in self.scenarios]

    @property
    def files(self) -> list[Path]:
        """Every file read, for the report's data hashes."""
        return [self.root / name for name in _FILES.values()]

    def select(self, ids: Sequence[str] | None = None, limit: int | None = None) -> list[Scenario]:
        """The scenarios with the given ids (in file order), or the first ``limit``; unknown ids are an error."""
        chosen = list(self.scenarios)
        if ids:
            unknown = sorted(set(ids) - set(self.scenario_ids))
            if unknown:
                raise InputError(f"no scenario {', '.join(unknown)}", location=str(self.root / _FILES["prompts"]))
            chosen = [s for s in chosen if s.id in set(ids)]
        return chosen[:limit] if limit is not None else chosen


def _parse_prompts(path: Path) -> tuple[tuple[Scenario, ...], dict[str, str]]:
    """The scenarios, and the ones without a ``####### PromptN`` line (the benchmark skips them too)."""
    scenarios: list[Scenario] = []
    skipped: dict[str, str] = {}
    header: tuple[str, str, str, int] | None = None
    prompts: list[str] = []
    lines: list[str] | None = None

    def close_prompt() -> None:
        if lines is not None and "\n".join(lines).strip():
            prompts.append("\n".join(lines).strip())

    def close_scenario() -> None:
        if header is None:
            return
        if prompts:
            scenarios.append(Scenario(id=header[0], category=header[1], title=header[2], prompts=tuple(prompts)))
        else:
            skipped[header[0]] = f"{path.name}:line {header[3]}: no '####### PromptN' line"

    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if re.match(r"^########\s", line):
            close_prompt()
            close_scenario()
            fields = [f.strip() for f in line[8:].split("|")]
            if not fields[0] or any(s.id == fields[0] for s in scenarios) or fields[0] in skipped:
                raise InputError(f"missing or repeated scenario id in {line!r}", location=f"{path}:line {number}")
            header = (fields[0], fields[1] if len(fields) > 1 else "", fields[2] if len(fields) > 2 else "", number)
            prompts, lines = [], None
        elif re.match(r"^#######\s*Prompt\d+", line):
            if header is None:
                raise InputError("a prompt before any scenario header", location=f"{path}:line {number}")
            close_prompt()
            lines = []
        elif lines is not None:
            lines.append(raw.rstrip())
    close_prompt()
    close_scenario()
    if not scenarios:
        raise InputError("no scenarios", location=str(path))
    return tuple(scenarios), skipped


def _parse_notes(path: Path) -> dict[str, str]:
    notes: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^#\s+(\S+)\s*$", raw)
        if match:
            current = notes.setdefault(match.group(1), [])
        elif current is not None:
            current.append(raw)
    return {k: "\n".join(v).strip() for k, v in notes.items()}


def load_eqbench3(root: str | Path) -> EqBench3Data:
    """Read the benchmark's files from its directory (``<data dir>/eqbench3``).

    Raises:
        InputError: a file is missing, or the prompts file is malformed (naming the file and line).

    Examples:
        >>> import tempfile
        >>> try:
        ...     load_eqbench3(tempfile.mkdtemp())
        ... except InputError as exc:
        ...     print(str(exc).endswith("scenario_prompts.txt: no such file"))
        True
    """
    root = Path(root)
    for name in _FILES.values():
        if not (root / name).is_file():
            raise InputError("no such file", location=str(root / name))
    text = {key: (root / name).read_text(encoding="utf-8") for key, name in _FILES.items()}

    def criteria(key: str) -> tuple[str, ...]:
        names = tuple(line.strip() for line in text[key].splitlines() if line.strip() and not line.startswith("#"))
        if not names:
            raise InputError("no criteria", location=str(root / _FILES[key]))
        return names

    scenarios, skipped = _parse_prompts(root / _FILES["prompts"])
    return EqBench3Data(
        root=root,
        scenarios=scenarios,
        skipped=skipped,
        notes=_parse_notes(root / _FILES["notes"]),
        templates={k: v for k, v in text.items() if k not in ("prompts", "notes")},
        criteria={"standard": criteria("rubric_criteria"), "analysis": criteria("rubric_criteria_analysis")},
    )


def turn_message(data: EqBench3Data, scenario: Scenario, prompt: str) -> str:
    """The user message of one turn: the canned prompt inside its kind's master template (direct: as is).

    Examples:
        >>> data = EqBench3Data(Path("."), (), {}, {"master_analysis": "[T]{scenario_prompt}[/T]"}, {})
        >>> turn_message(data, Scenario("401", "Analytical Interpretation", "t", ("x",)), "x")
        '[T]x[/T]'
    """
    if scenario.kind == "direct":
        return prompt
    return data.templates[f"master_{scenario.kind}"].format(scenario_prompt=prompt)


def parse_sections(kind: Kind, reply: str) -> dict[str, str]:
    """The sections of a role-play or drafting reply (empty where a heading is missing), plus ``raw``.

    Analysis and direct replies have no sections: only ``raw``.

    Examples:
        >>> parse_sections("drafting", "no headings")["draft"]
        ''
    """
    patterns = _SECTION_PATTERNS.get(kind)
    parsed = {"raw": reply}
    for key, pattern in (patterns or {}).items():
        match = re.search(pattern, reply, flags=re.IGNORECASE | re.DOTALL)
        parsed[key] = match.group(1).strip() if match else ""
    return parsed
