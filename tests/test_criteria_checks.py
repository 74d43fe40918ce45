"""Criteria a person can read: the detector of defective criteria, and the generator that repairs them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from care_lab.training.rubric_targets import CRITERION_TEMPLATES
from care_sdk import RubricGenerator
from care_sdk.backends.base import GenerationRequest
from care_sdk.errors import ConfigError
from care_sdk.prompts import parse_rubric
from care_sdk.rubric_checks import check_rubric, criteria_defects, criterion_defect, same_criterion
from care_sdk.testing import ScriptedBackend, rubric_json
from care_sdk.types import Criterion, CriterionRepair, Dimension, Rubric, fixed_criteria

CONTEXT = [{"role": "user", "content": "My mom needs care every day and I have nothing left."}]
WEIGHTS = {"cognitive": 3, "affective": 2, "proactive": 1}
CLEAN = {
    "cognitive": ["Asks what a normal day of caring for their mom looks like.", "Names the load the user carries."],
    "affective": ["Recognises how exhausted the user is.", "Validates the guilt about needing a break."],
    "proactive": ["Helps the user find one hour of respite this week.", "Asks who else could share the care."],
}


def with_cognitive(second: str) -> dict[str, list[str]]:
    """The clean criteria with the second cognitive one replaced."""
    return {**CLEAN, "cognitive": [CLEAN["cognitive"][0], second]}


# -- the detector ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "defect"),
    [
        ("Asks one open question about the same same same same as them.", "repeated_word"),
        ("Shows warmth about the the job.", "repeated_word"),
        ("Names The the fear.", "repeated_word"),
        ("Shows warmth about what the user shared about {topic}.", "unfilled_slot"),
        ("Asks about <topic> gently.", "unfilled_slot"),
        ("Names [X] directly.", "unfilled_slot"),
        ("Names X directly.", "unfilled_slot"),
        ("Invites the user to say what might help with ...", "unfilled_slot"),
        ("Invites the user to say what might help with …", "unfilled_slot"),
        ("Asks about ___ before moving on.", "unfilled_slot"),
        ("Builds on what the user can still control about the.", "garbled_slot"),
        ("Acknowledges the user's anxiety and", "garbled_slot"),
        ("Offers one step about their", "garbled_slot"),
        ("Asks about the their job before moving on.", "garbled_slot"),
        ("Asks about the job as the job the job.", "garbled_slot"),
        ("Asks same about same as same.", "garbled_slot"),
    ],
)
def test_a_defective_criterion_is_named_by_its_defect(text: str, defect: str) -> None:
    assert criterion_defect(text) == defect


@pytest.mark.parametrize(
    "text",
    [
        "Names what the user is worried about.",  # a preposition may end a sentence
        "Acknowledges what the user is dealing with.",
        "Recognises that that decision was hard to make.",  # "that that" and "had had" are grammar
        "Asks whether they had had any support before.",
        "Validates how very, very tired the user is.",  # a repeat across a comma reads as emphasis
        "Asks how the user feels, what the user wants, and what the user fears.",
        "Asks what an X-ray result would mean for them.",
        "Uses the user's own words for the loss (their dog).",
        "Asks one open question about the same old stuff to learn what the user is facing.",
    ],
)
def test_a_readable_criterion_has_no_defect(text: str) -> None:
    assert criterion_defect(text) is None


def test_a_copy_is_the_same_words_once_case_punctuation_and_determiners_are_set_aside() -> None:
    assert same_criterion("Validates the fear.", "VALIDATES their fear!")
    assert same_criterion("Offers a step", "Offers one step") is False
    texts = ["Names the fear.", "Names their fear", "Asks about {topic}.", "Asks about the topic."]
    assert criteria_defects(texts) == [None, "copy", "unfilled_slot", None]  # a defective text is copied by none


def test_no_fixed_or_template_criterion_is_flagged() -> None:
    """The fixed criteria and every template of the bundled generator's training bank, filled the way
    training fills them, read clean (benchmarks/bench_criteria_checks.py checks every training target)."""
    assert criteria_defects([c.text for c in fixed_criteria()]) == [None] * 6
    fills = {
        "topic": ["their job", "the same old stuff", "their mom", "her new boyfriend", "their situation", "the covid"],
        "emotion": ["anxiety", "low mood", "nerves", "hurt", "anger"],
        "problem": ["trouble at work", "ongoing low mood", "breakup", "worries about their children"],
    }
    for strategies in CRITERION_TEMPLATES.values():
        bank = [t for templates in strategies.values() for t in templates]
        assert not any(same_criterion(a, b) for i, a in enumerate(bank) for b in bank[i + 1 :])
        for template in bank:
            for n in range(6):
                slots = {k: v[n % len(v)] for k, v in fills.items()}
                assert criterion_defect(template.format(**slots)) is None, template.format(**slots)


def test_check_rubric_counts_each_defect() -> None:
    texts = {
        "cognitive": ["Asks about the the job.", "Asks about {topic}."],
        "affective": ["Names the fear and", "Names the fear and"],
        "proactive": ["Offers one step.", "Offers their one step."],
    }
    rubric = parse_rubric(rubric_json(WEIGHTS, texts))
    check = check_rubric(rubric, CONTEXT)
    assert (check.repeated_word_criteria, check.unfilled_slot_criteria, check.garbled_slot_criteria) == (1, 1, 2)
    assert check.duplicate and not check.clean
    assert "1 criteria repeat a word" in check.problems()


# -- the rubric carries its repairs ---------------------------------------------------------------


def test_a_rubric_without_repairs_keeps_its_json_and_one_with_repairs_round_trips() -> None:
    plain = Rubric.uniform_fixed()
    assert set(json.loads(plain.model_dump_json())) == {"weights", "criteria"}
    repair = CriterionRepair(
        dimension=Dimension.COGNITIVE,
        original="Asks about the the job.",
        defect="repeated_word",
        replacement=plain.criteria[0].text,
        source="fixed",
    )
    repaired = Rubric(weights=plain.weights, criteria=plain.criteria, repairs=(repair,))
    assert Rubric.model_validate_json(repaired.model_dump_json()) == repaired
    assert repaired.with_weights({"cognitive": 2, "affective": 1, "proactive": 1}).repairs == (repair,)


# -- the generator regenerates, then replaces ------------------------------------------------------


def test_a_defective_criterion_is_regenerated_with_a_new_seed() -> None:
    replies = [
        rubric_json(WEIGHTS, with_cognitive("Asks about the same same same as them.")),
        rubric_json({"cognitive": 0, "affective": 1, "proactive": 9}, with_cognitive("Asks what scares them most.")),
    ]
    backend = ScriptedBackend(replies)
    rubric = RubricGenerator(backend, seed=7).generate(CONTEXT)
    assert [c.text for c in rubric.criteria_for("cognitive")][1] == "Asks what scares them most."
    assert rubric.weights[Dimension.COGNITIVE] == 0.5  # the first reply's weights
    assert [c.text for c in rubric.criteria_for("affective")] == CLEAN["affective"]
    (repair,) = rubric.repairs
    assert (repair.defect, repair.source) == ("repeated_word", "retry")
    assert repair.original == "Asks about the same same same as them."
    first, retry = backend.requests
    assert isinstance(first, GenerationRequest) and isinstance(retry, GenerationRequest)
    assert (first.seed, first.temperature) == (7, 0.0)
    assert retry.seed not in (7, 8, 9) and retry.temperature > 0  # past the seeds of the parse retries
    assert retry.messages == first.messages and retry.purpose == "rubric"


def test_a_criterion_still_defective_after_the_retries_is_replaced_by_the_fixed_one() -> None:
    defective = rubric_json(WEIGHTS, with_cognitive("Builds on what the user can still control about {topic}."))
    backend = ScriptedBackend([defective] * 3)
    generator = RubricGenerator(backend)
    rubric = generator.generate(CONTEXT)
    fixed = [c.text for c in fixed_criteria() if c.dimension is Dimension.COGNITIVE]
    assert [c.text for c in rubric.criteria_for("cognitive")] == [CLEAN["cognitive"][0], fixed[0]]
    (repair,) = rubric.repairs
    assert (repair.defect, repair.source, repair.replacement) == ("unfilled_slot", "fixed", fixed[0])
    assert len(backend.requests) == 3  # the first reply and criteria_retries=2 more
    assert check_rubric(rubric, CONTEXT).clean
    assert generator.generate(CONTEXT) == rubric and len(backend.requests) == 3  # the repaired rubric is cached


def test_a_copied_criterion_is_replaced_and_a_retry_that_fails_to_parse_costs_nothing_else() -> None:
    copied = {**CLEAN, "proactive": ["Offers one step.", "Offers their one step!"]}
    backend = ScriptedBackend([rubric_json(WEIGHTS, copied), "not json", rubric_json(WEIGHTS, copied)])
    rubric = RubricGenerator(backend).generate(CONTEXT)
    fixed = [c.text for c in fixed_criteria() if c.dimension is Dimension.PROACTIVE]
    assert [c.text for c in rubric.criteria_for("proactive")] == ["Offers one step.", fixed[0]]
    assert [(r.defect, r.source) for r in rubric.repairs] == [("copy", "fixed")]


def test_checks_off_keep_the_criteria_as_decoded_and_a_clean_rubric_costs_one_request() -> None:
    defective = rubric_json(WEIGHTS, with_cognitive("Asks about the the job."))
    unchecked = RubricGenerator(ScriptedBackend([defective]), check_criteria=False)
    rubric = unchecked.generate(CONTEXT)
    assert rubric.criteria_for("cognitive")[1].text == "Asks about the the job." and rubric.repairs == ()
    checked = RubricGenerator(ScriptedBackend([rubric_json(WEIGHTS, CLEAN)]))
    assert checked.generate(CONTEXT).repairs == () and len(checked.backend.requests) == 1  # type: ignore[attr-defined]
    assert checked.identity != unchecked.identity and "|checked=r2" in checked.identity
    with pytest.raises(ConfigError, match="criteria_retries"):
        RubricGenerator(ScriptedBackend([]), criteria_retries=-1)


def test_without_retries_every_defective_criterion_of_a_dimension_gets_a_distinct_fixed_one() -> None:
    both = {**CLEAN, "affective": ["Names the the fear.", "Shows warmth about <topic>."]}
    backend = ScriptedBackend([rubric_json(WEIGHTS, both)])
    rubric = asyncio.run(RubricGenerator(backend, criteria_retries=0).agenerate(CONTEXT))
    assert [c.text for c in rubric.criteria_for("affective")] == [
        c.text for c in fixed_criteria() if c.dimension is Dimension.AFFECTIVE
    ]
    assert len(backend.requests) == 1 and [r.source for r in rubric.repairs] == ["fixed", "fixed"]


def test_a_slot_that_nothing_fills_is_dropped_and_recorded() -> None:
    texts = {**CLEAN, "proactive": ["Offers one step.", "Offers the the step.", "Offers a a plan.", "Asks [X]."]}
    rubric = RubricGenerator(ScriptedBackend([rubric_json(WEIGHTS, texts)]), criteria_retries=0).generate(CONTEXT)
    assert len(rubric.criteria_for("proactive")) == 3  # one kept, two fixed, one dropped
    assert [r.source for r in rubric.repairs] == ["fixed", "fixed", "dropped"]
    assert rubric.repairs[-1].replacement is None
    assert all(isinstance(c, Criterion) for c in rubric.criteria)


# -- the bundled generator ------------------------------------------------------------------------


@pytest.mark.slow
def test_the_bundled_generator_writes_no_defective_criterion_on_the_examples(examples_file: Path) -> None:
    contexts = []
    for line in examples_file.read_text(encoding="utf-8").splitlines():
        messages = json.loads(line)["messages"]
        contexts += [
            messages[:i]
            for i, m in enumerate(messages)
            if m["role"] == "assistant" and any(x["role"] == "user" for x in messages[:i])
        ]
    rubrics = RubricGenerator("default", cache=False).generate_batch(contexts)
    defects = []
    for rubric in rubrics:
        assert isinstance(rubric, Rubric), rubric
        defects += [d for d in criteria_defects([c.text for c in rubric.criteria]) if d is not None]
    assert defects == []


def test_care_score_show_prints_the_repairs(capsys: pytest.CaptureFixture[str]) -> None:
    from care_sdk.cli import _print_record

    repair = CriterionRepair(
        dimension=Dimension.PROACTIVE,
        original="Offers the the step.",
        defect="repeated_word",
        replacement="Offers one step.",
        source="retry",
    )
    rubric = Rubric(weights=WEIGHTS, criteria=fixed_criteria(), repairs=(repair,))
    scores = [{"score": 3.0, "dimension": c.dimension.value, "criterion": c.text} for c in rubric.criteria]
    record = {
        "id": "d",
        "turn": 1,
        "reward": 0.5,
        "rubric": rubric.model_dump(mode="json"),
        "evaluation": {"scores": scores},
    }
    _print_record(record)
    assert "replaced (repeated_word, by a retry's criterion): Offers the the step." in capsys.readouterr().out
