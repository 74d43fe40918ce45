"""care score's file handling: malformed lines, failures, resume (scripted backend: pure logic)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from care_sdk import AdaptiveReward, Rubric, RubricEvaluator, RubricGenerator
from care_sdk.dialogues import read_dialogues
from care_sdk.score_files import score_file
from care_sdk.testing import ScriptedBackend, candidate_reply, evaluation_json, rubric_json
from scored import records_without_provenance


def dialogue(did: str, turns: int) -> dict[str, object]:
    messages = []
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"{did} user {i}"},
            {"role": "assistant", "content": f"{did} reply {i}"},
        ]
    return {"id": did, "messages": messages}


MALFORMED = [
    ("{not json", "not valid JSON"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}]}), "missing field 'id'"),
    (json.dumps({"id": "m"}), "missing field 'messages'"),
    (json.dumps({"id": "r", "messages": [{"role": "bot", "content": "x"}]}), "messages[0].role"),
    (json.dumps({"id": "e", "messages": []}), "empty dialogue"),
    (json.dumps({"id": "n", "messages": [{"role": "user", "content": "only me"}]}), "no assistant turn"),
    (json.dumps({"id": "c", "messages": [{"role": "user"}]}), "messages[0].content"),
    (json.dumps(["a", "list"]), "expected a JSON object"),
]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def make_reward(fail_on: str | None = None) -> tuple[AdaptiveReward, ScriptedBackend]:
    def evaluate(request: object) -> str:
        text = request.messages[-1].content  # type: ignore[attr-defined]
        if fail_on and candidate_reply(text).endswith(fail_on):
            return "not json"
        score = 1 + sum(map(ord, text)) % 5
        return evaluation_json([score] * 6)

    gen = ScriptedBackend(lambda req: rubric_json({"cognitive": 1, "affective": 2, "proactive": 1}))
    ev = ScriptedBackend(evaluate)
    return AdaptiveReward(RubricGenerator(gen), RubricEvaluator(ev, max_attempts=2)), gen


@pytest.mark.parametrize(("line", "reason"), MALFORMED)
def test_each_malformed_line_is_reported_with_line_and_reason(tmp_path: Path, line: str, reason: str) -> None:
    path = write(tmp_path / "in.jsonl", [json.dumps(dialogue("ok", 1)), line])
    results = list(read_dialogues(path))
    assert results[0].dialogue is not None
    error = results[1].error
    assert error is not None
    assert str(error).startswith(f"{path}:line 2")
    assert reason in str(error)


def test_duplicate_ids_are_reported(tmp_path: Path) -> None:
    path = write(tmp_path / "in.jsonl", [json.dumps(dialogue("a", 1)), "", json.dumps(dialogue("a", 2))])
    errors = [x.error for x in read_dialogues(path) if x.error]
    assert [str(e) for e in errors] == [f"{path}:line 3: duplicate id 'a' (first on line 1)"]


def test_bad_lines_do_not_stop_the_rest(tmp_path: Path) -> None:
    lines = [json.dumps(dialogue("a", 2)), MALFORMED[0][0], json.dumps(dialogue("b", 3))]
    reward, _ = make_reward()
    out = tmp_path / "out.jsonl"
    summary = score_file(write(tmp_path / "in.jsonl", lines), reward, out=out)
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["id"], r["turn"]) for r in records] == [("a", 1), ("a", 3), ("b", 1), ("b", 3), ("b", 5)]
    assert summary.scored == 5 and len(summary.input_errors) == 1 and not summary.ok


def test_failed_turns_are_explicit_and_resume_retries_only_them(tmp_path: Path) -> None:
    lines = [json.dumps(dialogue(d, 2)) for d in ("a", "b", "c")]
    path = write(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    failing, _ = make_reward(fail_on="b reply 1")
    first = score_file(path, failing, out=out)
    records = [json.loads(x) for x in out.read_text().splitlines()]
    failed = [r for r in records if r["reward"] is None]
    assert first.failed == 1 and len(records) == 6
    assert failed[0]["id"] == "b" and failed[0]["turn"] == 3
    assert "evaluation failed" in failed[0]["error"] and failed[0]["rubric"] is not None

    healthy, gen = make_reward()
    second = score_file(path, healthy, out=out)
    assert second.reused == 5 and second.scored == 6 and second.ok
    assert len(gen.requests) == 1  # only the failed turn was recomputed

    fresh_out = tmp_path / "fresh.jsonl"
    score_file(path, make_reward()[0], out=fresh_out)
    assert records_without_provenance(out) == records_without_provenance(fresh_out)


def test_interrupted_output_is_resumed_to_the_same_file(tmp_path: Path) -> None:
    path = write(tmp_path / "in.jsonl", [json.dumps(dialogue(d, 3)) for d in "abcd"])
    full = tmp_path / "full.jsonl"
    score_file(path, make_reward()[0], out=full)
    lines = full.read_text().splitlines()
    partial = tmp_path / "partial.jsonl"
    partial.write_text("\n".join(lines[:5]) + "\n" + lines[5][: len(lines[5]) // 2])  # cut mid-record
    reward, _gen = make_reward()
    summary = score_file(path, reward, out=partial, batch_size=4)
    assert summary.reused == 5
    assert records_without_provenance(partial) == records_without_provenance(full)


def test_fixed_rubric_needs_no_generator(tmp_path: Path) -> None:
    path = write(tmp_path / "in.jsonl", [json.dumps(dialogue("a", 2))])
    ev = ScriptedBackend(lambda req: evaluation_json([5] * 6))
    summary = score_file(path, AdaptiveReward(evaluator=RubricEvaluator(ev), rubric=Rubric.uniform_fixed()))
    assert summary.rewards == [1.0, 1.0]


def test_records_carry_their_provenance_and_the_summary_what_they_cost(tmp_path: Path) -> None:
    path = write(tmp_path / "in.jsonl", [json.dumps(dialogue(d, 2)) for d in "ab"])
    reward, gen = make_reward()
    evaluator = reward.evaluator.backend
    assert isinstance(evaluator, ScriptedBackend)
    out = tmp_path / "out.jsonl"
    summary = score_file(path, reward, out=out)
    records = [json.loads(x) for x in out.read_text().splitlines()]
    made = [r["provenance"] for r in records]
    assert [m["rubric_hash"] for m in made] == [Rubric.model_validate(r["rubric"]).content_hash for r in records]
    assert {m["rubric_source"] for m in made} == {"generated"} and {m["rubric_shared_by"] for m in made} == {1}
    assert {m["generator"] for m in made} == {reward.generator.identity}  # type: ignore[union-attr]
    assert {(m["evaluator"], m["evaluator_prompt"]) for m in made} == {(reward.evaluator.identity, "v2")}
    sent = gen.requests + evaluator.requests
    assert summary.cost is not None and summary.cost.calls == pytest.approx(len(sent)) == 8
    assert summary.cost.prompt_tokens == pytest.approx(sum(len(m.content) for r in sent for m in r.messages))
    assert summary.rubric_sources == {"generated": 4}
    assert "backend calls                 8" in summary.table()


def test_records_written_before_provenance_are_resumed_as_they_are(tmp_path: Path) -> None:
    path = write(tmp_path / "in.jsonl", [json.dumps(dialogue(d, 2)) for d in "ab"])
    out = tmp_path / "out.jsonl"
    score_file(path, make_reward()[0], out=out)
    old = [{k: v for k, v in json.loads(x).items() if k != "provenance"} for x in out.read_text().splitlines()]
    out.write_text("".join(json.dumps(r) + "\n" for r in old[:3]))  # an older file, the last turn missing
    summary = score_file(path, make_reward()[0], out=out)
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert summary.reused == 3 and summary.ok
    assert [r.get("provenance") is not None for r in records] == [False, False, False, True]
    assert summary.cost is not None and summary.cost.calls == 2.0  # only the turn scored now has a cost
