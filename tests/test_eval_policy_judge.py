"""``care train eval-policy`` judges with an independent judge by default; the training reward only
when asked, and labelled as such. Scripted backends for the logic, the bundled model for one episode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from care_lab.simulation.judge import DialogueJudge, parse_verdict
from care_lab.training.policy.config import EvalPolicyConfig
from care_lab.training.policy.evaluate import TRAINING_REWARD_LABEL, evaluate_policy
from care_sdk.backends import BackendPool, GenerationRequest
from care_sdk.testing import ScriptedBackend
from care_sdk.types import Message


def never(request: GenerationRequest) -> str:
    raise AssertionError(f"the training reward was called: {request.purpose}")


def pool(judge_replies: Any) -> BackendPool:
    return BackendPool(
        {
            "pol": ScriptedBackend(lambda req: "That sounds hard. What happened?"),
            "sim": ScriptedBackend(lambda req: '{"reply": "It was my exam.", "end": false, "emotion": 55}'),
            "jdg": ScriptedBackend(judge_replies),
            "gen": ScriptedBackend(never),
            "ev": ScriptedBackend(never),
        }
    )


def config(tmp_path: Path, data_dir: Path, **kw: Any) -> EvalPolicyConfig:
    return EvalPolicyConfig(
        policy="pol",
        output_dir=str(tmp_path / "eval"),
        data_dir=str(data_dir),
        users={"source": "esconv", "max_profiles": 2},
        simulator={"backend": "sim"},
        episode={"max_turns": 2},
        reward={"generator": "gen", "evaluator": "ev"},
        **kw,
    )


def test_the_default_judge_is_independent_of_the_training_reward(tmp_path: Path, data_dir: Path) -> None:
    backends = pool(lambda req: '{"reason": "It listened.", "score": 7}')
    cfg = config(tmp_path, data_dir, judge={"backend": "jdg"})
    summary = evaluate_policy(cfg, pool=backends, log=lambda s: None)
    assert summary.judge_kind == "independent" and summary.judge.startswith("independent: scripted")
    assert summary.judge_scores == [7, 7] and summary.failed_judgements == 0
    assert summary.final_emotions == [55, 55] and summary.episode_rewards == []
    lines = [json.loads(x) for x in (tmp_path / "eval" / "dialogues.jsonl").read_text().splitlines()]
    assert [x["judge_score"] for x in lines] == [7, 7] and lines[0]["verdict"]["reason"] == "It listened."
    assert len(lines[0]["messages"]) == 4  # the opening, a policy turn, the user's reply, a policy turn
    assert not (tmp_path / "eval" / "turns.jsonl").exists()
    judge_requests = backends.get("jdg").requests  # type: ignore[attr-defined]
    assert (
        judge_requests[0].purpose == "judge" and "Supporter: That sounds hard" in judge_requests[0].messages[1].content
    )
    table = summary.table()
    assert "mean judge score (1-10)  7.000" in table and "training reward" not in table
    assert json.loads((tmp_path / "eval" / "summary.json").read_text())["mean_judge_score"] == 7.0


def test_an_unparseable_verdict_is_missing_not_zero(tmp_path: Path, data_dir: Path) -> None:
    summary = evaluate_policy(config(tmp_path, data_dir, judge={"backend": "jdg"}), pool=pool(lambda r: "no"))
    assert summary.judge_scores == [] and summary.failed_judgements == 2
    line = json.loads((tmp_path / "eval" / "dialogues.jsonl").read_text().splitlines()[0])
    assert line["judge_score"] is None and "judge" in line["error"]
    assert summary.to_json()["mean_judge_score"] is None


def test_the_training_reward_is_an_explicit_labelled_option(tmp_path: Path, data_dir: Path) -> None:
    from care_sdk.testing import evaluation_json, rubric_json

    def care(req: GenerationRequest) -> str:
        if req.purpose == "evaluation":
            return evaluation_json([5] * 6)
        return rubric_json({"cognitive": 1, "affective": 1, "proactive": 1})

    backends = pool(never)
    backends._built["gen"] = backends._built["ev"] = ScriptedBackend(care)
    cfg = config(tmp_path, data_dir, judge={"kind": "training_reward"})
    summary = evaluate_policy(cfg, pool=backends, log=lambda s: None)
    assert summary.failed_episodes == 0, (tmp_path / "eval" / "dialogues.jsonl").read_text()
    assert summary.judge == TRAINING_REWARD_LABEL and summary.episode_rewards == [1.0, 1.0]
    assert "mean training reward (mean)" in summary.table() and "blind to reward hacking" in summary.table()
    assert (tmp_path / "eval" / "turns.jsonl").exists()


def test_a_judge_that_is_the_training_reward_is_refused() -> None:
    with pytest.raises(ValidationError, match="not an independent judge"):
        EvalPolicyConfig(policy="p", output_dir="o", judge={"backend": "default"})  # reward.evaluator is default
    EvalPolicyConfig(policy="p", output_dir="o", judge={"backend": "default", "kind": "training_reward"})


def test_verdicts_are_bounded() -> None:
    with pytest.raises(ValueError, match="score"):
        parse_verdict('{"reason": "x", "score": 0}')
    request = DialogueJudge(ScriptedBackend([])).request([Message(role="user", content="x" * 1000)])
    assert request.json_schema is not None and request.json_schema["properties"]["reason"]["maxLength"] == 240
    assert "x" * 601 not in request.messages[1].content


@pytest.mark.slow
def test_eval_policy_with_an_independent_judge_on_the_bundled_model(
    llama_backend: Any, data_dir: Path, tmp_path: Path
) -> None:
    backends = BackendPool({"default": llama_backend})
    cfg = EvalPolicyConfig(
        policy="default",
        output_dir=str(tmp_path / "eval"),
        data_dir=str(data_dir),
        policy_max_tokens=24,
        users={"source": "sage", "max_profiles": 1},
        simulator={"max_tokens": 48, "max_reply_chars": 80, "max_profile_chars": 120},
        episode={"max_turns": 1},
        judge={"backend": "base", "max_tokens": 64},
    )
    summary = evaluate_policy(cfg, pool=backends, log=lambda s: None)
    assert summary.dialogues == 1 and summary.judge.startswith("independent: ")
    assert len(summary.judge_scores) + summary.failed_judgements == 1
    line = json.loads((tmp_path / "eval" / "dialogues.jsonl").read_text())
    assert (line["judge_score"] is None) == (line["error"] is not None)
    if line["judge_score"] is not None:
        assert 1 <= line["judge_score"] <= 10
