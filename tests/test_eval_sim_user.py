"""``care eval sim-user``: success, failure and errors with a scripted simulator, the emotion fed back
each turn, resume, refusals, and the command on the bundled model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from care_lab.evals.simuser import EmotionSimulator, run_sim_episodes
from care_lab.evals.simuser_run import SimUserRunner
from care_lab.simulation.episodes import BackendPolicy
from care_lab.simulation.judge import DialogueJudge
from care_lab.simulation.profiles import UserProfile
from care_sdk.backends import GenerationRequest
from care_sdk.cli import main
from care_sdk.errors import ConfigError
from care_sdk.testing import ScriptedBackend

PATHS = {"rise": [50, 85], "fall": [20, 5], "flat": [40, 41, 42]}


def simulate(request: GenerationRequest) -> str:
    system, transcript = request.messages[0].content, request.messages[1].content
    turn = transcript.count("Supporter:")
    kind = next((k for k in (*PATHS, "broken") if f"[{k}]" in system), "flat")
    if kind == "broken":
        return "not json"
    emotion = PATHS[kind][min(turn, len(PATHS[kind])) - 1]
    return json.dumps({"reason": f"turn {turn} felt {kind}", "emotion": emotion, "reply": "Hm.", "end": False})


def profile(kind: str) -> UserProfile:
    return UserProfile(id=kind, source="demo", persona=f"[{kind}]", situation="s", goal="g", opening="I'm struggling.")


PROFILES = [profile(k) for k in ("rise", "fall", "flat", "broken")]


def policy() -> BackendPolicy:
    return BackendPolicy(ScriptedBackend(lambda r: "I hear you."))


def test_episodes_end_at_the_thresholds_and_errors_stay_apart() -> None:
    backend = ScriptedBackend(simulate)
    episodes = run_sim_episodes(PROFILES, policy(), EmotionSimulator(backend), max_turns=3, success=80, failure=10)
    by = {e.id: e for e in episodes}
    assert (by["rise"].status, by["rise"].final_emotion, len(by["rise"].trace)) == ("success", 85, 2)
    assert (by["fall"].status, by["fall"].final_emotion) == ("failure", 5)
    assert (by["flat"].status, by["flat"].end_reason, by["flat"].final_emotion) == ("neither", "max_turns", 42)
    assert by["broken"].status == "error" and "simulated user" in (by["broken"].error or "")
    assert by["rise"].trace[1] == {"turn": 2, "emotion": 85, "reason": "turn 2 felt rise"}
    # the simulator sees its current emotion: 30 at first, then what it said last
    rise = [r.messages[0].content for r in backend.requests if "[rise]" in r.messages[0].content]
    assert "It is now 30." in rise[0] and "It is now 50." in rise[1]
    with pytest.raises(ValueError, match="thresholds"):
        run_sim_episodes(PROFILES, policy(), EmotionSimulator(backend), success=10, failure=50)


def test_runner_reports_rates_and_resumes(tmp_path: Path) -> None:
    judge = DialogueJudge(ScriptedBackend(lambda r: '{"reason": "ok", "score": 6}'))
    run = SimUserRunner(
        policy(), EmotionSimulator(ScriptedBackend(simulate)), judge=judge, out_dir=tmp_path, max_turns=3
    )
    report = run.run(PROFILES)
    assert report.counts == {"success": 1, "failure": 1, "neither": 1, "error": 1, "unjudged": 0}
    assert report.metrics["success_rate"].value == pytest.approx(1 / 3) and report.metrics["success_rate"].n == 3
    assert report.metrics["failure_rate"].value == pytest.approx(1 / 3)
    assert report.metrics["mean_final_emotion"].value == pytest.approx((85 + 5 + 42) / 3)
    assert report.metrics["mean_judge_score"].value == 6
    saved = json.loads((tmp_path / "simuser.json").read_text())
    assert saved["settings"]["success"] == 80 and saved["judge"].startswith("scripted")
    assert "| success rate | 3 | 0.333 [" in (tmp_path / "simuser.md").read_text()
    again_sim = ScriptedBackend(simulate)
    again = SimUserRunner(policy(), EmotionSimulator(again_sim), judge=judge, out_dir=tmp_path, max_turns=3).run(
        PROFILES
    )
    assert again.scored == 1 and again.reused == 3  # only the episode that failed is rolled out again
    assert all("[broken]" in r.messages[0].content for r in again_sim.requests)
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == 4
    other = SimUserRunner(
        policy(), EmotionSimulator(ScriptedBackend(simulate)), judge=judge, out_dir=tmp_path, success=90
    )
    with pytest.raises(ConfigError, match="another settings"):
        other.run(PROFILES)


def test_cli_refuses_a_policy_that_plays_its_own_user(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "sim-user", "--policy", "base", "--simulator", "base", "--out", str(tmp_path)]) == 2
    assert "--simulator must be another model" in capsys.readouterr().err


def test_cli_refuses_training_profiles(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "users.jsonl").write_text("{}\n")
    (tmp_path / "roles.json").write_text('{"users.jsonl": "train"}')
    argv = [
        "eval",
        "sim-user",
        "--policy",
        "default",
        "--profiles",
        str(tmp_path / "users.jsonl"),
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 2
    assert "refusing to evaluate on train data" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_sim_user_on_the_bundled_model(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s"
    argv = [
        "eval", "sim-user", "--policy", "default", "--simulator", "base", "--judge", "base", "--limit", "1",
        "--max-turns", "1", "--policy-max-tokens", "24", "--simulator-max-tokens", "96", "--judge-max-tokens", "64",
        "--data-dir", str(data_dir), "--out", str(out), "--quiet", "--resamples", "50",
    ]  # fmt: skip
    code = main(argv)
    assert "| mean final emotion | " in capsys.readouterr().out
    record = json.loads((out / "records.jsonl").read_text())
    assert record["status"] in ("success", "failure", "neither", "error")
    assert (record["status"] == "error") == (record["error"] is not None)
    if record["status"] != "error":
        assert 0 <= record["final_emotion"] <= 100 and record["trace"][0]["reason"]
    report = json.loads((out / "simuser.json").read_text())
    assert report["data"] and report["cpu_seconds_per_episode"] > 0
    assert (report["role"], report["test_reads"]) == ("eval-only", 0)  # the SAGE profiles
    assert code == (1 if report["counts"]["error"] or report["counts"]["unjudged"] or report["counts"]["unread"] else 0)
    # the state reader (the simulator's spec by default) read the policy's reply
    assert "reader-v1" in report["reader"]
    assert "cooperative" in report["by_user_type"] and "consistency" in report["by_user_type"]["cooperative"]
