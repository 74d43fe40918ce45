"""Evaluator SFT targets without a teacher model: per-criterion scores from what the data says.

``care train build-data`` with ``targets: evaluator`` writes records ``{"context", "rubric",
"reply", "target", "kind", ...}``; ``care train sft`` with ``role: evaluator`` renders each as the
evaluator prompt exactly as :class:`~care_sdk.RubricEvaluator` sends it (same context cut) and
trains on the score JSON. Two sources, both split by conversation:

- **Lend-an-Ear judged replies** (12 systems answering the same 315 turns, each reply scored 1-5
  by the MINT LLM judge on six dimensions). Each reply gets a rubric of six criteria, one per judge
  dimension (:data:`JUDGE_CRITERIA`, with ``{topic}`` filled from the conversation), and each
  criterion's target is the judge's score on its dimension (reversed, ``6 - s``, for the judge's
  negative dimensions ``dismissing_emotions`` and ``self_oriented``). Mapping: cognitive =
  demonstrating understanding, encouraging elaboration; affective = validating emotions, not
  dismissing them; proactive = giving advice (the judge's ``advice_giving`` measures how much
  advice a reply gives), keeping the focus on the user (not self-oriented). Only conversations of
  the ``train`` split (:func:`care_lab.data.splits.lend_an_ear_split`) are used; ``valid`` and ``test`` are held out.
- **ESConv** (train split only): the rubric is the template target of the turn
  (:mod:`care_lab.training.rubric_targets`, what the bundled generator is trained to write).
  Candidates and their targets (:data:`ESCONV_SCORES`): the reference reply scores 4 on the
  criteria of dimensions whose strategy it used (the criteria were written from that strategy) and
  2 on the others; a supporter reply from another conversation scores 1 (every template names this
  user's topic, problem or emotion), 2 on the dimensions its own strategies cover; a generic
  platitude (:data:`PLATITUDES`) scores 2 on affective criteria and 1 elsewhere; an evasive reply
  (:data:`EVASIVE_REPLIES`) scores 1.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from care_lab.data import (
    StrategyMap,
    SupportDialogue,
    SupportTurn,
    load_judged_turns,
    load_lend_an_ear,
)
from care_lab.data.roles import OUTPUT_ROLES, require_role, write_roles
from care_lab.data.splits import lend_an_ear_role, lend_an_ear_split
from care_lab.training.build_report import BuildReport
from care_lab.training.rubric_targets import TemplateTargets, esconv_setup
from care_sdk.types import DIMENSIONS, Criterion, Dimension, Rubric

if TYPE_CHECKING:
    from care_lab.training.config import BuildDataConfig

__all__ = [
    "ESCONV_SCORES",
    "EVASIVE_REPLIES",
    "JUDGE_CRITERIA",
    "PLATITUDES",
    "build_evaluator_sft",
    "esconv_scores",
    "judged_scores",
]

EVALUATOR_TARGETS_VERSION = "evaluator-targets-v1"
"""Version of the target rules; recorded in every record."""

JUDGE_CRITERIA: dict[str, tuple[Dimension, bool, tuple[str, ...]]] = {
    "demonstrating_understanding": (
        Dimension.COGNITIVE,
        False,
        (
            "Shows it understood the user's point about {topic}.",
            "Sums up in fresh words what the user said about {topic}.",
        ),
    ),
    "encouraging_elaboration": (
        Dimension.COGNITIVE,
        False,
        (
            "Asks one open question about {topic} to learn what the user is facing.",
            "Invites the user to say more about {topic}.",
        ),
    ),
    "validating_emotions": (
        Dimension.AFFECTIVE,
        False,
        (
            "Acknowledges the user's feelings about {topic} as understandable.",
            "Puts into words the feelings behind what they said about {topic}.",
        ),
    ),
    "dismissing_emotions": (
        Dimension.AFFECTIVE,
        True,
        (
            "Takes the user's feelings about {topic} seriously instead of minimising them.",
            "Lets the user feel heard about {topic} before anything else.",
        ),
    ),
    "advice_giving": (
        Dimension.PROACTIVE,
        False,
        (
            "Offers one concrete step the user could take about {topic}.",
            "Suggests something the user could do about {topic}.",
        ),
    ),
    "self_oriented": (
        Dimension.PROACTIVE,
        True,
        (
            "Keeps the focus on the user's situation with {topic}, not on the supporter.",
            "Builds on what the user can do about {topic} rather than the supporter's own story.",
        ),
    ),
}
"""Per MINT judge dimension: the CARE dimension, whether the judge's scale is reversed for the
criterion (a negative dimension), and the criterion wordings (one is picked per reply)."""

ESCONV_SCORES: dict[str, tuple[int, int]] = {
    "reference": (4, 2),
    "offcontext": (2, 1),
    "platitude": (2, 1),
    "evasive": (1, 1),
}
"""Per ESConv candidate kind: the target score of a criterion whose dimension the candidate covers,
and of one it does not (the reference and another conversation's reply cover the dimensions of their
own strategies; a platitude covers the affective dimension; an evasive reply none)."""

PLATITUDES = (
    "Everything happens for a reason.",
    "Stay positive and things will work out.",
    "I'm sure it will all be fine in the end.",
    "Don't worry, be happy!",
    "Time heals all wounds.",
    "Just try to look on the bright side.",
    "Others have it much worse, you know.",
    "Keep your chin up!",
    "It is what it is.",
    "Sending good vibes your way!",
)
"""Generic replies that fit any conversation and engage with none."""

EVASIVE_REPLIES = (
    "I don't know.",
    "Okay.",
    "Let's talk about something else.",
    "Hmm.",
    "I'm not sure what you want me to say.",
    "That's your problem, not mine.",
    "Can we change the subject?",
    "Whatever you think.",
)
"""Replies that avoid the user altogether."""


def judged_scores(scores: dict[str, int]) -> list[tuple[str, int]]:
    """The (judge dimension, target score) of each criterion, in rubric order, from a judge's scores.

    Examples:
        >>> judged_scores({"validating_emotions": 5, "encouraging_elaboration": 2,
        ...     "demonstrating_understanding": 4, "advice_giving": 1, "self_oriented": 1, "dismissing_emotions": 2})
        [('demonstrating_understanding', 4), ('encouraging_elaboration', 2), ('validating_emotions', 5), \
('dismissing_emotions', 4), ('advice_giving', 1), ('self_oriented', 5)]
    """
    out = []
    for name, (_, reverse, _) in JUDGE_CRITERIA.items():
        value = int(scores[name])
        out.append((name, 6 - value if reverse else value))
    return out


def esconv_scores(kind: str, rubric: Rubric, covered: set[Dimension]) -> list[int]:
    """Target scores of one ESConv candidate under ``rubric`` (see :data:`ESCONV_SCORES`).

    Examples:
        >>> esconv_scores("reference", Rubric.uniform_fixed(), {Dimension.AFFECTIVE})
        [2, 2, 4, 4, 2, 2]
    """
    if kind == "platitude":
        covered = {Dimension.AFFECTIVE}
    elif kind == "evasive":
        covered = set()
    hit, miss = ESCONV_SCORES[kind]
    return [hit if c.dimension in covered else miss for c in rubric.criteria]


def _covered(turn: SupportTurn) -> set[Dimension]:
    return {d for d, n in turn.counts.items() if n > 0}


def _record(
    split: str, source: str, kind: str, turn: SupportTurn, rubric: Rubric, reply: str, scores: list[int]
) -> dict[str, Any]:
    return {
        "split": split,
        "source": source,
        "kind": kind,
        "dialogue_id": turn.dialogue_id,
        "turn_index": turn.index,
        "context": turn.context_messages(),
        "rubric": rubric.model_dump(mode="json"),
        "reply": reply,
        "scores": scores,
        "target": json.dumps({"scores": {f"c{i + 1}": s for i, s in enumerate(scores)}}),
        "targets_version": EVALUATOR_TARGETS_VERSION,
    }


def _esconv_records(
    dialogues: list[SupportDialogue],
    split: str,
    targets: TemplateTargets,
    mapping: StrategyMap,
    config: BuildDataConfig,
) -> list[dict[str, Any]]:
    """Per usable turn: its reference record, then ``negatives_per_reference`` negatives under the
    same context and rubric, their kinds taken in turn from ``config.negatives``."""
    rng = random.Random(f"{config.seed}:esconv:{split}")
    turns = [
        (t, d)
        for d in dialogues
        for t in d.supporter_turns(mapping)
        if t.labelled and t.context and any(t.counts.values())
    ]
    several = len({t.dialogue_id for t, _ in turns}) > 1  # another conversation's reply needs another conversation
    kinds = [k for k in config.negatives if several or k != "offcontext"] or ["platitude", "evasive"]
    records = []
    for i, (turn, dialogue) in enumerate(turns):
        rubric, problems = targets.build(turn, dialogue)
        if [p for p in problems if "names anything" not in p]:
            continue
        records.append(
            _record(
                split,
                "esconv",
                "reference",
                turn,
                rubric,
                turn.reply,
                esconv_scores("reference", rubric, _covered(turn)),
            )
        )
        for k in range(config.negatives_per_reference):
            kind = kinds[(i * config.negatives_per_reference + k) % len(kinds)]
            if kind == "offcontext":
                other, _ = turns[rng.randrange(len(turns))]
                while other.dialogue_id == turn.dialogue_id:
                    other, _ = turns[rng.randrange(len(turns))]
                reply, covered = other.reply, _covered(other)
            else:
                reply, covered = rng.choice(PLATITUDES if kind == "platitude" else EVASIVE_REPLIES), set()
            records.append(_record(split, "esconv", kind, turn, rubric, reply, esconv_scores(kind, rubric, covered)))
    return records


def _lend_an_ear_records(
    root: Path, targets: TemplateTargets, mapping: StrategyMap, report: BuildReport, seed: int
) -> dict[str, list[dict[str, Any]]]:
    dialogues = load_lend_an_ear(root, strategy_map=mapping)
    judged_path = root / "judged_turns" / "judged_turn_responses_gold_and_qwen3-4b_systems.jsonl"
    judged = load_judged_turns(judged_path)
    report.load_issues += [str(i) for i in dialogues.issues + judged.issues]
    turns: dict[tuple[str, int], SupportTurn] = {}
    for dialogue in dialogues.records:
        for supporter_turn in dialogue.supporter_turns(mapping):
            turns[(dialogue.id, supporter_turn.index)] = supporter_turn
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in judged.records:
        split = lend_an_ear_split(item.conversation_id)
        turn = turns.get((item.conversation_id, item.turn_index))
        if turn is None or not turn.context or split != "train":
            report.sft["lend-an-ear: held out or no context"] += 1
            continue
        if any(name not in item.scores for name in JUDGE_CRITERIA):
            report.sft["lend-an-ear: a judge dimension missing"] += 1
            continue
        slots = {"topic": targets.topic(turn) or "their situation"}
        rng = random.Random(f"{seed}:{item.conversation_id}:{item.turn_index}:{item.system}")
        criteria = []
        scores = []
        for name, target in judged_scores(item.scores):
            dimension, _, wordings = JUDGE_CRITERIA[name]
            criteria.append(Criterion(dimension=dimension, text=rng.choice(wordings).format(**slots)))
            scores.append(target)
        rubric = Rubric(weights={d: 1.0 for d in DIMENSIONS}, criteria=criteria)
        out[split].append(_record(split, "lend-an-ear", f"judged:{item.system}", turn, rubric, item.response, scores))
    used = sorted({r["dialogue_id"] for r in out.get("train", [])})
    if used:
        require_role(judged_path, "fit", records=[{"id": c, "role": lend_an_ear_role(c)} for c in used])
    return out


def build_evaluator_sft(config: BuildDataConfig, *, log: Callable[[str], None] = print) -> BuildReport:
    """``care train build-data`` with ``targets: evaluator``: evaluator SFT records, no teacher model.

    Reads ESConv ``train`` and ``valid`` (never ``test``: a config listing it is refused) and, with
    ``use_mint``, the Lend-an-Ear judged replies of the ``train`` conversations; writes
    ``sft/{train,valid}.jsonl`` (``valid`` holds ESConv valid only, for model selection),
    ``report.json`` and ``roles.json``. Each ESConv reference reply comes with
    ``negatives_per_reference`` negatives of the kinds ``negatives`` lists. Where a split has
    Lend-an-Ear records, it keeps ``esconv_per_judged`` ESConv records per judged one (a seeded
    sample). ``max_turns`` caps each file (a seeded sample).

    Raises:
        ConfigError: the config lists the ESConv test split.
    """
    setup = esconv_setup(config, "evaluator targets")
    mapping, root, report, loaded, targets = setup.mapping, setup.root, setup.report, setup.loaded, setup.targets
    esconv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for split, result in loaded.items():
        dialogues = result.records[: config.max_dialogues] if config.max_dialogues else result.records
        esconv[split] += _esconv_records(dialogues, split, targets, mapping, config)
    judged = (
        _lend_an_ear_records(root / "mint_lend_an_ear", targets, mapping, report, config.seed)
        if config.use_mint
        else {}
    )
    by_split: dict[str, list[dict[str, Any]]] = {}
    for split in sorted(set(esconv) | set(judged)):
        records = esconv[split]
        if judged.get(split):
            # weighed against the judged records: a seeded sample
            random.Random(f"{config.seed}:balance:{split}").shuffle(records)
            records = records[: round(config.esconv_per_judged * len(judged[split]))] + judged[split]
        by_split[split] = records
    out_dir = Path(config.output_dir)
    for split, records in by_split.items():
        random.Random(f"{config.seed}:{split}").shuffle(records)
        if config.max_turns is not None:
            records = records[: config.max_turns]
        for record in records:
            report.sft[f"{split}: {record['source']} {record['kind'].split(':')[0]}"] += 1
        path = out_dir / "sft" / f"{split}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        report.files[f"sft/{split}.jsonl"] = len(records)
    write_roles(out_dir, {f"sft/{split}.jsonl": OUTPUT_ROLES.get(split, split) for split in by_split})
    (out_dir / "report.json").write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False), encoding="utf-8")
    log(report.table())
    return report
