"""``care eval generator``: win/tie/loss and missing pairs with a scripted model, resume, refusal of
training data and of mixed runs, the held-out split disjoint from build-data's training pairs, and
the command on the bundled model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from care_lab.evals.pairs import EvalPair, HeldOutPairs, lend_an_ear_held_out_pairs, read_pairs_file
from care_lab.evals.winrate import WinRateRunner
from care_sdk import Message, RubricEvaluator, RubricGenerator
from care_sdk.backends import EVALUATION, GenerationRequest
from care_sdk.cli import main
from care_sdk.errors import ConfigError, InputError
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json


def script(request: GenerationRequest) -> str:
    """Rubrics are uniform-ish; a reply scores by its marker: [GOOD] 5, [OK] 3, [BAD] 1, [FAIL] unparseable."""
    if request.purpose == EVALUATION:
        reply = request.messages[-1].content.rsplit("Candidate reply:\n", 1)[1]
        if "[FAIL]" in reply:
            return "not json"
        score = 5 if "[GOOD]" in reply else 3 if "[OK]" in reply else 1
        return evaluation_json([score] * 6)
    return rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})


def pair(pid: str, group: str, chosen: str, rejected: str) -> EvalPair:
    context = (Message(role="user", content=f"context {group}"),)
    return EvalPair(pid, group, context, chosen, rejected, {"split": "test"})


PAIRS = [
    pair("p1", "c1", "[GOOD] yes", "[BAD] no"),  # win
    pair("p2", "c1", "[OK] hmm", "[OK] hm"),  # tie
    pair("p3", "c2", "[BAD] no", "[GOOD] yes"),  # loss
    pair("p4", "c3", "[GOOD] yes", "[FAIL] broken"),  # missing: the rejected reply cannot be scored
]


def runner(backend: ScriptedBackend, out: Path, labels: tuple[str, ...] = ("g",), **kw: Any) -> WinRateRunner:
    gens = {label: RubricGenerator(backend) for label in labels}
    return WinRateRunner(gens, RubricEvaluator(backend, max_attempts=1), out_dir=out, resamples=100, **kw)


def test_wins_ties_losses_and_missing_pairs(tmp_path: Path) -> None:
    backend = ScriptedBackend(script)
    report = runner(backend, tmp_path).run(HeldOutPairs(PAIRS, [], "demo", available=4))
    first = report.results[0]
    assert first.row.title == "g"
    assert first.win_rate.value == pytest.approx(0.5)  # (1 + 0.5 + 0) / 3; the failed pair is not a loss
    assert first.win_rate.n == 3 and first.missing == 1
    assert first.strict.value == pytest.approx(0.5) and first.ties.value == pytest.approx(1 / 3)
    assert "evaluation failed" in first.errors[0]
    assert [r.row.title for r in report.results] == ["g", "g + uniform weights", "g + fixed criteria", "fixed rubric"]
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert len(records) == 4 * 4
    failed = [r for r in records if r["pair"] == "p4"]
    assert all(r["outcome"] is None and r["error"].startswith("rejected:") for r in failed)
    assert all(r["split"] == "test" for r in records)
    md = (tmp_path / "winrate.md").read_text()
    assert "| g | 3 | 0.500 [" in md and "Chance is 0.5" in md
    saved = json.loads((tmp_path / "winrate.json").read_text())
    assert saved["generators"] == {"g": RubricGenerator(backend).identity}
    assert saved["rows"][0]["missing"] == 1 and saved["pairs"]["contexts"] == 3


def test_variants_share_requests(tmp_path: Path) -> None:
    backend = ScriptedBackend(script)
    runner(backend, tmp_path).run(HeldOutPairs(PAIRS[:1], [], "demo"))
    # one rubric; the generated-criteria and the fixed-criteria evaluation of each reply: 1 + 2 * 2
    assert len(backend.requests) == 5


def test_resume_reuses_finished_pairs_and_retries_failed_ones(tmp_path: Path) -> None:
    held = HeldOutPairs(PAIRS, [], "demo")
    runner(ScriptedBackend(script), tmp_path).run(held)
    backend = ScriptedBackend(script)
    again = runner(backend, tmp_path).run(held)
    assert again.scored == 1 and again.reused == 3  # only the failed pair is tried again
    assert {r.content for req in backend.requests for r in req.messages if "context c3" in r.content}
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == 16  # compacted, not duplicated


def test_a_new_generator_joins_a_run_but_another_model_under_a_label_is_refused(tmp_path: Path) -> None:
    held = HeldOutPairs(PAIRS[:2], [], "demo")
    runner(ScriptedBackend(script), tmp_path).run(held)
    report = runner(ScriptedBackend(script), tmp_path, labels=("g", "h")).run(held)
    assert [r.row.title for r in report.results][:4] == ["g", "g + uniform weights", "g + fixed criteria", "h"]
    assert report.results[3].difference is not None and report.results[3].difference.value == 0
    other = WinRateRunner(
        {"g": RubricGenerator(ScriptedBackend(script), max_tokens=99)},
        RubricEvaluator(ScriptedBackend(script)),
        out_dir=tmp_path,
    )
    with pytest.raises(ConfigError, match="another generator 'g'"):
        other.run(held)


def test_unknown_variant_and_no_generator(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown variant"):
        runner(ScriptedBackend(script), tmp_path, variants=["nope"])
    only_fixed = WinRateRunner(
        {}, RubricEvaluator(ScriptedBackend(script)), out_dir=tmp_path, variants=["fixed_rubric"]
    )
    assert only_fixed.run(HeldOutPairs(PAIRS[:1], [], "demo")).results[0].win_rate.value == 1.0
    with pytest.raises(ConfigError, match="need at least one generator"):
        WinRateRunner({}, RubricEvaluator(ScriptedBackend(script)), out_dir=tmp_path)


# -- pairs files -----------------------------------------------------------------------------------


def write_pairs(directory: Path, lines: list[Any], role: str | None = "selection") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "pairs.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    if role is not None:
        (directory / "roles.json").write_text(json.dumps({"pairs.jsonl": role}))
    return path


GOOD = {"context": [{"role": "user", "content": "I lost my job."}], "chosen": "Oh no.", "rejected": "Ok."}


def test_pairs_file_groups_by_dialogue_turn_and_limits_by_context(tmp_path: Path) -> None:
    lines = [
        {**GOOD, "id": "a", "dialogue_id": "d1", "turn_index": 1},
        {**GOOD, "id": "b", "dialogue_id": "d1", "turn_index": 1},
        {**GOOD, "id": "c"},
    ]
    held = read_pairs_file(write_pairs(tmp_path, lines), limit=1)
    assert [p.id for p in held.pairs] == ["a", "b"] and held.available == 3
    assert held.pairs[0].group == "d1#1" and held.roles == {str(tmp_path / "pairs.jsonl"): "selection"}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({**GOOD, "chosen": ""}, "line 2: chosen: expected a non-empty string"),
        ({**GOOD, "context": []}, "line 2: context: expected a non-empty list"),
        ({**GOOD, "context": [{"role": "bot", "content": "x"}]}, "line 2: context[0].role: Input should be"),
        ({**GOOD, "split": "train"}, "line 2: split: a training record"),
        ("{not json", "line 2: not valid JSON"),
        ({**GOOD, "id": "line1"}, "line 2: id: duplicate id 'line1' (first on line 1)"),
    ],
)
def test_bad_pairs_lines_name_file_line_and_field(tmp_path: Path, line: Any, message: str) -> None:
    path = write_pairs(tmp_path, [GOOD, line])
    with pytest.raises(InputError) as info:
        read_pairs_file(path)
    assert str(info.value).startswith(str(path)) and message in str(info.value)


def test_training_and_undeclared_pairs_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="refusing to evaluate on train data"):
        read_pairs_file(write_pairs(tmp_path / "a", [GOOD], role="train"))
    with pytest.raises(InputError, match="no declared role"):
        read_pairs_file(write_pairs(tmp_path / "b", [GOOD], role=None))
    with pytest.raises(InputError, match="no such pairs file"):
        read_pairs_file(tmp_path / "missing.jsonl")
    assert read_pairs_file(write_pairs(tmp_path / "c", [GOOD], role="valid")).pairs


def test_cli_refuses_a_training_pairs_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_pairs(tmp_path, [GOOD], role="train")
    assert main(["eval", "generator", "--pairs", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "refusing to evaluate on train data" in capsys.readouterr().err


# -- the held-out split, shared with build-data ----------------------------------------------------


def test_held_out_pairs_are_disjoint_from_build_data_training_pairs(data_dir: Path, tmp_path: Path) -> None:
    from care_lab.training.build_data import build_data
    from care_lab.training.config import BuildDataConfig
    from care_sdk.backends import BackendPool

    annotator = ScriptedBackend(lambda req: '{"strategies": ["Question"]}')
    config = BuildDataConfig(
        output_dir=str(tmp_path / "built"),
        data_dir=str(data_dir),
        esconv_splits=(),
        teacher=None,
        target_judges=None,
        judges=None,
        candidates=(),
        annotator="scripted",
    )
    build_data(config, pool=BackendPool({"scripted": annotator}), log=lambda _: None)
    built = tmp_path / "built" / "pairs"
    train = [json.loads(line) for line in (built / "train.jsonl").read_text().splitlines()]
    held_out_files = [json.loads(x) for s in ("valid", "test") for x in (built / f"{s}.jsonl").read_text().splitlines()]
    assert train and held_out_files
    held = lend_an_ear_held_out_pairs(data_dir / "mint_lend_an_ear")
    held_conversations = {p.fields["dialogue_id"] for p in held.pairs}
    train_conversations = {r["dialogue_id"] for r in train if r["source"] == "lend-an-ear"}
    assert held_conversations and train_conversations
    assert not held_conversations & train_conversations  # disjoint by conversation
    sft_train = [json.loads(x) for x in (tmp_path / "built" / "sft" / "train.jsonl").read_text().splitlines()]
    assert not held_conversations & {r["dialogue_id"] for r in sft_train}
    # The held-out pairs are exactly build-data's valid and test Lend-an-Ear pairs.
    assert {p.id for p in held.pairs} == {r["id"] for r in held_out_files if r["source"] == "lend-an-ear"}
    # ... and the build-data test file is accepted as held-out input, its train file refused.
    assert len(read_pairs_file(built / "test.jsonl").pairs) == sum(1 for p in held.pairs if p.fields["split"] == "test")
    with pytest.raises(InputError, match="refusing to evaluate on train data"):
        read_pairs_file(built / "train.jsonl")


# -- the bundled model -----------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_generator_win_rate_on_the_bundled_model(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "w"
    argv = [
        "eval", "generator", "--generator", "shipped=default", "--evaluator", "base", "--variants",
        "care,fixed_rubric", "--limit", "1", "--max-pairs-per-turn", "1", "--data-dir", str(data_dir),
        "--out", str(out), "--quiet", "--resamples", "50",
    ]  # fmt: skip
    code = main(argv)
    captured = capsys.readouterr()
    assert "| shipped | 1 | " in captured.out or "| shipped | 0 | " in captured.out
    report = json.loads((out / "winrate.json").read_text())
    assert [r["title"] for r in report["rows"]] == ["shipped", "fixed rubric"]
    assert set(report["generators"]) == {"shipped"} and report["data"]
    assert "+" in report["generators"]["shipped"].split("|")[0]  # `default` carries the generator adapter
    assert report["pairs"]["pairs"] == 1 and report["seconds_per_pair"] > 0
    missing = sum(r["missing"] for r in report["rows"])
    assert code == (1 if missing else 0)
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    for record in records:
        assert (record["outcome"] is None) == (record["error"] is not None)
        if record["outcome"] is not None:
            assert 0 <= record["chosen_reward"] <= 1 and record["split"] in ("valid", "test")
    assert main(argv) == code  # resumed: nothing left to score
    assert "0 pairs scored" in capsys.readouterr().err
