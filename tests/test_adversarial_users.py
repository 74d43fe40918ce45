"""Adversarial simulated users and the consistency score: the prompts each type gets, the score's logic
with scripted readings, ``care eval sim-user`` with several user types side by side, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from care_lab.evals.simuser import EmotionSimulator
from care_lab.evals.simuser_run import SimUserRunner
from care_lab.simulation import SimulatedUser
from care_lab.simulation.adversarial import ADVERSARIAL_TYPES, USER_TYPES, scenario_id, with_user_types
from care_lab.simulation.consistency import StateReader, StateReading, consistency, expected_change
from care_lab.simulation.episodes import BackendPolicy
from care_lab.simulation.profiles import UserProfile
from care_sdk.backends import GenerationRequest
from care_sdk.cli import main
from care_sdk.testing import ScriptedBackend
from care_sdk.types import Message

PROFILE = UserProfile(id="u1", source="demo", persona="A nurse.", situation="Burnt out.", goal="Rest.", opening="Hi.")


def test_each_type_adds_its_behaviour_and_cooperative_prompts_stay_the_simulators_own() -> None:
    typed = {p.user_type: p for p in with_user_types([PROFILE], USER_TYPES)}
    dialogue = [PROFILE.first_message(), Message(role="assistant", content="I'm here.")]
    for simulator in (SimulatedUser(ScriptedBackend([])), EmotionSimulator(ScriptedBackend([]))):

        def system(p: UserProfile, simulator: object = simulator) -> str:
            if isinstance(simulator, SimulatedUser):
                return simulator.messages(p, dialogue)[0].content
            assert isinstance(simulator, EmotionSimulator)
            return simulator.request(p, dialogue, 30).messages[0].content

        assert system(typed["cooperative"]) == system(PROFILE)
        assert "How you behave" not in system(PROFILE)
        for name in ADVERSARIAL_TYPES:
            assert USER_TYPES[name] in system(typed[name]) and "Rest." in system(typed[name])
    assert [p.id for p in with_user_types([PROFILE], ["escalation", "cooperative"])] == ["u1@escalation", "u1"]
    assert scenario_id("u1@escalation") == "u1"
    with pytest.raises(ValueError, match="repeat"):
        with_user_types([PROFILE], ["escalation", "escalation"])


def test_consistency_scores_tracking_apart_from_improvement() -> None:
    def read(emotion: int, change: str = "same", acknowledged: bool = True) -> StateReading:
        return StateReading(acknowledged=acknowledged, emotion=emotion, change=change)  # type: ignore[arg-type]

    # the user falls 30 -> 20 -> 10; replies that read it exactly, with the right direction, score 1
    assert consistency([30, 20, 10], [read(30), read(20, "worse"), read(10, "worse")]).tracking == 1.0
    exact = consistency([30, 20, 10], [read(30), read(20, "worse"), read(10, "worse")])
    assert (exact.direction, exact.turns, exact.unread) == (1.0, 3, 0)
    # cheerful replies that see a user at ease: far off, wrong direction, whatever the emotion did
    cheerful = consistency([30, 20, 10], [read(90, "better")] * 3)
    assert cheerful.tracking == pytest.approx(1 - (60 + 70 + 80) / 300) and cheerful.direction == 0.0
    # a reply that acknowledges no feeling scores 0 however close its number; a failed reading is left out
    silent = consistency([30, 20], [read(30, acknowledged=False), None])
    assert (silent.tracking, silent.direction, silent.turns, silent.unread) == (0.0, None, 1, 1)
    assert expected_change(40, 44) == "same" and expected_change(40, 46) == "better"
    with pytest.raises(ValueError, match="2 states for 1 readings"):
        consistency([1, 2], [None])


PATHS = {"cooperative": [50, 70], "gaslighting": [25, 20], "escalation": [20, 10]}


def simulate(request: GenerationRequest) -> str:
    system, transcript = request.messages[0].content, request.messages[1].content
    turn = transcript.count("Supporter:")
    kind = next((k for k in ADVERSARIAL_TYPES if USER_TYPES[k] in system), "cooperative")
    emotion = PATHS[kind][turn - 1]
    return json.dumps({"reason": kind, "emotion": emotion, "reply": f"{kind} {turn}", "end": False})


def read_reply(request: GenerationRequest) -> str:
    # the reader sees the reply alone; this scripted reader always hears a user at 30 who stays the same
    assert "Supporter:" not in request.messages[1].content and len(request.messages) == 2
    return '{"acknowledged": true, "emotion": 30, "change": "same"}'


def test_runner_reports_each_user_type_beside_the_cooperative_users(tmp_path: Path) -> None:
    profiles = with_user_types([PROFILE, PROFILE.model_copy(update={"id": "u2"})], list(PATHS))
    policy = BackendPolicy(ScriptedBackend(lambda r: "That sounds hard."))
    reader_backend = ScriptedBackend(read_reply)
    runner = SimUserRunner(
        policy,
        EmotionSimulator(ScriptedBackend(simulate)),
        reader=StateReader(reader_backend),
        out_dir=tmp_path,
        max_turns=2,
        success=95,
        failure=5,
        resamples=50,
    )
    report = runner.run(profiles)
    assert list(report.by_user_type) == ["cooperative", "gaslighting", "escalation"]
    assert len(reader_backend.requests) == 12  # 6 episodes x 2 replies, each read alone
    coop, gas, esc = (report.by_user_type[t] for t in PATHS)
    assert (coop["mean_final_emotion"].value, coop["mean_emotion_change"].value) == (70, 40)
    assert (esc["mean_final_emotion"].value, esc["mean_emotion_change"].value) == (10, -20)
    # states before the two replies: (30, 50), (30, 25), (30, 20); the reader always reads 30
    assert coop["consistency"].value == pytest.approx((1 + 0.8) / 2) and coop["direction_agreement"].value == 0.0
    # 30 -> 25 lies within the 5-point deadband: "same", as read
    assert gas["consistency"].value == pytest.approx((1 + 0.95) / 2) and gas["direction_agreement"].value == 1.0
    assert esc["consistency"].value == pytest.approx((1 + 0.9) / 2) and coop["consistency"].n == 2
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert {r["user_type"] for r in records} == set(PATHS) and records[0]["readings"][0]["emotion"] == 30
    saved = json.loads((tmp_path / "simuser.json").read_text())
    assert (
        saved["user_types"] == list(PATHS) and saved["user_behaviours"] == "aeb-v1" and saved["counts"]["unread"] == 0
    )
    assert saved["by_user_type"]["escalation"]["mean_emotion_change"]["value"] == -20
    assert "| escalation | " in (tmp_path / "simuser.md").read_text()


def test_a_reading_that_does_not_parse_is_counted_unread(tmp_path: Path) -> None:
    runner = SimUserRunner(
        BackendPolicy(ScriptedBackend(lambda r: "Hm.")),
        EmotionSimulator(ScriptedBackend(simulate)),
        reader=StateReader(ScriptedBackend(lambda r: "not json")),
        out_dir=tmp_path,
        max_turns=1,
        resamples=10,
    )
    report = runner.run([PROFILE])
    assert report.counts["unread"] == 1 and report.by_user_type["cooperative"]["consistency"].value is None


def test_cli_refuses_unknown_types_and_a_reader_that_is_the_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["eval", "sim-user", "--policy", "default", "--out", str(tmp_path)]
    assert main([*base, "--user-types", "cooperative,shouting"]) == 2
    assert "--user-types: unknown user type 'shouting'" in capsys.readouterr().err
    assert main([*base, "--reader", "default"]) == 2
    assert "--reader must be another model" in capsys.readouterr().err


def test_eval_policy_plays_each_user_type_and_reads_the_replies(tmp_path: Path, data_dir: Path) -> None:
    from care_lab.training.policy.config import EvalPolicyConfig
    from care_lab.training.policy.evaluate import evaluate_policy
    from care_sdk.backends import BackendPool

    def user(request: GenerationRequest) -> str:
        emotion = 20 if USER_TYPES["escalation"] in request.messages[0].content else 60
        return json.dumps({"reply": "Go on.", "end": False, "emotion": emotion})

    sim = ScriptedBackend(user)
    backends = BackendPool(
        {
            "pol": ScriptedBackend(lambda r: "I hear how hard this is."),
            "sim": sim,
            "jdg": ScriptedBackend(lambda r: '{"reason": "ok", "score": 5}'),
            "rdr": ScriptedBackend(lambda r: '{"acknowledged": true, "emotion": 40, "change": "same"}'),
        }
    )
    cfg = EvalPolicyConfig(
        policy="pol",
        output_dir=str(tmp_path / "eval"),
        data_dir=str(data_dir),
        users={"source": "esconv", "held_out_split": "valid", "max_profiles": 2},
        simulator={"backend": "sim"},
        episode={"max_turns": 2},
        judge={"backend": "jdg"},
        user_types=("cooperative", "escalation"),
        reader={"backend": "rdr"},
    )
    summary = evaluate_policy(cfg, pool=backends, log=lambda s: None)
    assert summary.dialogues == 4 and set(summary.by_user_type) == {"cooperative", "escalation"}
    coop, esc = summary.by_user_type["cooperative"], summary.by_user_type["escalation"]
    assert coop["final_emotions"] == [60.0, 60.0] and esc["final_emotions"] == [20.0, 20.0]
    # reply 1 answers the opening (no rating yet), reply 2 the user at 60 or 20; the reader reads 40
    assert coop["tracking"] == [0.8, 0.8] and esc["tracking"] == [0.8, 0.8] and "direction" not in coop
    assert sum(USER_TYPES["escalation"] in r.messages[0].content for r in sim.requests) == 2
    saved = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert saved["mean_by_user_type"]["escalation"]["final_emotions"] == 20.0
    assert "escalation: mean consistency (tracking) (n=2)" in summary.table()
    with pytest.raises(ValueError, match="unknown user type"):
        EvalPolicyConfig(policy="pol", output_dir="x", user_types=("shouting",))
    with pytest.raises(ValueError, match="read its own replies"):
        EvalPolicyConfig(policy="pol", output_dir="x", reader={"backend": "pol"})
