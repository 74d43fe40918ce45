"""Rubric targets without a teacher model: weights from the reference turn's strategies, criteria
from a documented bank of templates whose slots are filled from the dialogue itself.

For a supporter turn of a strategy-labelled corpus (ESConv), the target rubric is:

- **weights**: proportional to ``n_d + 0.5`` for the reference reply's strategy counts ``n_d``,
  optionally mixed with the turn-position prior of the train split (:func:`~care_lab.data.priorities.position_prior`,
  ``position_prior_weight`` in the config), written as integers 0-10
  (:func:`~care_sdk.prompts.integer_weights`);
- **criteria**: for each dimension, two templates of :data:`CRITERION_TEMPLATES`. Where the
  reference reply used a strategy of that dimension, the templates are those of the strategy (what
  the reference did, said as a checkable criterion); otherwise the dimension's ``general`` ones.
  Slots are filled from the dialogue: ``{topic}`` is the most specific word the user has written in
  the context (highest tf-idf over the corpus's user messages, the latest message counting double),
  ``{emotion}`` and ``{problem}`` come from the corpus annotation of the conversation
  (``emotion_type``, ``problem_type``), which a generator has to infer from the dialogue.

Every target passes :func:`~care_sdk.rubric_checks.check_rubric` (the checks the model's own
rubrics are held to) or is dropped and counted.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from care_lab.data import (
    Loaded,
    StrategyMap,
    SupportDialogue,
    SupportTurn,
    data_dir,
    default_strategy_map,
    load_esconv,
)
from care_lab.data.priorities import POSITION_CAP, position_prior, turn_number
from care_lab.data.roles import OUTPUT_ROLES, require_role, write_roles
from care_lab.training.build_report import BuildReport
from care_lab.training.targets import count_weights
from care_sdk.errors import ConfigError
from care_sdk.prompts import generator_position, rubric_reply_json
from care_sdk.rubric_checks import STOPWORDS, check_rubric, content_words
from care_sdk.types import DIMENSIONS, Criterion, Dimension, Message, Rubric

if TYPE_CHECKING:
    from care_lab.training.config import BuildDataConfig

__all__ = [
    "CRITERION_TEMPLATES",
    "TEMPLATES_VERSION",
    "EsconvSetup",
    "TemplateTargets",
    "build_template_sft",
    "esconv_setup",
]

TEMPLATES_VERSION = "templates-v1"
"""Version of the template bank; recorded in every record built from it."""

CRITERION_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "cognitive": {
        "Question": (
            "Asks one open question about {topic} to learn what the user is facing.",
            "Asks which part of the {problem} weighs on them most right now.",
            "Asks what the user has already tried with {topic}.",
        ),
        "Restatement or Paraphrasing": (
            "Sums up in fresh words what the user said about {topic}.",
            "Checks that it has understood how the {problem} affects them.",
            "Restates the core of the {problem} without copying their words.",
        ),
        "general": (
            "Shows it understood the user's point about {topic}.",
            "Clarifies one detail of the {problem} before moving on.",
            "Connects what the user said about {topic} to how they feel.",
        ),
    },
    "affective": {
        "Reflection of feelings": (
            "Names the user's {emotion} about {topic} directly.",
            "Reflects how heavy the {problem} feels for them.",
            "Puts into words the {emotion} behind what they said about {topic}.",
        ),
        "Self-disclosure": (
            "Shares a brief related experience that shows it relates to the {problem}.",
            "Brings the focus back to the user's {emotion} after sharing.",
        ),
        "Affirmation and Reassurance": (
            "Affirms the user's effort in dealing with {topic}.",
            "Reassures them that {emotion} is understandable given the {problem}.",
            "Recognises a strength the user has shown with {topic}.",
        ),
        "general": (
            "Acknowledges the user's {emotion} without formulaic sympathy.",
            "Shows warmth about what the user shared about {topic}.",
            "Lets the user feel heard about the {problem} before anything else.",
        ),
    },
    "proactive": {
        "Providing Suggestions": (
            "Offers one concrete step the user could take about {topic}.",
            "Frames any suggestion about the {problem} as the user's choice.",
            "Suggests something small and doable for {topic} this week.",
        ),
        "Information": (
            "Gives accurate information that applies to the {problem}.",
            "Points to a resource that fits their situation with {topic}.",
        ),
        "general": (
            "Invites the user to say what might help with {topic}.",
            "Leaves the user room to decide their next step on the {problem}.",
            "Builds on what the user can still control about {topic}.",
        ),
    },
}
"""The criterion templates: per dimension, per strategy of that dimension (canonical ESConv names),
and ``general`` for a dimension the reference reply did not use."""

_EMOTIONS = {"depression": "low mood", "nervousness": "nerves", "pain": "hurt"}
_PROBLEMS = {
    "ongoing depression": "ongoing low mood",
    "job crisis": "trouble at work",
    "breakup with partner": "breakup",
    "problems with friends": "trouble with friends",
    "academic pressure": "pressure at school",
    "conflict with parents": "conflict with their parents",
    "issues with parents": "conflict with their parents",
    "issues with children": "worries about their children",
    "appearance anxiety": "worry about their looks",
    "alcohol abuse": "drinking",
    "procrastination": "putting things off",
    "school bullying": "bullying at school",
    "sleep problems": "sleep problems",
}


_TOKEN = re.compile(r"[a-z][a-z'-]*")
_DETERMINERS = {"my": "their", "our": "their", "his": "his", "her": "her", "their": "their", "the": "the"}
_SUPPORTER_DETERMINERS = {"your": "their", "the": "the"}
_ADJECTIVES_TEXT = """
best good bad new old own first last whole only other same little big next current entire main real
close dear younger older older ex previous former whole late
"""
_ADJECTIVES = frozenset(_ADJECTIVES_TEXT.split())


def _pick(key: str, options: Sequence[str], n: int) -> list[str]:
    """``n`` distinct options, in an order fixed by a hash of ``key`` (stable across runs and machines)."""
    ranked = sorted(options, key=lambda o: hashlib.sha256(f"{key}|{o}".encode()).hexdigest())
    return ranked[:n]


@dataclass
class TemplateTargets:
    """Builds template rubric targets for the supporter turns of a corpus.

    Args:
        dialogues: the dialogues whose user messages give the word statistics (the training split).
        mapping: strategy → dimension mapping.
        criteria_per_dimension: criteria per dimension (at most the templates a strategy has).
        max_context_messages: the context cut the generator is trained with: ``{topic}`` only comes
            from messages it will see.
        position_prior_weight: the share of the turn-position prior (:func:`position_prior` of
            ``dialogues``) in the target weights; 0 leaves the count weights as they are.

    Examples:
        >>> d = SupportDialogue(id="d1", source="demo", messages=[
        ...     {"role": "user", "content": "My landlord wants me out of the flat by Friday."},
        ...     {"role": "assistant", "content": "That is a lot of pressure. Where would you go?"},
        ... ], strategies=[None, ("Reflection of feelings", "Question")],
        ... metadata={"emotion_type": "anxiety", "problem_type": "job crisis"})
        >>> targets = TemplateTargets([d] * 3, StrategyMap.default())  # word statistics: a corpus of 3 copies
        >>> turn = d.supporter_turns()[0]
        >>> rubric = targets.rubric(turn, d)
        >>> [round(rubric.weights[x], 2) for x in DIMENSIONS]
        [0.43, 0.43, 0.14]
        >>> targets.topic(turn)
        'the flat'
        >>> sum("the flat" in c.text for c in rubric.criteria) > 0
        True
    """

    dialogues: Iterable[SupportDialogue]
    mapping: StrategyMap
    criteria_per_dimension: int = 2
    max_context_messages: int | None = None
    position_prior_weight: float = 0.0
    _idf: dict[str, float] = field(init=False, default_factory=dict)
    _prior: dict[int, dict[Dimension, float]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.dialogues = list(self.dialogues)
        if self.position_prior_weight:
            self._prior = position_prior(t for d in self.dialogues for t in d.supporter_turns(self.mapping))
        df: Counter[str] = Counter()
        n = 0
        for dialogue in self.dialogues:
            for message in dialogue.messages:
                if message.role == "user":
                    n += 1
                    df.update(content_words(message.content))
        self._idf = {w: math.log((n + 1) / (c + 1)) for w, c in df.items() if c >= 3}

    def visible(self, turn: SupportTurn) -> list[Message]:
        """The context messages the generator sees for ``turn`` (the same cut as the prompt)."""
        return generator_position(list(turn.context), self.max_context_messages)[0]

    def topic(self, turn: SupportTurn) -> str | None:
        """The most specific thing the user has named before ``turn``, as a short noun phrase seen
        from outside (``my job`` becomes ``their job``); ``None`` when there is none.

        Candidates are words right after a determiner or possessive (``my``, ``the``, ``his`` ...,
        skipping one common adjective; in the supporter's messages ``your`` and ``the``), scored by
        tf-idf over the corpus's user messages, the user's latest message counting double and the
        supporter's messages half; words the corpus has fewer than three times (typos, names)
        are never picked.
        """
        scores: dict[str, float] = defaultdict(float)
        phrases: dict[str, str] = {}
        visible = self.visible(turn)
        last_user = max((i for i, m in enumerate(visible) if m.role == "user"), default=-1)
        for i, message in enumerate(visible):
            # the user's own words first, the latest counting double; the supporter's ("your job") least
            boost = (2.0 if i == last_user else 1.0) if message.role == "user" else 0.5
            determiners = _DETERMINERS if message.role == "user" else _SUPPORTER_DETERMINERS
            words = _TOKEN.findall(message.content.lower())
            for j, word in enumerate(words[:-1]):
                if word not in determiners:
                    continue
                k = j + 1
                adjective = ""
                if words[k] in _ADJECTIVES and k + 1 < len(words):
                    adjective, k = words[k] + " ", k + 1
                noun = words[k]
                if noun in STOPWORDS or noun in _ADJECTIVES or noun not in self._idf or len(noun) < 3:
                    continue
                scores[noun] += boost * self._idf[noun]
                phrases.setdefault(noun, f"{determiners[word]} {adjective}{noun}")
        if not scores:
            return None
        return phrases[max(sorted(scores), key=lambda w: scores[w])]

    def rubric(self, turn: SupportTurn, dialogue: SupportDialogue) -> Rubric:
        """The target rubric of one supporter turn of ``dialogue``."""
        emotion = str(dialogue.metadata.get("emotion_type") or "distress").strip().lower()
        problem = str(dialogue.metadata.get("problem_type") or "situation").strip().lower()
        slots = {
            "topic": self.topic(turn) or "their situation",
            "emotion": _EMOTIONS.get(emotion, emotion),
            "problem": _PROBLEMS.get(problem, problem),
        }
        used: dict[Dimension, list[str]] = {d: [] for d in DIMENSIONS}
        for strategy in turn.strategies or ():
            dim = self.mapping.dimension(strategy) if self.mapping.knows(strategy) else None
            name = self.mapping.canonical(strategy) if self.mapping.knows(strategy) else strategy
            if dim is not None and name not in used[dim]:
                used[dim].append(name)
        criteria = []
        key = f"{turn.dialogue_id}|{turn.index}"
        for dim in DIMENSIONS:
            bank = CRITERION_TEMPLATES[dim.value]
            options: list[str] = []
            for name in used[dim]:
                options += bank.get(name, ())
            if len(options) < self.criteria_per_dimension:
                options += [t for t in bank["general"] if t not in options]
            picked = _pick(f"{key}|{dim.value}", options, self.criteria_per_dimension)
            criteria += [Criterion(dimension=dim, text=t.format(**slots)) for t in picked]
        return Rubric(weights=self.weights(turn), criteria=criteria)

    def weights(self, turn: SupportTurn) -> dict[Dimension, float]:
        """The target weights of ``turn``: its count weights, mixed with the position prior when
        ``position_prior_weight`` is set (a turn number the prior never saw keeps the count weights)."""
        counts = count_weights(turn.counts)
        if not self.position_prior_weight:
            return counts
        prior = self._prior.get(min(turn_number(turn), POSITION_CAP))
        if prior is None:
            return counts
        lam = self.position_prior_weight
        return {d: (1 - lam) * counts[d] + lam * prior[d] for d in DIMENSIONS}

    def build(self, turn: SupportTurn, dialogue: SupportDialogue) -> tuple[Rubric, list[str]]:
        """The target rubric of ``turn`` and the sanity problems it has (an empty list: keep it)."""
        rubric = self.rubric(turn, dialogue)
        visible = self.visible(turn)
        problems = check_rubric(rubric, visible).problems()
        return rubric, problems


@dataclass
class EsconvSetup:
    """What a teacher-free build-data mode starts from: ESConv train/valid loaded, the template targets."""

    mapping: StrategyMap
    """The strategy map."""
    root: Path
    """The data directory."""
    report: BuildReport
    """The report, with the load issues."""
    loaded: dict[str, Loaded[SupportDialogue]]
    """ESConv by split."""
    targets: TemplateTargets
    """Template targets with the train split's word statistics."""


def esconv_setup(config: BuildDataConfig, what: str) -> EsconvSetup:
    """Load ESConv train/valid for a teacher-free build (``what`` names the mode in the error).

    Raises:
        ConfigError: the config lists the ESConv test split.

    Examples:
        >>> from care_lab.training.config import BuildDataConfig
        >>> esconv_setup(BuildDataConfig(output_dir="o", esconv_splits=("test",)), "template targets")
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: esconv_splits: template targets are built from train and valid only; remove 'test'
    """
    if "test" in config.esconv_splits:
        raise ConfigError(f"esconv_splits: {what} are built from train and valid only; remove 'test'")
    mapping = StrategyMap.from_file(config.strategy_map) if config.strategy_map else default_strategy_map()
    root = Path(config.data_dir) if config.data_dir else data_dir()
    report = BuildReport()
    loaded = {}
    for s in config.esconv_splits:
        path = root / "esconv" / f"{s}.jsonl"
        require_role(path, "fit" if s == "train" else "select", what=f"the {s} split of {what}")
        loaded[s] = load_esconv(path, strategy_map=mapping)
    for result in loaded.values():
        report.load_issues += [str(i) for i in result.issues]
    train_dialogues = loaded["train"].records if "train" in loaded else []
    targets = TemplateTargets(
        train_dialogues,
        mapping,
        config.criteria_per_dimension,
        max_context_messages=config.max_context_messages,
        position_prior_weight=config.position_prior_weight,
    )
    return EsconvSetup(mapping, root, report, loaded, targets)


def build_template_sft(config: BuildDataConfig, *, log: Callable[[str], None] = print) -> BuildReport:
    """``care train build-data`` with ``targets: templates``: SFT records from ESConv without a teacher.

    Reads ESConv's ``train`` and ``valid`` splits only (the test split is never read: a config that
    lists it is refused), builds one template target per labelled supporter turn (the word statistics
    come from the train split), drops targets that fail the sanity checks (counted by reason), keeps
    at most ``max_turns`` per split (a seeded sample) and writes ``sft/{train,valid}.jsonl`` and
    ``report.json``, and declares each file's role (``roles.json``).

    Raises:
        ConfigError: the config lists the ESConv test split.
    """
    setup = esconv_setup(config, "template targets")
    mapping, report, loaded, targets = setup.mapping, setup.report, setup.loaded, setup.targets
    out_dir = Path(config.output_dir)
    for split, result in loaded.items():
        dialogues = result.records[: config.max_dialogues] if config.max_dialogues else result.records
        records = []
        for dialogue in dialogues:
            for turn in dialogue.supporter_turns(mapping):
                if not turn.labelled or not turn.context:
                    continue
                report.sft["candidates"] += 1
                if not any(turn.counts.values()):
                    report.sft["skipped: no mapped strategy"] += 1
                    continue
                rubric, problems = targets.build(turn, dialogue)
                blocking = [p for p in problems if "names anything" not in p]
                if blocking:
                    for problem in blocking:
                        report.sft[f"rejected: {problem}"] += 1
                    continue
                report.sft["grounded" if not problems else "not grounded (kept)"] += 1
                records.append(
                    {
                        "split": split,
                        "source": "esconv-templates",
                        "dialogue_id": turn.dialogue_id,
                        "turn_index": turn.index,
                        "context": turn.context_messages(),
                        "reference": turn.reply,
                        "strategies": list(turn.strategies or ()),
                        "counts": {d.value: int(turn.counts.get(d, 0)) for d in DIMENSIONS},
                        "target": rubric_reply_json(rubric),
                        "templates_version": TEMPLATES_VERSION,
                    }
                )
        if config.max_turns is not None and len(records) > config.max_turns:
            random.Random(f"{config.seed}:{split}").shuffle(records)
            records = records[: config.max_turns]
        path = out_dir / "sft" / f"{split}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        report.files[f"sft/{split}.jsonl"] = len(records)
        report.sft[f"kept: {split}"] = len(records)
    write_roles(out_dir, {f"sft/{split}.jsonl": OUTPUT_ROLES.get(split, split) for split in loaded})
    (out_dir / "report.json").write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False), encoding="utf-8")
    log(report.table())
    return report
