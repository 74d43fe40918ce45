"""Reward terms of preference GRPO: every case of the r_align rule, r_pref ties, and the TRL reward functions."""

from __future__ import annotations

import pytest

from care_lab.training import (
    AlignReward,
    FormatReward,
    PrefGRPORewards,
    PrefReward,
    align_violations,
    format_reward,
    r_align,
    r_pref,
)
from care_sdk import RubricEvaluator
from care_sdk.backends import GenerationRequest
from care_sdk.errors import BackendError
from care_sdk.testing import ScriptedBackend, candidate_reply, evaluation_json, rubric_json


def w(c: float, a: float, p: float) -> dict[str, float]:
    return {"cognitive": c, "affective": a, "proactive": p}


def n(c: int, a: int, p: int) -> dict[str, int]:
    return {"cognitive": c, "affective": a, "proactive": p}


@pytest.mark.parametrize(
    ("weights", "counts", "expected", "violations"),
    [
        # aligned: the top-count dimension has the top weight, zero-count dims do not outweigh used ones
        (w(0.5, 0.3, 0.2), n(3, 1, 0), 1.0, 0),
        # no strategies at all: both conditions hold trivially
        (w(0.1, 0.1, 0.8), n(0, 0, 0), 1.0, 0),
        # tie in the largest count: either tied dimension may hold the top weight
        (w(0.2, 0.5, 0.3), n(2, 2, 1), 1.0, 0),
        # ... and the tied top-count dimensions may share it
        (w(0.4, 0.4, 0.2), n(2, 2, 1), 1.0, 0),
        # strict top rule: a dimension outside the top-count set tying for the largest weight is a violation
        (w(0.4, 0.4, 0.2), n(1, 3, 0), 0.5, 1),
        # top violated only (no zero-count dimension involved)
        (w(0.2, 0.3, 0.5), n(3, 2, 1), 0.5, 1),
        # top violated because a zero-count dimension holds the top weight: 1 + 1 pair violation
        (w(0.3, 0.2, 0.5), n(2, 0, 0), 0.0, 2),
        # pair violation only: top is right, but a zero-count dim outweighs a used one
        (w(0.5, 0.1, 0.4), n(3, 1, 0), 0.5, 1),
        # equal weights between a zero-count and a used dimension: not a violation (strict >)
        (w(0.5, 0.25, 0.25), n(3, 1, 0), 1.0, 0),
        # two pair violations: floored at 0
        (w(0.6, 0.2, 0.2), n(0, 2, 1), 0.0, 3),
        # uniform weights: a tie for the top is no priority order (one violation, no strict pair violation)
        (w(1, 1, 1), n(0, 4, 0), 0.5, 1),
        (w(1, 1, 1), n(3, 0, 0), 0.5, 1),
        # ... unless every dimension is in the top-count set
        (w(1, 1, 1), n(2, 2, 2), 1.0, 0),
        (w(1, 1, 1), n(0, 0, 0), 1.0, 0),
    ],
)
def test_r_align_rule(weights: dict[str, float], counts: dict[str, int], expected: float, violations: int) -> None:
    assert len(align_violations(weights, counts)) == violations
    assert r_align(weights, counts) == expected


def test_r_align_accepts_rubrics_and_partial_counts() -> None:
    from care_sdk.prompts import parse_rubric

    rubric = parse_rubric(rubric_json(w(1, 3, 1)))
    assert r_align(rubric, {"affective": 1}) == 1.0
    assert r_align(parse_rubric(rubric_json(w(1, 1, 1))), {"affective": 1}) == 0.5
    assert align_violations(w(1, 1, 1), n(3, 0, 0)) == [
        "top: affective, proactive share the largest weight without the most strategies (cognitive)"
    ]
    with pytest.raises(ValueError, match="missing"):
        r_align({"cognitive": 1.0}, {})
    with pytest.raises(ValueError, match="negative"):
        r_align(w(1, 1, 1), {"cognitive": -1})


def test_r_pref_ties_and_failures() -> None:
    assert r_pref(0.9, 0.1) == 1.0
    assert r_pref(0.1, 0.9) == 0.0
    assert r_pref(0.5, 0.5) == 0.0
    assert r_pref(0.5, 0.5, tie=0.5) == 0.5
    assert r_pref(None, 0.5) is None and r_pref(0.5, None) is None


def test_format_reward_checks_criteria_count_and_conversational_completions() -> None:
    good = rubric_json(w(1, 1, 1))
    three = rubric_json(
        w(1, 1, 1),
        {
            d: ["Criterion one here.", "Criterion two here.", "Criterion three."]
            for d in ("cognitive", "affective", "proactive")
        },
    )
    assert format_reward(good, criteria_per_dimension=2) == 1.0
    assert format_reward(three, criteria_per_dimension=2) == 0.0
    assert format_reward(three) == 1.0
    assert format_reward(rubric_json(w(0, 0, 0))) == 0.0  # all-zero weights do not validate
    reward = FormatReward()
    assert reward.__name__ == "format"
    assert reward(prompts=[[], []], completions=[[{"role": "assistant", "content": good}], "nope"]) == [1.0, 0.0]


def test_align_reward_reads_the_counts_column() -> None:
    reward = AlignReward()
    out = reward(
        prompts=["p"] * 3,
        completions=[rubric_json(w(3, 1, 1)), rubric_json(w(1, 1, 3)), "{"],
        chosen_strategy_counts=[n(2, 0, 0), n(2, 0, 0), n(2, 0, 0)],
    )
    assert out == [1.0, 0.0, 0.0]
    assert reward(prompts=["p"], completions=[rubric_json(w(1, 1, 1))], chosen_strategy_counts=[None]) == [None]
    with pytest.raises(KeyError, match="chosen_strategy_counts"):
        reward(prompts=["p"], completions=["{}"])


def _evaluator_by_reply(scores: dict[str, int | BackendError]) -> tuple[RubricEvaluator, ScriptedBackend]:
    def answer(request: GenerationRequest) -> str | BackendError:
        reply = candidate_reply(request)
        for key, value in scores.items():
            if reply.rstrip().endswith(key):
                return value if isinstance(value, BackendError) else evaluation_json([value] * 6)
        raise AssertionError(f"unexpected reply in {reply[-60:]!r}")

    backend = ScriptedBackend(answer)
    return RubricEvaluator(backend, max_attempts=1), backend


def test_pref_reward_scores_chosen_and_rejected_batched_and_cached() -> None:
    evaluator, backend = _evaluator_by_reply({"GOOD": 5, "BAD": 2, "SAME": 3})
    reward = PrefReward(evaluator)
    ctx = [{"role": "user", "content": "My sister stopped talking to me."}]
    rubric_a, rubric_b = rubric_json(w(2, 1, 1)), rubric_json(w(1, 2, 1))
    kwargs = {
        "context": [ctx] * 4,
        "chosen": ["GOOD", "GOOD", "GOOD", "SAME"],
        "rejected": ["BAD", "BAD", "BAD", "SAME"],
    }
    out = reward(prompts=["p"] * 4, completions=[rubric_a, rubric_b, rubric_a, "not a rubric"], **kwargs)
    assert out == [1.0, 1.0, 1.0, 0.0]
    assert len(backend.requests) == 4  # two rubrics x (chosen, rejected); the repeated rubric is cached
    out = reward(prompts=["p"], completions=[rubric_a], context=[ctx], chosen=["SAME"], rejected=["SAME"])
    assert out == [0.0]  # a tie gets 0 by default
    assert PrefReward(evaluator, tie=0.5)(
        prompts=["p"], completions=[rubric_a], context=[ctx], chosen=["SAME"], rejected=["SAME"]
    ) == [0.5]


def test_pref_reward_failed_evaluation_is_none_not_zero() -> None:
    evaluator, backend = _evaluator_by_reply({"GOOD": 5, "DOWN": BackendError("server down", provider="scripted")})
    reward = PrefReward(evaluator)
    ctx = [{"role": "user", "content": "hi"}]
    out = reward(
        prompts=["p"], completions=[rubric_json(w(1, 1, 1))], context=[ctx], chosen=["GOOD"], rejected=["DOWN"]
    )
    assert out == [None]
    assert reward.last_errors and "server down" in reward.last_errors[0]
    # the failure is not cached: the next call asks again
    before = len(backend.requests)
    reward(prompts=["p"], completions=[rubric_json(w(1, 1, 1))], context=[ctx], chosen=["GOOD"], rejected=["DOWN"])
    assert len(backend.requests) == before + 1


def test_pref_grpo_rewards_void_the_whole_completion_on_an_evaluator_failure() -> None:
    evaluator, backend = _evaluator_by_reply({"GOOD": 5, "BAD": 2, "DOWN": BackendError("down", provider="scripted")})
    rewards = PrefGRPORewards(evaluator)
    terms = rewards.terms()
    assert [t.__name__ for t in terms] == ["format", "r_pref", "r_align"]
    ctx = [{"role": "user", "content": "My sister stopped talking to me."}]
    columns = {
        "context": [ctx] * 3,
        "chosen": ["GOOD"] * 3,
        "rejected": ["BAD", "DOWN", "BAD"],
        "chosen_strategy_counts": [n(2, 0, 0)] * 3,
    }
    completions = [rubric_json(w(3, 1, 1)), rubric_json(w(3, 1, 1)), "not a rubric"]
    out = [t(prompts=["p"] * 3, completions=completions, **columns) for t in terms]
    assert out == [[1.0, None, 0.0], [1.0, None, 0.0], [1.0, None, 0.0]]  # failure: None everywhere; no rubric: 0
    assert len(backend.requests) == 3  # computed once for the three terms (GOOD, BAD, DOWN)
    assert rewards.unscorable == 1
    again = [t(prompts=["p"] * 3, completions=completions, **columns) for t in terms]
    assert again == out and len(backend.requests) == 4  # a later identical batch asks the failed one again
