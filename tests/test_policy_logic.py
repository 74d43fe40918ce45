"""Policy training pieces without a trainer: profiles, the simulated user, episodes, the reward, the CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from care_lab.data.roles import write_roles
from care_lab.simulation import (
    BackendPolicy,
    SimulatedUser,
    UserProfile,
    esconv_profiles,
    run_episodes,
    sage_profiles,
    split_profiles,
)
from care_lab.simulation.simulated_user import parse_user_turn
from care_lab.training.config import load_config
from care_lab.training.policy import (
    EpisodeRecorder,
    EvalPolicyConfig,
    PolicyGRPOConfig,
    PolicyReward,
)
from care_lab.training.policy.components import prompt_rows
from care_lab.training.policy.config import PromptSettings
from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator
from care_sdk.backends import BackendPool, GenerationRequest
from care_sdk.dialogues import read_dialogues
from care_sdk.errors import BackendError, InputError, OutputError
from care_sdk.report.records import read_records
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
from care_sdk.types import Message

REPO = Path(__file__).resolve().parent.parent


def _profile(pid: str, opening: str = "I can't stop worrying about money.") -> UserProfile:
    return UserProfile(
        id=pid,
        source="test",
        persona="A teacher, 41.",
        situation="Debt after a divorce.",
        goal="Feel less ashamed and plan one call to the bank.",
        opening=opening,
    )


def _user(text: str, *, end: bool = False, emotion: int = 40) -> str:
    return json.dumps({"reply": text, "end": end, "emotion": emotion})


def _profile_of(request: GenerationRequest) -> str:
    return request.messages[0].content


# -- simulated user ----------------------------------------------------------------------------


def test_parse_user_turn_names_the_bad_field() -> None:
    with pytest.raises(ValueError, match="emotion"):
        parse_user_turn('{"reply": "ok", "end": false, "emotion": 400}')
    with pytest.raises(ValueError, match="not JSON"):
        parse_user_turn("sure, happy to help")
    assert parse_user_turn('{"reply": "  fine ", "end": true, "emotion": 0}').reply == "fine"


def test_garbage_is_retried_then_reported() -> None:
    backend = ScriptedBackend(["no json here", _user("Thanks.")])
    sim = SimulatedUser(backend, max_attempts=2)
    assert sim.respond(_profile("p"), [_profile("p").first_message()]).reply == "Thanks."
    assert len(backend.requests) == 2
    always_bad = SimulatedUser(ScriptedBackend(lambda r: "garbage"), max_attempts=2)
    with pytest.raises(OutputError) as err:
        always_bad.respond(_profile("p"), [_profile("p").first_message()])
    assert err.value.attempts == 2 and err.value.raw == "garbage"


def test_simulator_prompt_carries_the_profile_and_the_language() -> None:
    sim = SimulatedUser(ScriptedBackend([]), max_profile_chars=20)
    zh = UserProfile(
        id="z",
        source="sage",
        language="zh",
        persona="很长的人物设定" * 10,
        situation="s",
        goal="g",
        opening="最近压力很大",
    )
    request = sim.request(zh, [zh.first_message(), Message(role="assistant", content="I'm here.")])
    system, user = request.messages
    assert "Simplified Chinese" in system.content and "..." in system.content
    assert user.content.splitlines()[1:3] == ["You: 最近压力很大", "Supporter: I'm here."]
    assert request.json_schema is not None and request.json_schema["required"] == ["reply", "end", "emotion"]


# -- episodes ----------------------------------------------------------------------------------


def test_a_failing_simulated_user_ends_only_its_own_episode() -> None:
    """Garbage for one profile, a timeout for another: both end with a reason; the rest go on."""

    def simulate(request: GenerationRequest) -> str | BackendError:
        system = _profile_of(request)
        if "garbage" in system:
            return "}} not json"
        if "timeout" in system:
            return BackendError("no response within 5s", retryable=True, provider="openai")
        return _user("Maybe you're right.")

    profiles = [
        _profile("ok-1"),
        UserProfile(id="bad", source="t", persona="garbage", situation="s", goal="g", opening="hi"),
        UserProfile(id="slow", source="t", persona="timeout", situation="s", goal="g", opening="hello"),
        _profile("ok-2"),
    ]
    policy = BackendPolicy(ScriptedBackend(lambda r: "That sounds heavy."))
    episodes = run_episodes(profiles, policy, SimulatedUser(ScriptedBackend(simulate), max_attempts=2), max_turns=3)
    by_id = {e.profile_id: e for e in episodes}
    assert by_id["bad"].end_reason == "simulator_error" and "OutputError" in (by_id["bad"].error or "")
    assert by_id["slow"].end_reason == "simulator_error" and "no response within 5s" in (by_id["slow"].error or "")
    assert by_id["bad"].policy_turns == 1 and [m.role for m in by_id["bad"].messages] == ["user", "assistant"]
    for ok in ("ok-1", "ok-2"):
        assert by_id[ok].end_reason == "max_turns" and by_id[ok].error is None
        assert by_id[ok].policy_turns == 3 and by_id[ok].emotions == (None, 40, 40)


def test_the_user_may_end_and_the_policy_may_fail() -> None:
    sim = SimulatedUser(ScriptedBackend(lambda r: _user("Thank you, bye.", end=True, emotion=80)))
    [ended] = run_episodes([_profile("p")], BackendPolicy(ScriptedBackend(["Here for you."])), sim, max_turns=4)
    assert ended.end_reason == "user_ended" and ended.messages[-1].content == "Thank you, bye."
    broken = BackendPolicy(ScriptedBackend([BackendError("HTTP 500", provider="openai")]))
    [failed] = run_episodes([_profile("p")], broken, sim, max_turns=2, system_prompt="Be kind.")
    assert failed.end_reason == "policy_error" and failed.policy_turns == 0


def test_the_policy_sees_its_system_prompt_but_the_episode_does_not() -> None:
    backend = ScriptedBackend(lambda r: "Go on.")
    sim = SimulatedUser(ScriptedBackend(lambda r: _user("Okay.")))
    [episode] = run_episodes([_profile("p")], BackendPolicy(backend), sim, max_turns=2, system_prompt="SYS")
    assert [m.role for m in backend.requests[1].messages] == ["system", "user", "assistant", "user"]
    assert all(m.role != "system" for m in episode.messages)


# -- reward variants and the TRL reward ---------------------------------------------------------


def test_variants_change_the_rubric_as_documented() -> None:
    gen = RubricGenerator(ScriptedBackend(lambda r: rubric_json({"cognitive": 2, "affective": 1, "proactive": 1})))
    ev = RubricEvaluator(ScriptedBackend(lambda r: evaluation_json([5] * 6)))
    ctx, reply = "I lost my job.", "That is a shock. What happened?"
    full = AdaptiveReward(gen, ev, variant="full").score(ctx, reply).rubric
    uniform = AdaptiveReward(gen, ev, variant="uniform_weights").score(ctx, reply).rubric
    fixed = AdaptiveReward(gen, ev, variant="fixed_criteria").score(ctx, reply).rubric
    rubric = AdaptiveReward(evaluator=ev, variant="fixed_rubric").score(ctx, reply).rubric
    assert full is not None and uniform is not None and fixed is not None and rubric is not None
    assert full.weights[full.top_dimension] == 0.5 and uniform.criteria == full.criteria
    assert list(uniform.weights.values()) == pytest.approx([1 / 3] * 3)
    assert fixed.weights == full.weights and fixed.criteria == rubric.criteria != full.criteria


def test_episode_reward_logs_terms_and_writes_files_care_score_and_plots_read(tmp_path: Path) -> None:
    ev = RubricEvaluator(ScriptedBackend(lambda r: evaluation_json([5, 5, 3, 3, 1, 1])))
    care = AdaptiveReward(evaluator=ev, variant="fixed_rubric")
    sim = SimulatedUser(ScriptedBackend(lambda r: _user("Hm.")))
    episodes = run_episodes(
        [_profile("a"), _profile("b")], BackendPolicy(ScriptedBackend(lambda r: "I see.")), sim, max_turns=2
    )
    recorder = EpisodeRecorder(tmp_path, variant="fixed_rubric", emotions={"a": "anxiety"})
    reward = PolicyReward(care, multi_turn=True, how="mean", recorder=recorder)
    metrics: dict[str, float] = {}
    extra: dict[str, list[object]] = {}
    rewards = reward(
        ["p", "p"],
        ["c", "c"],
        episode=[e.model_dump(mode="json") for e in episodes],
        log_metric=metrics.__setitem__,
        log_extra=extra.__setitem__,
    )
    assert rewards == [0.5, 0.5]
    assert metrics["care/score/cognitive"] == 1.0 and metrics["care/score/proactive"] == 0.0
    assert metrics["care/episode/turns"] == 2 and metrics["care/episode/max_turns"] == 1.0
    assert extra["care/end_reason"] == ["max_turns", "max_turns"]
    lines = list(read_dialogues(recorder.dialogues_path))
    assert [x.error for x in lines] == [None, None] and len(list(lines[0].dialogue.turns())) == 2  # type: ignore[union-attr]
    turns = read_records(recorder.turns_path)
    assert not turns.issues and len(turns.records) == 4
    assert [r["turn_number"] for r in turns.records] == [1, 2, 1, 2]
    assert turns.records[0]["emotion"] == "anxiety" and turns.records[0]["variant"] == "fixed_rubric"


def test_an_unscorable_turn_gives_none_not_zero(tmp_path: Path) -> None:
    ev = RubricEvaluator(ScriptedBackend(lambda r: "not json"), max_attempts=1)
    reward = PolicyReward(AdaptiveReward(evaluator=ev, variant="fixed_rubric"), multi_turn=False)
    metrics: dict[str, float] = {}
    out = reward([[{"role": "user", "content": "hi"}]], ["hello"], log_metric=metrics.__setitem__)
    assert out == [None] and metrics["care/failed"] == 1.0


# -- data --------------------------------------------------------------------------------------


def test_profiles_from_esconv_and_sage(data_dir: Path) -> None:
    en = esconv_profiles(data_dir / "esconv" / "test.jsonl", limit=20)
    assert len(en) == 20 and all(p.language == "en" and p.opening and p.goal for p in en)
    zh = sage_profiles(data_dir / "sage_rlver" / "profiles" / "simulator_profile_withfirsttalk.jsonl")
    assert len(zh) == 100 and zh[0].language == "zh" and zh[0].opening
    train, held = split_profiles(zh, "train"), split_profiles(zh, "held_out")
    assert len(train) + len(held) == 100 and 5 <= len(held) <= 40
    assert not {p.id for p in train} & {p.id for p in held}
    assert split_profiles(zh, "held_out") == held  # stable


def test_prompt_rows_from_esconv_and_jsonl(data_dir: Path, tmp_path: Path) -> None:
    rows = prompt_rows(PromptSettings(source="esconv", max_dialogues=3, turns_per_dialogue=2), "SYS", str(data_dir))
    assert 3 <= len(rows) <= 6
    assert rows[0]["prompt"][0] == {"role": "system", "content": "SYS"} and rows[0]["prompt"][1:] == rows[0]["context"]
    assert all(r["context"][-1]["role"] == "user" for r in rows)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "messages": [{"role": "bot", "content": "x"}]}\n')
    with pytest.raises(InputError, match=r"bad.jsonl: the data has no declared role"):
        prompt_rows(PromptSettings(source="jsonl", path=str(bad)), None)
    write_roles(tmp_path, {"*.jsonl": "train"})
    with pytest.raises(InputError, match=r"bad.jsonl:line 1"):
        prompt_rows(PromptSettings(source="jsonl", path=str(bad)), None)
    with pytest.raises(InputError, match=r"esconv/test.jsonl: refusing to use selection data as training prompts"):
        prompt_rows(PromptSettings(source="esconv", path=str(data_dir / "esconv" / "test.jsonl")), None)


# -- configs and CLI ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted((REPO / "training" / "configs").glob("policy_*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_load(path: Path) -> None:
    cls = EvalPolicyConfig if path.name.startswith("policy_eval") else PolicyGRPOConfig
    load_config(cls, path)


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("model: tiny\noutput_dir: out\nepisode: {max_turn: 2}\n")
    with pytest.raises(Exception, match=r"c.yaml: episode.max_turn: unknown key"):
        load_config(PolicyGRPOConfig, path)


def test_cli_adds_policy_stages_to_the_train_group() -> None:
    from care_lab.training.cli import add_train_commands
    from care_lab.training.policy.cli import add_policy_commands

    parser = argparse.ArgumentParser(prog="care")
    sub = parser.add_subparsers(dest="command")
    add_train_commands(sub)
    add_policy_commands(sub)
    assert parser.parse_args(["train", "policy-grpo", "--config", "x.yaml"]).func.__name__ == "_policy_grpo"
    assert parser.parse_args(["train", "sft", "--config", "x.yaml"]).func.__name__ == "_sft"


def test_backend_pool_shares_one_backend_per_spec() -> None:
    pool = BackendPool({"default": ScriptedBackend([])})
    assert pool.get("default") is pool.get("default")


def test_episode_tokens_equal_the_chat_template_rendering() -> None:
    """Prompt + policy turns + user turns (as TokenPolicy joins them) is what the template renders."""
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from care_lab.training.models import tiny_model_dir
    from care_lab.training.policy.tokens import user_turn_ids

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir()), local_files_only=True)
    conversation = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "I failed again."}]
    prompt = tok.apply_chat_template(conversation, tokenize=True, add_generation_prompt=True, return_dict=False)
    reply = [*tok.encode("What happened?", add_special_tokens=False), tok.eos_token_id]
    joined = list(prompt) + reply + user_turn_ids(tok, "My driving test.")
    full = [
        *conversation,
        {"role": "assistant", "content": "What happened?"},
        {"role": "user", "content": "My driving test."},
    ]
    rendered = tok.apply_chat_template(full, tokenize=True, add_generation_prompt=True, return_dict=False)
    assert joined == list(rendered)
