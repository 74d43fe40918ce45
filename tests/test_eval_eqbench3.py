"""``care eval eqbench3``: the benchmark's files and templates, its scoring, the runner (rubric, pairwise in
both orders, failures kept apart, resume) and the command on the bundled model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from care_lab.evals.eqbench3 import load_eqbench3, parse_sections
from care_lab.evals.eqbench3_judge import pairwise_criteria, pairwise_prompt, rubric_prompt, task_rubric_score
from care_lab.evals.eqbench3_run import EqBench3Runner
from care_sdk.backends import GenerationRequest
from care_sdk.cli import main
from care_sdk.errors import BackendError, ConfigError, InputError
from care_sdk.testing import ScriptedBackend

ROLEPLAY_REPLY = (
    "# I'm thinking & feeling\nI feel cornered and {tag}.\n\n"
    "# They're thinking & feeling\nThey are scared of losing face.\n\n"
    "# My response\n**Let's** sit down and talk it through, calmly and honestly, before anything else.\n--"
)
ANALYSIS_REPLY = "The participant shows avoidant attachment and projects blame onto the friend. " * 3


@pytest.fixture(scope="module")
def data(data_dir: Path):  # type: ignore[no-untyped-def]
    return load_eqbench3(data_dir / "eqbench3")


def test_the_published_files_load_as_the_benchmark_reads_them(data) -> None:  # type: ignore[no-untyped-def]
    assert len(data.scenarios) == 45 and sum(len(s.prompts) for s in data.scenarios) == 92
    # scenario 409's only prompt line is "####### 1", which the benchmark's parser skips as well
    assert "409" not in data.scenario_ids and data.skipped["409"].startswith("scenario_prompts.txt:line 1077")
    kinds = {s.id: s.kind for s in data.scenarios}
    assert kinds["1"] == "roleplay" and kinds["208"] == "drafting" and kinds["401"] == "analysis"
    assert [s.debriefed for s in data.select(["1", "401"])] == [True, False]
    assert len(data.criteria["standard"]) == 18 and data.criteria["analysis"][0] == "depth_of_insight"
    assert pairwise_criteria(data.templates["pairwise"])[-1] == "overall_eq"
    assert len(pairwise_criteria(data.templates["pairwise_analysis"])) == 8
    assert data.select(limit=3) == list(data.scenarios[:3])
    with pytest.raises(InputError, match="no scenario 999"):
        data.select(["1", "999"])


def test_a_malformed_prompts_file_is_named_with_its_line(data_dir: Path, tmp_path: Path) -> None:
    for name in (data_dir / "eqbench3").iterdir():
        (tmp_path / name.name).write_text(name.read_text(encoding="utf-8"), encoding="utf-8")
    prompts = tmp_path / "scenario_prompts.txt"
    prompts.write_text("######## 1 | Work | A\n####### Prompt1\nhello\n######## 1 | Work | B\n####### Prompt1\nx\n")
    with pytest.raises(InputError, match=r"scenario_prompts.txt:line 4: missing or repeated scenario id"):
        load_eqbench3(tmp_path)
    prompts.write_text("####### Prompt1\nhello\n")
    with pytest.raises(InputError, match=r"line 1: a prompt before any scenario header"):
        load_eqbench3(tmp_path)
    (tmp_path / "debrief_prompt.txt").unlink()
    with pytest.raises(InputError, match=r"debrief_prompt\.txt: no such file"):
        load_eqbench3(tmp_path)


def test_judge_prompts_show_the_transcript_as_the_benchmark_does(data) -> None:  # type: ignore[no-untyped-def]
    [scenario] = data.select(["1"])
    reply = ROLEPLAY_REPLY.format(tag="x" * 3000)
    parsed = parse_sections("roleplay", reply)
    assert parsed["response"].startswith("**Let's** sit down") and parsed["raw"] == reply
    messages = [{"role": "user", "content": "The #canned prompt"}, {"role": "assistant", "content": reply}]
    rubric = rubric_prompt(data, scenario, messages, [parsed], "My *debrief*.")
    # the rubric judge sees every section whole and the debrief; its answer format lists all 18 criteria at 0-20
    assert "# My response\n**Let's** sit down" in rubric and "x" * 3000 in rubric and "My *debrief*." in rubric
    assert rubric.count(": 0-20") == 18 and "{transcript}" not in rubric
    side = {"messages": messages, "parsed": [parsed], "debrief": "My *debrief*."}
    other = {"messages": messages, "parsed": [parse_sections("roleplay", "no headings at all")], "debrief": None}
    pairwise = pairwise_prompt(data, scenario, side, other)
    # the pairwise judge sees sections cut to their limits, no markdown marks, and the scenario's notes
    assert "x" * 2100 in pairwise and "x" * 2300 not in pairwise and "... [truncated]" in pairwise
    assert "Let's sit down" in pairwise and "My debrief." in pairwise and "[No Debrief Provided]" in pairwise
    assert data.notes["1"][:60] in pairwise and "{conversation_history_B}" not in pairwise


def _policy(tag: str) -> ScriptedBackend:
    def answer(request: GenerationRequest) -> str:
        last = request.messages[-1].content
        if "Ok let's debrief" in last or "out of character" in last:
            return f"Debrief of {tag}: I missed their fear at first."
        return ANALYSIS_REPLY if "[TRANSCRIPT]" in last else ROLEPLAY_REPLY.format(tag=tag)

    return ScriptedBackend(answer, name=tag)


def _judge(request: GenerationRequest) -> str:
    """Rubric: 'strong' transcripts get 15s, others 5s. Pairwise: the respondent showing 'strong' wins, by +++."""
    prompt = request.messages[0].content
    keys = list(request.json_schema["properties"])[1:]  # type: ignore[index]
    if "[RESPONDENT A0493 ANALYSIS]" in prompt:  # identical analyses: this judge always prefers the first one
        return json.dumps({"chain_of_thought_reasoning": "compared", **{k: "A0493+" for k in keys}})
    if "[RESPONDENT A0493]" in prompt:
        winner = "A0493" if "strong" in prompt.split("[/RESPONDENT A0493]")[0] else "A0488"
        return json.dumps({"chain_of_thought_reasoning": "compared", **{k: f"{winner}+++" for k in keys}})
    score = 15 if "strong" in prompt else 5
    return json.dumps({"chain_of_thought_reasoning": "scored", **{k: score if k != "warmth" else 20 for k in keys}})


def test_runner_scores_compares_in_both_orders_and_resumes(data, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scenarios = data.select(["1", "401"])
    judge = ScriptedBackend(_judge, name="judge")
    policies = {"strong": _policy("strong"), "weak": _policy("weak")}
    runner = EqBench3Runner(policies, judge, data, out_dir=tmp_path, resamples=50)
    report = runner.run(scenarios)
    assert report.counts["strong"] == {"complete": 2, "incomplete": 0, "error": 0, "rubric_error": 0}
    # role-play: 6 scored criteria at 15 (warmth, a style descriptor, is left out) -> 15 x 5 = 75; analysis: no
    # "strong" in its transcript -> 5 x 5 = 25; the run's score is the mean over scenarios
    assert report.rubric["strong"].value == pytest.approx(50.0) and report.rubric["weak"].value == pytest.approx(25.0)
    assert report.criteria["strong"]["warmth"] == 20.0
    row = report.pairwise["strong vs weak"]
    # role-play: 'strong' wins both orders by 8 x 3 pluses (0.5 + 24/60); analysis: A0493 always wins (position
    # bias), which the two orders cancel out
    assert (row["comparisons"], row["won"], row["tied"], row["lost"]) == (4, 3, 0, 1)
    assert row["fraction"].value == pytest.approx((0.9 + 0.9 + (0.5 + 8 / 60) + (0.5 - 8 / 60)) / 4)
    turns = [r for r in policies["strong"].requests if r.purpose == "eqbench3 respondent"]
    assert len(turns) == 3 + 1 + 1  # scenario 1: three turns and the debrief; scenario 401: one turn
    # the two scenarios advance together; the debrief comes last, after the whole role-play, at 0.5
    assert [m.role for m in turns[-1].messages] == ["user", "assistant"] * 3 + ["user"]
    assert [r.temperature for r in turns] == [0.7] * 4 + [0.5]
    record = json.loads((tmp_path / "transcripts.jsonl").read_text().splitlines()[0])
    assert record["debrief"].startswith("Debrief of strong") and len(record["messages"]) == 6
    assert (tmp_path / "eqbench3.md").read_text().startswith("| policy | scenarios judged |")
    assert "Time per item" in report.markdown() and report.meta["data"]
    # everything is done: a re-run asks nothing
    calls = len(judge.requests), len(policies["strong"].requests)
    again = EqBench3Runner(policies, judge, data, out_dir=tmp_path, resamples=50).run(scenarios)
    assert (len(judge.requests), len(policies["strong"].requests)) == calls
    assert again.rubric["strong"].value == report.rubric["strong"].value
    with pytest.raises(ConfigError, match="another judge"):
        EqBench3Runner(policies, ScriptedBackend(_judge, name="other"), data, out_dir=tmp_path).run(scenarios)


def test_failures_are_kept_apart_and_redone_on_resume(data, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scenarios = data.select(["1", "2", "401"])
    broken = {"on": True}

    def judge(request: GenerationRequest) -> str:
        return "not json at all" if broken["on"] and "flirt" in str(request.messages).lower() else _judge(request)

    def policy(request: GenerationRequest) -> str | BackendError:
        last = request.messages[-1].content
        if "lunchroom" in str(request.messages).lower() and broken["on"]:
            return BackendError("server down")
        return "Too short." if "[TRANSCRIPT]" in last else ROLEPLAY_REPLY.format(tag="weak")

    judge_backend = ScriptedBackend(judge, name="judge")
    runner = EqBench3Runner({"p": ScriptedBackend(policy)}, judge_backend, data, out_dir=tmp_path, pairwise=False)
    report = runner.run(scenarios)
    # scenario 1 (lunchroom): the policy failed; 401: every reply under 100 characters, not judged; 2: the
    # judge's replies never parsed (tried twice); nothing is scored as 0
    assert report.counts["p"] == {"complete": 1, "incomplete": 1, "error": 1, "rubric_error": 1}
    assert report.rubric["p"].value is None and report.rubric["p"].n == 0
    records = {r["scenario"]: r for r in map(json.loads, (tmp_path / "transcripts.jsonl").read_text().splitlines())}
    assert "server down" in records["1"]["error"] and "not JSON" in records["2"]["rubric_error"]
    assert sum(1 for r in judge_backend.requests if "flirt" in str(r.messages).lower()) == 2
    broken["on"] = False
    report = EqBench3Runner({"p": ScriptedBackend(policy)}, judge_backend, data, out_dir=tmp_path, pairwise=False).run(
        scenarios
    )
    assert report.counts["p"] == {"complete": 2, "incomplete": 1, "error": 0, "rubric_error": 0}
    assert report.rubric["p"].n == 2
    assert task_rubric_score({"warmth": 3.0}) is None


def test_cli_refuses_repeated_labels_and_unknown_scenarios(data_dir: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    base = ["eval", "eqbench3", "--data-dir", str(data_dir), "--out", str(tmp_path)]
    assert main([*base, "--policy", "a=base", "--policy", "a=default"]) == 2
    assert "--policy labels must be unique" in capsys.readouterr().err
    assert main([*base, "--policy", "base", "--scenarios", "1,777"]) == 2
    assert re.search(r"scenario_prompts.txt: no scenario 777", capsys.readouterr().err)


@pytest.mark.slow
def test_cli_eqbench3_on_the_bundled_model(data_dir: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "eq"
    argv = [
        "eval", "eqbench3", "--policy", "first=base", "--policy", "second=default", "--judge", "base",
        "--scenarios", "405", "--max-tokens", "48", "--judge-max-tokens", "200", "--max-reasoning-chars", "120",
        "--data-dir", str(data_dir), "--out", str(out), "--quiet", "--resamples", "50",
    ]  # fmt: skip
    code = main(argv)
    assert "| comparison | comparisons |" in capsys.readouterr().out
    report = json.loads((out / "eqbench3.json").read_text())
    records = [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]
    assert [r["policy"] for r in records] == ["first", "second"] and all(r["status"] != "error" for r in records)
    for record in records:
        if record["rubric"] is not None:
            assert set(record["rubric"]["scores"]) == set(report["criteria"][record["policy"]])
            assert all(0 <= v <= 20 for v in record["rubric"]["scores"].values())
    comparisons = [json.loads(line) for line in (out / "pairwise.jsonl").read_text().splitlines()]
    assert {c["order"] for c in comparisons} <= {"forward", "reversed"}
    assert report["seconds_per_item"]["transcript"] > 0 and report["cpu_seconds_per_item"]["transcript"] > 0
    failed = sum(c["error"] + c["rubric_error"] for c in report["counts"].values())
    assert code == (1 if failed else 0)
