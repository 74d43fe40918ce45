"""The data protocol: roles (train, selection, test, eval-only), every fitting or selecting reader
behind the guard, known files that cannot be relabelled, the test-read ledger and results files."""

from __future__ import annotations

import gzip
import hashlib
import inspect
import json
import pkgutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import care_lab.data
from care_lab.data import intent_map, lend_an_ear_role, load_intent_annotations, load_intent_turns
from care_lab.data.results import (
    TestRead,
    attach_records,
    items_sha256,
    ledger_entry,
    record_test_read,
    set_items,
    test_reads,
    write_results,
)
from care_lab.data.roles import data_role, require_role, write_roles
from care_lab.data.sage import load_sage_rollouts
from care_lab.data.sage_turns import (
    load_sage_turns,
    rollout_test_turns,
    sage_rollout_files,
    sage_scored_keys,
    sage_test_turns,
    sage_turn_count,
    sage_turns,
)
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

    committed = Path(__file__).parents[1] / "lab" / "src" / "care_lab" / "data" / "known_files.json"
    assert build_known_files(data_dir, KNOWN_ROLES) == json.loads(committed.read_text(encoding="utf-8"))


def test_lend_an_ear_held_out_conversations_are_selection_and_the_expert_task_reads_only_them(data_dir: Path) -> None:
    from care_lab.bench._task_base import DataPaths, Settings
    from care_lab.bench.dialogue_tasks import ExpertTask

    data = ExpertTask().load(DataPaths(data_dir), Settings())
    conversations = set(data.extra["experts"])
    assert len(conversations) == data.available == 9  # 6 valid + 3 test of the 50
    assert {lend_an_ear_role(c) for c in conversations} == {"selection"}


def test_sage_turns_outside_the_400_scored_are_test(data_dir: Path, repo: Path) -> None:
    from care_lab.bench._task_base import DataPaths, Settings
    from care_lab.bench.dialogue_tasks import SimulatedTask

    files = sage_rollout_files(data_dir)
    scored = sage_scored_keys(files)
    # exactly the turns `care bench quality --limit 400 --tasks simulated` (seed 0) scored, in its order
    quality = SimulatedTask().load(DataPaths(data_dir), Settings(limit=400, seed=0))
    assert [item.key for item in quality.items] == scored and len(set(scored)) == 400
    assert [t.key for t in sage_turns(files)] == sorted(scored, key=[t.key for t in sage_turns(files)].index)
    assert {t.key for t in sage_turns(files)} == set(scored) and sage_turn_count(files) == 1489
    read = _read(repo, "sage_rlver/test_turns", items=["all"])
    turns = sage_turns(files, test_read=read)
    test = sage_test_turns(files, test_read=read)
    assert len(turns) == 1489 and len(test) == 1089 and not {t.key for t in test} & set(scored)
    assert {t.key for t in turns if t.role == "selection"} == set(scored)
    # the quality task reads the selection turns only, whatever its limit
    assert {i.key for i in SimulatedTask().load(DataPaths(data_dir), Settings(limit=600)).items} <= set(scored)


# -- EmpatheticIntents -------------------------------------------------------------------------------


def test_intent_mapping_covers_every_intent_and_the_loader_needs_a_ledger_entry(data_dir: Path, repo: Path) -> None:
    tmp_path = repo
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
    read = _read(tmp_path, "empatheticdialogues_intents")
    turns = load_intent_turns(root / "annotated_subset" / "sad.csv", test_read=read)
    assert turns.ok and len(turns) > 1000
    first = turns[0]
    assert first.context[0].role == "user" and first.context[-1].role == "user" and first.reply
    assert all((t.intent is None) == (not mapping.knows(t.label)) for t in turns)
    assert len(load_intent_annotations(root, test_read=read)) == 506


# -- the test-read ledger and results files ------------------------------------------------------------


def _git(repo: Path, *args: str) -> None:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "-C", str(repo), *identity, *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with a committed rule (``rule.md``) and two model files."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "rule.md").write_text("# Rule\nWritten before the read.\n", encoding="utf-8")
    (tmp_path / "generator.gguf").write_bytes(b"generator weights")
    (tmp_path / "gate.json").write_bytes(b'{"slope": 0.1}')
    _git(tmp_path, "add", "rule.md", "generator.gguf", "gate.json")
    _git(tmp_path, "commit", "-qm", "the rule")
    return tmp_path


def _read(repo: Path, data: str, *, items: list[str] | None = None, **options: Any) -> TestRead:
    return record_test_read(
        data,
        artifact=options.pop("artifact", "bundled"),
        command=options.pop("command", "pytest"),
        rule=options.pop("rule", repo / "rule.md"),
        items=["i1", "i2"] if items is None else items,
        artifact_files=options.pop("artifact_files", [repo / "generator.gguf"]),
        ledger=options.pop("ledger", repo / "results" / "test_reads.json"),
        **options,
    )


def test_a_test_read_proves_its_order_and_scope(repo: Path, data_dir: Path) -> None:
    files = [data_dir / "empatheticdialogues_intents" / "annotated_subset" / "sad.csv"]
    first = _read(
        repo, "empatheticdialogues_intents", files=files, artifact_files=[repo / "generator.gguf", repo / "gate.json"]
    )
    entry = json.loads((repo / "results" / "test_reads.json").read_text())["empatheticdialogues_intents"][0]
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    rule_bytes = (repo / "rule.md").read_bytes()
    assert entry["commit"] == entry["rule_commit"] == head and entry["rule"] == "rule.md"
    assert entry["rule_sha256"] == hashlib.sha256(rule_bytes).hexdigest() and entry["time"].endswith("Z")
    assert entry["artifact_files"] == {
        "generator.gguf": hashlib.sha256(b"generator weights").hexdigest(),
        "gate.json": hashlib.sha256(b'{"slope": 0.1}').hexdigest(),
    }
    assert entry["items"] == 2 and entry["items_sha256"] == items_sha256(["i1", "i2"]) == first.items_sha256
    assert (first.reads, first.forced, first.labels_only) == (1, False, False)
    # the same models, or some of them, read again: refused, whatever the artifact is called
    for models in ([repo / "generator.gguf", repo / "gate.json"], [repo / "generator.gguf"]):
        with pytest.raises(InputError, match=r"read for bundled@\w+ on .* with the same models"):
            _read(repo, "empatheticdialogues_intents", artifact="renamed", artifact_files=models, items=["i9"])
    assert test_reads("empatheticdialogues_intents", repo / "results" / "test_reads.json") == 1  # refusals not recorded
    (repo / "retrained.gguf").write_bytes(b"new weights")  # another artifact reads once
    other = _read(repo, "empatheticdialogues_intents", artifact_files=[repo / "retrained.gguf"])
    forced = _read(repo, "empatheticdialogues_intents", force=True)
    labels = _read(
        repo, "empatheticdialogues_intents", artifact="labels", artifact_files=[], labels_only=True, force=True
    )
    assert (other.reads, other.forced, forced.reads, forced.forced) == (2, False, 3, True)
    assert (labels.reads, labels.forced, labels.labels_only, labels.artifact) == (4, True, True, "labels")
    with pytest.raises(InputError, match="same models"):  # a labels-only read is a read too
        _read(repo, "empatheticdialogues_intents", artifact="labels", artifact_files=[], labels_only=True)
    with pytest.raises(InputError, match="name every model file"):
        _read(repo, "sage_rlver/test_turns", artifact_files=[])
    with pytest.raises(InputError, match="not a test file"):
        _read(repo, "x", files=[data_dir / "esconv" / "test.jsonl"])
    # an evaluation read of a test file needs its ledger entry
    with pytest.raises(InputError, match=r"read it through care_lab\.data\.results\.record_test_read"):
        require_role(files[0], "evaluate")
    assert require_role(files[0], "evaluate", test_read=first) == "test"
    assert ledger_entry("empatheticdialogues_intents", 1, first.ledger) == first  # a resumed run is the same read


def test_a_read_needs_its_rule_committed_and_unchanged(repo: Path) -> None:
    (repo / "draft.md").write_text("# Not committed\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"draft\.md: the rule is not committed"):
        _read(repo, "sage_rlver/test_turns", rule=repo / "draft.md")
    (repo / "rule.md").write_text("# Rule\nChanged after the fact.\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"rule\.md: the rule has changed since its last commit"):
        _read(repo, "sage_rlver/test_turns")
    _git(repo, "commit", "-qam", "an addendum")
    assert _read(repo, "sage_rlver/test_turns").reads == 1


def test_the_per_item_records_of_a_read_are_kept_with_their_hash(repo: Path) -> None:
    read = _read(repo, "sage_rlver/test_turns")
    records = [{"id": "i1", "reward": 0.5}, {"id": "i2", "reward": None}]
    path = attach_records(read, records)
    assert path == repo / "results" / "reads" / "sage_rlver_test_turns-1.jsonl.gz"
    kept = json.loads((repo / "results" / "test_reads.json").read_text())["sage_rlver/test_turns"][0]["records"]
    assert kept["file"] == "reads/sage_rlver_test_turns-1.jsonl.gz" and kept["n"] == 2
    assert kept["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [json.loads(line)["id"] for line in gzip.decompress(path.read_bytes()).splitlines()] == ["i1", "i2"]
    assert attach_records(read, records) == path and path.read_bytes() == path.read_bytes()  # deterministic
    assert attach_records(read, records, limit=10, regenerate="python bench.py --set sage") is None
    kept = json.loads((repo / "results" / "test_reads.json").read_text())["sage_rlver/test_turns"][0]["records"]
    assert kept["regenerate"] == "python bench.py --set sage" and "file" not in kept
    with pytest.raises(InputError, match="pass regenerate="):
        attach_records(read, records, limit=10)
    # a sample drawn from the test data itself is named once it is loaded, before anything is scored
    drawn = _read(repo, "empatheticdialogues_intents", items=[], artifact_files=[repo / "gate.json"])
    assert (drawn.items, drawn.items_sha256) == (0, "")
    named = set_items(drawn, ["d1#1", "d2#3"])
    assert named.items == 2 and ledger_entry("empatheticdialogues_intents", 1, drawn.ledger) == named
    with pytest.raises(InputError, match="names other items already"):
        set_items(drawn, ["d9#1"])


TEST_LOADERS: dict[str, Callable[[Path, object], Any]] = {
    "load_intent_turns": lambda root, read: load_intent_turns(root / "empatheticdialogues_intents", test_read=read),
    "load_intent_annotations": lambda root, read: load_intent_annotations(
        root / "empatheticdialogues_intents", test_read=read
    ),
    "sage_test_turns": lambda root, read: sage_test_turns(sage_rollout_files(root), test_read=read),
    "require_role": lambda root, read: require_role(
        root / "empatheticdialogues_intents" / "annotated_subset" / "sad.csv", "evaluate", test_read=read
    ),
    "read_pairs_file": lambda root, read: _pairs(root, read),
}
"""Every reader that returns test data, by name: each must refuse without a recorded read."""

WITHHOLDING: dict[str, Callable[[Path, object], Any]] = {
    "load_sage_turns": lambda root, read: {t.role for t in load_sage_turns(sage_rollout_files(root), test_read=read)},
    "sage_turns": lambda root, read: {t.role for t in sage_turns(sage_rollout_files(root), test_read=read)},
    "load_sage_rollouts": lambda root, read: {_rollout_labels(f, read) for f in sage_rollout_files(root)},
    "require_held_out": lambda root, read: {"selection"},
}
"""Readers of files holding test records: without a recorded read no test record (or label) comes out."""


def _rollout_labels(path: Path, read: object) -> str:
    """``test`` when the rollouts read give an emotion change of a test turn."""
    test = rollout_test_turns(path) or {}
    rollouts = load_sage_rollouts(path, test_read=read)
    return "test" if any(i in test.get(r.id, ()) for r in rollouts for i in r.deltas) else "selection"


def _pairs(root: Path, read: object) -> Any:
    from care_lab.evals.pairs import read_pairs_file

    return read_pairs_file(root / "empatheticdialogues_intents" / "annotated_subset" / "sad.csv", test_read=read)


def test_no_test_loader_can_be_reached_without_a_ledger_entry(data_dir: Path, repo: Path) -> None:
    with_test_read = set()
    for module in pkgutil.walk_packages(care_lab.__path__, "care_lab."):
        loaded = __import__(module.name, fromlist=["_"])
        for name, value in vars(loaded).items():
            if (
                inspect.isfunction(value)
                and value.__module__ == module.name
                and not name.startswith("_")
                and name != "check_test_read"  # the check every one of them calls
                and "test_read" in inspect.signature(value).parameters
            ):
                with_test_read.add(name)
    assert with_test_read == set(TEST_LOADERS) | set(WITHHOLDING)  # a new loader of test data is listed here
    sage = _read(repo, "sage_rlver/test_turns", items=["all"])
    forged = TestRead(
        "empatheticdialogues_intents", "bundled@0", "pytest", "2026-12-05T10:00:00Z", False, 1, sage.ledger
    )
    for load in TEST_LOADERS.values():
        for read in (None, forged, {"data": "empatheticdialogues_intents", "reads": 1}):
            with pytest.raises(
                InputError,
                match=r"test data is read once|EmpatheticIntents is a test set|is not in the ledger|, not of ",
            ):
                load(data_dir, read)
    for name in ("load_intent_turns", "load_intent_annotations", "require_role", "read_pairs_file"):
        with pytest.raises(InputError, match=r"a read of sage_rlver/test_turns, not of empatheticdialogues_intents"):
            TEST_LOADERS[name](data_dir, sage)
    for name, load in WITHHOLDING.items():
        assert load(data_dir, None) == {"selection"}, name
    assert {_rollout_labels(f, sage) for f in sage_rollout_files(data_dir)} == {"test"}  # with the read


def test_the_committed_ledger_proves_what_it_can_and_says_what_it_cannot() -> None:
    root = Path(__file__).parents[1]
    results = root / "benchmarks" / "results"
    ledger = json.loads((results / "test_reads.json").read_text())
    assert {"empatheticdialogues_intents", "sage_rlver/test_turns"} <= set(ledger)
    for data, entries in ledger.items():
        for number, entry in enumerate(entries, start=1):
            where = f"{data} read {number}"
            assert entry["rule"] and len(entry["rule_sha256"]) == 64 and entry["items"] and entry["items_sha256"], where
            assert entry["artifact_files"] or entry.get("labels_only"), where
            shown = subprocess.run(
                ["git", "-C", str(root), "show", f"{entry['rule_commit']}:{entry['rule']}"], capture_output=True
            )
            if shown.returncode == 0:  # a checkout with its history: the rule's hash at its commit
                assert hashlib.sha256(shown.stdout).hexdigest() == entry["rule_sha256"], where
            if "time" in entry:  # recorded by the present ledger
                assert entry["commit"] and entry["time"].endswith("Z"), where
            else:  # re-recorded: what can be proven, and what cannot
                assert entry["re_recorded"]["proven"] and entry["re_recorded"]["not_proven"], where
            kept = entry.get("records") or {}
            if "file" in kept:
                packed = (results / kept["file"]).read_bytes()
                assert hashlib.sha256(packed).hexdigest() == kept["sha256"], where
                assert len(gzip.decompress(packed).splitlines()) == kept["n"], where


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


def test_every_committed_results_file_names_its_data_role_and_test_reads() -> None:
    results = Path(__file__).parents[1] / "benchmarks" / "results"
    for path in sorted(results.glob("*.json")):
        if path.name == "test_reads.json":  # the ledger itself
            continue
        saved = json.loads(path.read_text(encoding="utf-8"))
        assert saved.get("data"), path.name
        assert saved.get("role") in ("train", "selection", "test", "eval-only"), path.name
        assert isinstance(saved.get("test_reads"), int) and (saved["role"] != "test" or saved["test_reads"] >= 1), (
            path.name
        )
