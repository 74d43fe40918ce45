"""The data protocol: roles (train, selection, test, eval-only), every fitting or selecting reader
behind the guard, known files that cannot be relabelled, the test-read ledger and results files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from care_lab.data import intent_map, lend_an_ear_role, load_intent_annotations, load_intent_turns
from care_lab.data.results import record_test_read, test_reads, write_results
from care_lab.data.roles import data_role, require_role, write_roles
from care_lab.data.sage_turns import sage_rollout_files, sage_scored_keys, sage_test_turns, sage_turns
from care_lab.simulation import UserSettings, load_profiles
from care_lab.training._common import read_records
from care_lab.training.policy.components import prompt_rows
from care_lab.training.policy.config import PromptSettings
from care_lab.training.weights_head import head_turns
from care_sdk.errors import InputError

# -- the readers, each pointed at a file of a given role ----------------------------------------------


def _esconv_lines(data_dir: Path) -> str:
    return "\n".join((data_dir / "esconv" / "train.jsonl").read_text(encoding="utf-8").splitlines()[:3]) + "\n"


def _dialogue_lines(_: Path) -> str:
    messages = [{"role": "user", "content": "I lost my job."}, {"role": "assistant", "content": "That is hard."}]
    return json.dumps({"id": "d1", "messages": [*messages, {"role": "user", "content": "Yes."}]}) + "\n"


def _record_lines(_: Path) -> str:
    return json.dumps({"id": "r1", "context": [{"role": "user", "content": "hi"}], "target": "{}"}) + "\n"


Reader = Callable[[Path, Path], Any]

FITTING: dict[str, tuple[Callable[[Path], str], Reader]] = {
    "SFT / pref-GRPO training records": (_record_lines, lambda p, _: read_records(p, "sft")),
    "weights head fit": (_esconv_lines, lambda p, _: head_turns(p, 4)),
    "policy training prompts (jsonl)": (
        _dialogue_lines,
        lambda p, _: prompt_rows(PromptSettings(source="jsonl", path=str(p)), None),
    ),
    "policy training prompts (esconv)": (
        _esconv_lines,
        lambda p, _: prompt_rows(PromptSettings(source="esconv", path=str(p)), None),
    ),
    "policy training users": (_esconv_lines, lambda p, root: load_profiles(UserSettings(path=str(p)), "train", root)),
}
"""Readers that fit: train data only."""

SELECTING: dict[str, tuple[Callable[[Path], str], Reader]] = {
    "SFT eval_data": (_record_lines, lambda p, _: read_records(p, "sft", "valid")),
    "weights head penalty": (_esconv_lines, lambda p, _: head_turns(p, 4, use="select")),
}
"""Readers that choose or tune: train or selection data."""


def _declared(tmp_path: Path, data_dir: Path, role: str, lines: Callable[[Path], str]) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir(exist_ok=True)
    path = folder / f"{role}.jsonl"
    path.write_text(lines(data_dir), encoding="utf-8")
    write_roles(folder, {path.name: role})
    return path


@pytest.mark.parametrize("name", sorted(FITTING))
@pytest.mark.parametrize("role", ["selection", "test", "eval-only"])
def test_a_fitting_reader_refuses_anything_but_train_data(name: str, role: str, tmp_path: Path, data_dir: Path) -> None:
    lines, read = FITTING[name]
    path = _declared(tmp_path, data_dir, role, lines)
    with pytest.raises(InputError, match=rf"{role}\.jsonl: refusing to use {role} data"):
        read(path, data_dir)
    assert read(_declared(tmp_path, data_dir, "train", lines), data_dir)  # the same reader on train data


@pytest.mark.parametrize("name", sorted(SELECTING))
@pytest.mark.parametrize("role", ["test", "eval-only"])
def test_a_selecting_reader_refuses_test_and_eval_only_data(
    name: str, role: str, tmp_path: Path, data_dir: Path
) -> None:
    lines, read = SELECTING[name]
    with pytest.raises(InputError, match=rf"{role}\.jsonl: refusing to use {role} data"):
        read(_declared(tmp_path, data_dir, role, lines), data_dir)
    assert read(_declared(tmp_path, data_dir, "selection", lines), data_dir)
    assert read(_declared(tmp_path, data_dir, "valid", lines), data_dir)  # the old name of selection


# -- roles of the shared data ------------------------------------------------------------------------


def test_shared_data_roles(data_dir: Path) -> None:
    expected = {
        "esconv/train.jsonl": "train",
        "esconv/valid.jsonl": "selection",
        "esconv/test.jsonl": "selection",
        "esconv/FailedESConv.json": "eval-only",
        "sage_rlver/profiles/simulator_profile_withfirsttalk.jsonl": "eval-only",
        "sage_rlver/results_deepseek-v3-simulator/gpt-4.1_result.jsonl": "by-record",
        "mint_lend_an_ear/training/conversations_322.json": "train",
        "mint_lend_an_ear/lend_an_ear_eval/lend_an_ear_50_conversations.csv": "by-record",
        "empatheticdialogues_intents/annotated_subset/sad.csv": "test",
        "empatheticdialogues_intents/manual_intent_annotations/questioning.txt": "test",
    }
    assert {name: data_role(data_dir / name) for name in expected} == expected
    assert require_role(data_dir / "esconv" / "test.jsonl", "select") == "selection"
    with pytest.raises(InputError, match=r"train\.jsonl: refusing to evaluate on train data"):
        require_role(data_dir / "esconv" / "train.jsonl", "evaluate")
    with pytest.raises(InputError, match="its records have roles of their own"):
        require_role(data_dir / "mint_lend_an_ear" / "lend_an_ear_eval" / "lend_an_ear_50_conversations.csv", "fit")


def test_known_files_cannot_be_relabelled(tmp_path: Path, data_dir: Path) -> None:
    esconv = tmp_path / "data" / "esconv"
    esconv.mkdir(parents=True)
    test_file = esconv / "test.jsonl"
    test_file.write_text((data_dir / "esconv" / "test.jsonl").read_text(encoding="utf-8")[:2000])
    for table in ({"esconv/test.jsonl": "train"}, {"*.jsonl": "train"}, {"esconv/*": "test"}):
        (tmp_path / "data" / "roles.json").write_text(json.dumps(table))
        with pytest.raises(InputError) as info:
            require_role(test_file, "fit")
        message = str(info.value)  # names both files
        assert message.startswith(str(tmp_path / "data" / "roles.json")) and str(test_file) in message
        assert "published file whose role is fixed (selection)" in message
    (tmp_path / "data" / "roles.json").write_text(json.dumps({"esconv/*": "valid"}))  # valid is selection
    assert data_role(test_file) == "selection"  # agreeing with the known role is fine


def test_a_renamed_copy_of_a_test_file_is_refused_for_fitting(tmp_path: Path, data_dir: Path) -> None:
    source = data_dir / "empatheticdialogues_intents" / "annotated_subset" / "sad.csv"
    mine = tmp_path / "mine"
    mine.mkdir()
    whole = mine / "dialogues.csv"
    whole.write_bytes(source.read_bytes())  # the same bytes under another name
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    (mine / "slice.csv").write_text("".join(lines[:1] + lines[200:260]), encoding="utf-8")  # some rows
    converted = [{"id": f"{row.split(',')[0]}#1", "messages": []} for row in lines[1:4]]  # its ids, as JSONL
    (mine / "converted.jsonl").write_text("".join(json.dumps(r) + "\n" for r in converted), encoding="utf-8")
    esconv = (data_dir / "esconv" / "test.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (mine / "esconv_rows.jsonl").write_text("".join(esconv[5:8]), encoding="utf-8")  # selection rows
    write_roles(mine, {"*": "train"})
    for name, role in (("dialogues.csv", "test"), ("slice.csv", "test"), ("converted.jsonl", "test")):
        with pytest.raises(InputError, match=rf"published file whose role is fixed \({role}\)") as info:
            require_role(mine / name, "fit")
        assert str(info.value).startswith(str(mine / "roles.json")) and "annotated_subset/sad.csv" in str(info.value)
    with pytest.raises(InputError, match=r"fixed \(selection\): it holds rows of the published esconv/test\.jsonl"):
        require_role(mine / "esconv_rows.jsonl", "fit")
    (mine / "roles.json").unlink()  # with no roles.json the content alone decides
    assert data_role(whole) == data_role(mine / "converted.jsonl") == "test"
    with pytest.raises(InputError, match="refusing to fit on test data"):
        require_role(whole, "fit")
    with pytest.raises(InputError, match=r"read it through care_lab\.data\.results\.record_test_read"):
        require_role(whole, "evaluate")


def test_the_table_of_published_files_is_the_shared_data(data_dir: Path) -> None:
    from care_lab.data._content import build_known_files
    from care_lab.data.roles import KNOWN_ROLES

    committed = Path(__file__).parents[1] / "src" / "care_lab" / "data" / "known_files.json"
    assert build_known_files(data_dir, KNOWN_ROLES) == json.loads(committed.read_text(encoding="utf-8"))


def test_lend_an_ear_held_out_conversations_are_selection_and_the_expert_task_reads_only_them(data_dir: Path) -> None:
    from care_lab.bench._task_base import DataPaths, Settings
    from care_lab.bench.dialogue_tasks import ExpertTask

    data = ExpertTask().load(DataPaths(data_dir), Settings())
    conversations = set(data.extra["experts"])
    assert len(conversations) == data.available == 9  # 6 valid + 3 test of the 50
    assert {lend_an_ear_role(c) for c in conversations} == {"selection"}


def test_sage_turns_outside_the_400_scored_are_test(data_dir: Path) -> None:
    from care_lab.bench._task_base import DataPaths, Settings
    from care_lab.bench.dialogue_tasks import SimulatedTask

    files = sage_rollout_files(data_dir)
    turns = sage_turns(files)
    scored = sage_scored_keys(files)
    # exactly the turns `care bench quality --limit 400 --tasks simulated` (seed 0) scored, in its order
    quality = SimulatedTask().load(DataPaths(data_dir), Settings(limit=400, seed=0))
    assert [item.key for item in quality.items] == scored and len(set(scored)) == 400
    test = sage_test_turns(files)
    assert len(turns) == 1489 and len(test) == 1089 and not {t.key for t in test} & set(scored)
    assert {t.key for t in turns if t.role == "selection"} == set(scored)
    # the quality task reads the selection turns only, whatever its limit
    assert {i.key for i in SimulatedTask().load(DataPaths(data_dir), Settings(limit=600)).items} <= set(scored)


# -- EmpatheticIntents -------------------------------------------------------------------------------


def test_intent_mapping_covers_every_intent_and_the_loader_needs_a_ledger_entry(data_dir: Path, tmp_path: Path) -> None:
    mapping = intent_map()
    automatic = ["questioning", "acknowledging", "agreeing", "consoling", "encouraging", "sympathizing"]
    automatic += ["suggesting", "wishing", "neutral"]
    manual = sorted(
        p.stem for p in (data_dir / "empatheticdialogues_intents" / "manual_intent_annotations").glob("*.txt")
    )
    assert len(manual) == 15 and all(mapping.knows(i) for i in automatic + manual)
    dimensions = {i: mapping.dimension(i) for i in ("questioning", "sympathizing", "suggesting", "wishing")}
    assert {i: d.value if d else None for i, d in dimensions.items()} == {
        "questioning": "cognitive",
        "sympathizing": "affective",
        "suggesting": "proactive",
        "wishing": None,
    }
    root = data_dir / "empatheticdialogues_intents"
    with pytest.raises(InputError, match="EmpatheticIntents is a test set"):
        load_intent_turns(root, test_read=None)
    read = record_test_read(
        "empatheticdialogues_intents", artifact="loader-test@0", command="pytest", ledger=tmp_path / "reads.json"
    )
    turns = load_intent_turns(root / "annotated_subset" / "sad.csv", test_read=read)
    assert turns.ok and len(turns) > 1000
    first = turns[0]
    assert first.context[0].role == "user" and first.context[-1].role == "user" and first.reply
    assert all((t.intent is None) == (not mapping.knows(t.label)) for t in turns)
    assert len(load_intent_annotations(root, test_read=read)) == 506


# -- the test-read ledger and results files ------------------------------------------------------------


def test_a_test_set_is_read_once_per_artifact_and_every_read_is_recorded(tmp_path: Path, data_dir: Path) -> None:
    ledger = tmp_path / "results" / "test_reads.json"
    files = [data_dir / "empatheticdialogues_intents" / "annotated_subset" / "sad.csv"]
    first = record_test_read(
        "empatheticdialogues_intents", artifact="a@1", command="bench x", files=files, ledger=ledger, date="2026-12-05"
    )
    assert (first.reads, first.forced) == (1, False)
    with pytest.raises(InputError, match=r"read for a@1 on 2026-12-05 by `bench x`"):
        record_test_read("empatheticdialogues_intents", artifact="a@1", command="bench y", ledger=ledger)
    assert test_reads("empatheticdialogues_intents", ledger) == 1  # the refused read is not recorded
    other = record_test_read("empatheticdialogues_intents", artifact="b@2", command="bench y", ledger=ledger)
    forced = record_test_read("empatheticdialogues_intents", artifact="a@1", command="z", ledger=ledger, force=True)
    assert (other.reads, forced.reads, forced.forced) == (2, 3, True)
    table = json.loads(ledger.read_text())
    assert [e["artifact"] for e in table["empatheticdialogues_intents"]] == ["a@1", "b@2", "a@1"]
    assert table["empatheticdialogues_intents"][2]["forced"] is True
    with pytest.raises(InputError, match="not a test file"):
        record_test_read("x", artifact="a", command="c", files=[data_dir / "esconv" / "test.jsonl"], ledger=ledger)
    # an evaluation read of a test file needs its ledger entry
    with pytest.raises(InputError, match=r"read it through care_lab\.data\.results\.record_test_read"):
        require_role(files[0], "evaluate")
    assert require_role(files[0], "evaluate", test_read=first) == "test"


def test_the_committed_ledger_names_the_fresh_test_sets() -> None:
    ledger = json.loads((Path(__file__).parents[1] / "benchmarks" / "results" / "test_reads.json").read_text())
    assert {"empatheticdialogues_intents", "sage_rlver/test_turns"} <= set(ledger)
    assert all(isinstance(reads, list) for reads in ledger.values())


def test_results_files_name_their_data_role_and_test_reads(tmp_path: Path) -> None:
    path = write_results(
        tmp_path / "r.json",
        "python benchmarks/bench_x.py",
        data=["empatheticdialogues_intents"],
        role="test",
        test_reads=1,
        metrics={"spearman": {"value": 0.1}},
        baselines={"length": {"value": 0.3}},
    )
    text = path.read_text()
    saved = json.loads(text)
    assert list(saved) == sorted(saved) and saved["role"] == "test" and saved["test_reads"] == 1
    assert saved["baselines"] == {"length": {"value": 0.3}}
    with pytest.raises(InputError, match="test_reads >= 1"):
        write_results(tmp_path / "s.json", "c", data="x", role="test", test_reads=0, metrics={}, baselines={})
    with pytest.raises(InputError, match="unknown data role 'held-out'"):
        write_results(tmp_path / "t.json", "c", data="x", role="held-out", test_reads=0, metrics={}, baselines={})
