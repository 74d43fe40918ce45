"""Template rubric targets and the rubric sanity checks, on real ESConv data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from care_lab.data import StrategyMap, load_esconv
from care_lab.data.priorities import POSITION_CAP, position_prior, turn_number
from care_lab.training.build_data import build_data
from care_lab.training.config import BuildDataConfig
from care_lab.training.rubric_targets import TemplateTargets
from care_sdk.errors import ConfigError
from care_sdk.prompts import generator_messages, parse_rubric
from care_sdk.rubric_checks import check_rubric, content_words, top_match
from care_sdk.types import DIMENSIONS, Criterion, Rubric, as_messages

C, A, P = DIMENSIONS


def _rubric(weights: tuple[float, float, float], *texts: str) -> Rubric:
    dims = [C, C, A, A, P, P]
    return Rubric(
        weights=dict(zip(DIMENSIONS, weights, strict=True)),
        criteria=[Criterion(dimension=d, text=t) for d, t in zip(dims, texts, strict=True)],
    )


CONTEXT = [{"role": "user", "content": "My manager keeps shouting at me in front of the whole team every morning."}]
GOOD = (
    "Asks what the manager says in those moments.",
    "Checks how often the shouting happens.",
    "Names the humiliation of being shouted at.",
    "Validates that dreading mornings makes sense.",
    "Suggests one way to raise it with someone above the manager.",
    "Asks what support they have at work.",
)


def test_a_specific_rubric_passes_every_check() -> None:
    check = check_rubric(_rubric((2, 5, 3), *GOOD), CONTEXT)
    assert check.clean, check.problems()


@pytest.mark.parametrize(
    ("texts", "weights", "problem"),
    [
        ((CONTEXT[0]["content"], *GOOD[1:]), (2, 5, 3), "copied from the context"),
        (("Asks how the long nights feel, how the long nights feel.", *GOOD[1:]), (2, 5, 3), "repeat a phrase"),
        (('{"weights": 3}', *GOOD[1:]), (2, 5, 3), "placeholder"),
        (("non-negative_numbers_1: 2,", *GOOD[1:]), (2, 5, 3), "placeholder"),
        ((GOOD[0], GOOD[0], *GOOD[2:]), (2, 5, 3), "repeated"),
        (GOOD, (1, 1, 1), "near-uniform"),
    ],
)
def test_each_defect_is_flagged(texts: tuple[str, ...], weights: tuple[float, float, float], problem: str) -> None:
    problems = check_rubric(_rubric(weights, *texts), CONTEXT).problems()
    assert any(problem in p for p in problems), problems


def test_generic_criteria_are_not_grounded() -> None:
    generic = tuple(f"Responds with care and respect, point {n}." for n in "abcdef")
    assert not check_rubric(_rubric((2, 5, 3), *generic), CONTEXT).grounded
    assert content_words("The manager shouted") == {"manager", "shouted"}


def test_top_match_splits_ties_the_same_way_for_every_row() -> None:
    counts = {C: 0, A: 2, P: 1}
    assert top_match({C: 0.1, A: 0.8, P: 0.1}, counts) == 1.0
    assert top_match({C: 0.8, A: 0.1, P: 0.1}, counts) == 0.0
    assert top_match({C: 1, A: 1, P: 1}, counts) == pytest.approx(1 / 3)
    assert top_match({C: 0.2, A: 0.4, P: 0.4}, counts) == 0.5
    assert top_match({C: 0.2, A: 0.4, P: 0.4}, {C: 0, A: 0, P: 0}) is None


def test_template_targets_follow_the_reference_and_name_the_conversation(data_dir: Path) -> None:
    dialogues = load_esconv(data_dir / "esconv" / "valid.jsonl").records[:20]
    targets = TemplateTargets(dialogues, StrategyMap.default(), max_context_messages=4)
    built = grounded = 0
    for dialogue in dialogues:
        for turn in dialogue.supporter_turns():
            if not turn.labelled or not any(turn.counts.values()):
                continue
            rubric, problems = targets.build(turn, dialogue)
            assert [p for p in problems if "names anything" not in p] == []
            assert len(rubric.criteria) == 6
            top = max(turn.counts.values())
            assert {d for d in DIMENSIONS if rubric.weights[d] == max(rubric.weights.values())} == {
                d for d in DIMENSIONS if turn.counts[d] == top
            }
            topic = targets.topic(turn)
            if topic is not None:  # only words the model will see in its (cut) context
                visible = " ".join(m.content.lower() for m in turn.context[-4:])
                assert topic.split()[-1] in visible
            built += 1
            grounded += not problems
    assert built > 100
    assert grounded / built >= 0.6


def test_build_data_templates_mode_writes_train_and_valid_and_refuses_test(tmp_path: Path, data_dir: Path) -> None:
    config = BuildDataConfig(
        output_dir=str(tmp_path),
        data_dir=str(data_dir),
        targets="templates",
        esconv_splits=("train", "valid"),
        max_dialogues=5,
        max_context_messages=4,
    )
    report = build_data(config, log=lambda s: None)
    assert report.files["sft/train.jsonl"] > 10 and report.files["sft/valid.jsonl"] > 10
    records = [json.loads(x) for x in (tmp_path / "sft" / "train.jsonl").read_text().splitlines()]
    for record in records:
        rubric = parse_rubric(record["target"])
        assert record["split"] == "train"
        assert set(json.loads(record["target"])["weights"].values()) <= set(range(11))
        assert rubric.top_dimension in DIMENSIONS
    prompt = generator_messages(as_messages(records[-1]["context"]), max_context_messages=4)[1].content
    assert prompt.startswith("Position: supporter turn ")
    with pytest.raises(ConfigError, match="test"):
        build_data(config.model_copy(update={"esconv_splits": ("train", "test")}), log=lambda s: None)


def test_position_prior_moves_the_first_turns_to_the_prior_and_keeps_later_references(data_dir: Path) -> None:
    train = load_esconv(data_dir / "esconv" / "train.jsonl").records[:300]
    turns = [t for d in train for t in d.supporter_turns() if t.labelled and any(t.counts.values())]
    prior = position_prior(turns)
    assert all(abs(sum(p.values()) - 1) < 1e-9 for p in prior.values())
    assert max(prior) == POSITION_CAP  # later turn numbers pooled
    assert max(DIMENSIONS, key=lambda d: prior[1][d]) == C  # ESConv opens with questions
    mixed = TemplateTargets(train, StrategyMap.default(), max_context_messages=4, position_prior_weight=0.5)
    plain = TemplateTargets(train, StrategyMap.default(), max_context_messages=4)
    moved = kept = 0
    for turn in turns:
        weights, counts = mixed.weights(turn), plain.weights(turn)
        shares = prior[min(turn_number(turn), POSITION_CAP)]
        assert abs(sum(weights.values()) - 1) < 1e-9
        assert weights == pytest.approx({d: 0.5 * counts[d] + 0.5 * shares[d] for d in DIMENSIONS})
        top = max(DIMENSIONS, key=lambda d: weights[d])
        reference_top = max(DIMENSIONS, key=lambda d: counts[d])
        if max(counts.values()) > 0.5:  # one clear strategy: it stays on top unless the prior favours
            # another dimension by more than the reference's lead in the counts (0.4 for one strategy)
            overtaken = any(shares[d] - shares[reference_top] > counts[reference_top] - counts[d] for d in DIMENSIONS)
            assert (top != reference_top) == overtaken
            moved += overtaken
            kept += not overtaken
    assert moved > 0 and kept > 100
