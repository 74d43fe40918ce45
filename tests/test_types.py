import json

import pytest
from pydantic import ValidationError

from care_sdk import Criterion, CriterionScore, Dialogue, Dimension, Evaluation, RewardResult, Rubric

CRITERIA = [
    {"dimension": "cognitive", "text": "Reflects the situation."},
    {"dimension": "affective", "text": "Validates the fear."},
    {"dimension": "proactive", "text": "Suggests a next step."},
]


def test_weights_are_normalised_and_ordered() -> None:
    rubric = Rubric(weights={"proactive": 1, "cognitive": 2, "affective": 1}, criteria=CRITERIA)
    assert list(rubric.weights) == [Dimension.COGNITIVE, Dimension.AFFECTIVE, Dimension.PROACTIVE]
    assert rubric.weights[Dimension.COGNITIVE] == 0.5
    assert sum(rubric.weights.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"cognitive": 0, "affective": 0, "proactive": 0}, "all weights are zero"),
        ({"cognitive": -1, "affective": 1, "proactive": 1}, "weight of cognitive"),
        ({"cognitive": 1, "affective": 1}, "missing weight for proactive"),
        ({"cognitive": float("nan"), "affective": 1, "proactive": 1}, "finite"),
    ],
)
def test_invalid_weights_name_the_field(weights: dict[str, float], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        Rubric(weights=weights, criteria=CRITERIA)
    assert info.value.errors()[0]["loc"][0] == "weights"
    assert message in str(info.value)


def test_every_dimension_needs_a_criterion() -> None:
    with pytest.raises(ValidationError, match="no criterion for proactive") as info:
        Rubric(weights={"cognitive": 1, "affective": 1, "proactive": 1}, criteria=CRITERIA[:2] + CRITERIA[:1])
    assert info.value.errors()[0]["loc"] == ("criteria",)


def test_criterion_text_is_bounded() -> None:
    with pytest.raises(ValidationError, match="at most 400"):
        Criterion(dimension="affective", text="x" * 401)
    with pytest.raises(ValidationError, match="empty"):
        Criterion(dimension="affective", text="   ")


def test_json_round_trip_is_exact() -> None:
    rubric = Rubric(weights={"cognitive": 0.45, "affective": 0.3, "proactive": 0.25}, criteria=CRITERIA)
    evaluation = Evaluation(
        scores=[CriterionScore(dimension=c.dimension, criterion=c.text, score=4) for c in rubric.criteria]
    )
    result = RewardResult.from_parts(rubric, evaluation)
    for obj in (rubric, evaluation, result):
        again = type(obj).model_validate_json(obj.model_dump_json())
        assert again == obj
        assert again.model_dump_json() == obj.model_dump_json()
    weights = json.loads(rubric.model_dump_json())["weights"]
    assert weights == {"cognitive": 0.45, "affective": 0.3, "proactive": 0.25}


def test_reward_formula_with_breakdown() -> None:
    rubric = Rubric(
        weights={"cognitive": 0.5, "affective": 0.3, "proactive": 0.2},
        criteria=[*CRITERIA, {"dimension": "cognitive", "text": "Clarifies."}],
    )
    scores = {"Reflects the situation.": 5, "Clarifies.": 3, "Validates the fear.": 1, "Suggests a next step.": 4}
    evaluation = Evaluation(
        scores=[CriterionScore(dimension=c.dimension, criterion=c.text, score=scores[c.text]) for c in rubric.criteria]
    )
    result = RewardResult.from_parts(rubric, evaluation)
    assert result.dimension_scores == {Dimension.COGNITIVE: 0.75, Dimension.AFFECTIVE: 0.0, Dimension.PROACTIVE: 0.75}
    assert result.reward == pytest.approx(0.5 * 0.75 + 0.3 * 0.0 + 0.2 * 0.75)


def test_reward_needs_every_dimension_scored() -> None:
    rubric = Rubric(weights={"cognitive": 1, "affective": 1, "proactive": 1}, criteria=CRITERIA)
    evaluation = Evaluation(scores=[CriterionScore(dimension="cognitive", criterion="x", score=3)])
    with pytest.raises(ValueError, match="no score for affective, proactive"):
        RewardResult.from_parts(rubric, evaluation)


def test_scores_are_bounded() -> None:
    with pytest.raises(ValidationError) as info:
        CriterionScore(dimension="cognitive", criterion="x", score=6)
    assert info.value.errors()[0]["loc"] == ("score",)


def test_result_has_reward_or_error() -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        RewardResult(reward=None)
    assert RewardResult.failed(ValueError("bad")).error == "ValueError: bad"


def test_dialogue_turns_carry_their_context() -> None:
    dialogue = Dialogue(
        messages=[
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
            {"role": "assistant", "content": "d"},
        ]
    )
    turns = list(dialogue.turns())
    assert [t.index for t in turns] == [2, 4]
    assert [m.content for m in turns[1].context] == ["Be kind.", "a", "b", "c"]


def test_unknown_role_is_rejected() -> None:
    with pytest.raises(ValidationError) as info:
        Dialogue(messages=[{"role": "bot", "content": "hi"}])
    assert info.value.errors()[0]["loc"][:3] == ("messages", 0, "role")
