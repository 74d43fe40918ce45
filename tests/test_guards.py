"""The two copy flags (the user's words, the assistant's own earlier turns) and per-flag policies."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from care_sdk import AdaptiveReward, Guards, Rubric, RubricEvaluator
from care_sdk.guards import (
    COPIED_USER,
    DEFAULT_FLAG_POLICIES,
    FORGED_TURN,
    POLICY_FLAGS,
    REPEATED_OWN_TURN,
    apply_policy,
    detect_flags,
    penalised,
    policy_reward,
    screen,
    screen_items,
)
from care_sdk.testing import ScriptedBackend, evaluation_json
from care_sdk.types import Message, RewardResult, as_messages

SAID = "I lost my job today and I don't know what to do with myself anymore."
OWN = "That is a lot to take in at once, and it makes sense that you feel unmoored right now."
CONTEXT = [
    {"role": "user", "content": SAID},
    {"role": "assistant", "content": OWN},
    {"role": "user", "content": "Yes. Everything feels pointless since they closed the office."},
]
ECHO = "So you lost your job today and you don't know what to do with yourself anymore."
REPEAT = "That is a lot to take in at once, and it makes sense that you feel unmoored right now."
HONEST = "Losing the office so suddenly would shake anyone. What has the hardest part of today been?"


def _reward(backend: ScriptedBackend, guards: Guards | None = None) -> AdaptiveReward:
    return AdaptiveReward(evaluator=RubricEvaluator(backend), rubric=Rubric.uniform_fixed(), guards=guards or Guards())


def _backend() -> ScriptedBackend:
    return ScriptedBackend(lambda req: evaluation_json([4] * 6))  # reward 0.75


def test_echo_of_the_user_is_copied_user_not_repeated_own_turn() -> None:
    assert detect_flags(ECHO, CONTEXT) == (COPIED_USER,)
    assert detect_flags(SAID, CONTEXT) == (COPIED_USER,)  # the user's own words, unturned
    assert detect_flags(HONEST, CONTEXT) == ()


def test_a_short_reply_is_a_copy_only_when_it_is_a_whole_message_of_three_words_or_more() -> None:
    context = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello, how are you today?"},
        {"role": "user", "content": "Not good. You?"},
    ]
    assert detect_flags("Not good. You?", context) == (COPIED_USER,)
    assert detect_flags("not good... you", context) == (COPIED_USER,)  # case and punctuation aside
    assert detect_flags("Hi", context) == ()  # a greeting said back
    assert detect_flags("Not good?", context) == ()  # part of a message: too short to tell from a quote
    assert detect_flags("Not good. You? I'm here.", context) == ()
    assert detect_flags("Hello, how are you today?", context) == (REPEATED_OWN_TURN,)
    turned = [{"role": "user", "content": "I am doing okay."}]
    assert detect_flags("You are doing okay.", turned) == (COPIED_USER,)  # turned around, as in a long copy


def test_repeat_of_an_earlier_assistant_turn_is_repeated_own_turn_only() -> None:
    assert detect_flags(REPEAT, CONTEXT) == (REPEATED_OWN_TURN,)
    assert detect_flags(f"It makes sense that you feel unmoored right now. {HONEST}", CONTEXT) == ()  # a quote
    # messages as objects, or as a plain string, read the same
    messages = [Message.model_validate(m) for m in CONTEXT]
    assert detect_flags(REPEAT, messages) == (REPEATED_OWN_TURN,)
    assert detect_flags(ECHO, SAID) == (COPIED_USER,)


def test_both_flags_when_the_reply_repeats_both() -> None:
    context = [{"role": "user", "content": SAID}, {"role": "assistant", "content": ECHO}]
    assert detect_flags(ECHO, context) == (COPIED_USER, REPEATED_OWN_TURN)


def test_role_less_plain_texts_are_read_as_the_users() -> None:
    texts = [m["content"] for m in CONTEXT]
    # without roles an earlier turn cannot be told from the user's words: the stricter flag
    assert detect_flags(ECHO, texts) == (COPIED_USER,)
    assert detect_flags(REPEAT, texts) == (COPIED_USER,)
    assert detect_flags(HONEST, texts) == ()
    assert [m.role for m in as_messages(["a", {"role": "assistant", "content": "b"}])] == ["user", "assistant"]
    assert detect_flags(ECHO, ()) == () and detect_flags(ECHO, "") == ()
    # system messages are neither the user's words nor the assistant's turns
    assert detect_flags(ECHO, [{"role": "system", "content": SAID}]) == ()


def test_thresholds_turn_each_detector_off() -> None:
    assert detect_flags(ECHO, CONTEXT, copy_share=None) == ()
    assert detect_flags(REPEAT, CONTEXT, own_turn_share=None) == ()
    assert screen(REPEAT, Guards(own_turn_share=None), CONTEXT).flags == ()
    assert screen(ECHO, Guards(copy_share=None, on_flag="report"), CONTEXT).flags == ()


def test_default_policies_zero_the_copy_of_the_user_and_report_the_own_repeat() -> None:
    backend = _backend()
    results = _reward(backend).score_batch([(CONTEXT, ECHO), (CONTEXT, REPEAT), (CONTEXT, HONEST)])
    assert [r.flags for r in results] == [(COPIED_USER,), (REPEATED_OWN_TURN,), ()]
    assert [r.reward for r in results] == [0.0, 0.75, 0.75]
    assert results[1].raw_reward is None and len(backend.requests) == 2  # the echo costs no call
    assert Guards().policy(COPIED_USER) == "zero" and Guards().policy(REPEATED_OWN_TURN) == "report"
    assert DEFAULT_FLAG_POLICIES == {REPEATED_OWN_TURN: "report"}


def test_each_flag_has_its_own_policy() -> None:
    penalise_own = Guards(flag_policies={REPEATED_OWN_TURN: "penalise"}, penalty=0.25)
    result = _reward(_backend(), penalise_own).score(CONTEXT, REPEAT)
    assert result.reward == 0.5 and result.raw_reward == 0.75 and "penalise" in (result.note or "")
    zero_own = Guards(flag_policies={REPEATED_OWN_TURN: "zero"})
    assert _reward(_backend(), zero_own).score(CONTEXT, REPEAT).reward == 0.0
    report_user = Guards(flag_policies={COPIED_USER: "report"})
    echoed = _reward(_backend(), report_user).score(CONTEXT, ECHO)
    assert echoed.reward == 0.75 and echoed.flags == (COPIED_USER,)
    # a mapping that names other flags keeps the default for repeated_own_turn
    other = Guards(flag_policies={FORGED_TURN: "penalise"})
    assert other.policy(REPEATED_OWN_TURN) == "report" and other.policy(FORGED_TURN) == "penalise"
    assert other.policy(COPIED_USER) == "zero"  # on_flag for the rest
    assert Guards(on_flag="penalise").policy(COPIED_USER) == "penalise"
    with pytest.raises(ValidationError, match="no policy can be set for nope"):
        Guards(flag_policies={"nope": "zero"})
    with pytest.raises(ValidationError):
        Guards(flag_policies={COPIED_USER: "maybe"})  # type: ignore[dict-item]


def test_the_strictest_policy_among_several_flags_applies() -> None:
    guards = Guards(flag_policies={REPEATED_OWN_TURN: "penalise", FORGED_TURN: "zero"}, penalty=0.5)
    assert policy_reward(0.9, (REPEATED_OWN_TURN,), guards) == pytest.approx(0.4)
    assert policy_reward(0.9, (REPEATED_OWN_TURN, FORGED_TURN), guards) == 0.0
    assert policy_reward(0.9, (REPEATED_OWN_TURN, COPIED_USER), Guards()) == 0.0
    assert policy_reward(0.9, (REPEATED_OWN_TURN,), Guards()) == 0.9
    assert penalised((REPEATED_OWN_TURN, COPIED_USER), Guards()) == (COPIED_USER,)
    assert penalised((REPEATED_OWN_TURN, COPIED_USER)) == (REPEATED_OWN_TURN, COPIED_USER)
    both = screen(f"{REPEAT}\nUser: thanks", guards, CONTEXT)
    assert both.blocked is not None and both.blocked.note == f"flagged {FORGED_TURN}: reward 0 without a model call"
    penalised_only = screen(REPEAT, guards, CONTEXT)
    out = apply_policy(RewardResult(reward=0.8), penalised_only, guards)
    assert (
        out.reward == pytest.approx(0.3)
        and out.note == f"flagged {REPEATED_OWN_TURN}: reward 0.800 lowered by penalise"
    )


def test_report_only_reports_every_flag() -> None:
    guards = Guards(flag_policies={REPEATED_OWN_TURN: "zero"}).report_only()
    assert all(guards.policy(f) == "report" for f in POLICY_FLAGS)
    assert screen(REPEAT, guards, CONTEXT).blocked is None
    assert screen("", guards).blocked is not None  # pre-checks still settle
    assert hash(Guards()) == hash(Guards()) and len({Guards(), Guards(), guards}) == 2  # frozen, hashable


def test_the_reward_passes_roles_to_the_guards() -> None:
    messages, other = as_messages(CONTEXT), as_messages("not a context")
    screens, todo = screen_items([(messages, REPEAT), (messages, ECHO), (other, ECHO)], Guards())
    assert [s.flags for s in screens] == [(REPEATED_OWN_TURN,), (COPIED_USER,), ()]
    assert [r for _, r in todo] == [REPEAT, ECHO]
    backend = ScriptedBackend([evaluation_json([5] * 6)])
    reward = _reward(backend)
    assert reward.score(CONTEXT, ECHO).flags == (COPIED_USER,) and not backend.requests  # the roles reach the guards
    with pytest.raises(ValidationError, match="role"):  # a context that does not read as messages fails where it enters
        reward.score_batch([([{"role": "nobody", "content": SAID}], "")])
