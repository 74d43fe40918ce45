"""Data hygiene: every dataset a recipe reads has a role, and no recipe trains on anything but train data."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from care_lab.data.roles import data_role, require_held_out, require_trainable, write_roles
from care_lab.simulation import UserSettings, load_profiles
from care_lab.training._common import read_records
from care_sdk.errors import InputError

SAGE = Path("sage_rlver") / "profiles" / "simulator_profile_withfirsttalk.jsonl"


def test_shared_data_roles(data_dir: Path) -> None:
    assert data_role(data_dir / "esconv" / "train.jsonl") == "train"
    assert data_role(data_dir / "esconv" / "valid.jsonl") == "selection"
    assert data_role(data_dir / "esconv" / "test.jsonl") == "selection"  # read for choices many times
    assert data_role(data_dir / SAGE) == "eval-only"
    assert data_role(data_dir / "mint_lend_an_ear" / "training" / "conversations_322.json") == "train"
    for path in (data_dir / "esconv" / "valid.jsonl", data_dir / "esconv" / "test.jsonl", data_dir / SAGE):
        with pytest.raises(InputError, match=rf"{path.name}: refusing to use (selection|eval-only) data"):
            require_trainable(path)
    with pytest.raises(InputError, match=r"train\.jsonl: refusing to evaluate on train data"):
        require_held_out(data_dir / "esconv" / "train.jsonl")


def test_roles_file_declares_own_data_and_undeclared_data_is_refused(tmp_path: Path) -> None:
    mine = tmp_path / "corpus" / "mine.jsonl"
    mine.parent.mkdir()
    mine.write_text('{"id": "a"}\n')
    with pytest.raises(InputError, match=r"mine.jsonl: the data has no declared role; add a roles.json"):
        require_trainable(mine)
    write_roles(tmp_path, {"corpus/*.jsonl": "eval-only"})  # a parent directory's roles.json applies
    with pytest.raises(InputError, match="refusing to use eval-only data"):
        require_trainable(mine)
    write_roles(tmp_path / "corpus", {"mine.jsonl": "train"})  # the nearest roles.json wins
    assert require_trainable(mine) == "train"
    (tmp_path / "corpus" / "roles.json").write_text(json.dumps({"mine.jsonl": "training"}))
    with pytest.raises(InputError, match="unknown data role 'training'"):
        data_role(mine)


def test_records_declare_their_split(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    rows = [{"id": "a", "split": "train"}, {"id": "b", "split": "valid"}, {"id": "c", "split": "test"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match=r"pairs.jsonl: record 2 \(b\): refusing to fit on a selection record"):
        read_records(path, "pairs")
    with pytest.raises(InputError, match=r"pairs.jsonl: record 3 \(c\): refusing to select or tune on a test record"):
        read_records(path, "pairs", "valid")  # SFT's eval_data: a selection read
    path.write_text(json.dumps(rows[0]) + "\n")
    assert read_records(path, "pairs") == [rows[0]]  # every record declares split train
    assert read_records(path, "pairs", "valid") == [rows[0]]  # train data may be selected on too
    path.write_text(json.dumps({"id": "d", "split": "test", "role": "selection"}) + "\n")
    assert read_records(path, "pairs", "valid")  # a record's role wins over its split


def test_build_data_outputs_declare_roles_and_test_files_are_refused(
    small_build_data: Callable[[int], Path], tmp_path: Path
) -> None:
    out = tmp_path / "data"
    shutil.copytree(small_build_data(2), out)
    assert json.loads((out / "roles.json").read_text())["pairs/test.jsonl"] == "selection"
    assert read_records(out, "sft")  # <out>/sft/train.jsonl
    test_file = out / "pairs" / "test.jsonl"
    test_file.write_text(json.dumps({"id": "x", "context": []}) + "\n")  # even without a split field
    with pytest.raises(InputError, match=rf"{test_file}: refusing to use selection data as training data"):
        read_records(test_file, "pairs")


def test_trainer_stages_refuse_test_data_before_loading_a_model(
    small_build_data: Callable[[int], Path], tmp_path: Path
) -> None:
    pytest.importorskip("trl")
    from care_lab.training.config import PrefGRPOConfig, SFTStageConfig
    from care_lab.training.pref_grpo import run_pref_grpo
    from care_lab.training.sft import run_sft

    out = tmp_path / "data"
    shutil.copytree(small_build_data(2), out)
    (out / "sft" / "test.jsonl").write_text(json.dumps({"context": [], "target": "{}", "split": "test"}) + "\n")
    (out / "pairs" / "test.jsonl").write_text(json.dumps({"context": [], "split": "test"}) + "\n")
    with pytest.raises(InputError, match=r"sft/test.jsonl: refusing to use selection data"):
        run_sft(SFTStageConfig(data=str(out / "sft" / "test.jsonl"), model="tiny", output_dir=str(tmp_path / "s")))
    with pytest.raises(InputError, match=r"pairs/test.jsonl: refusing to use selection data"):
        run_pref_grpo(
            PrefGRPOConfig(
                data=str(out / "pairs" / "test.jsonl"), model="tiny", output_dir=str(tmp_path / "g"), evaluator="x"
            )
        )


def test_policy_users_train_on_esconv_train_and_hold_out_valid_or_test(data_dir: Path) -> None:
    root = str(data_dir)
    train = load_profiles(UserSettings(source="esconv", max_profiles=3), "train", root)
    held = load_profiles(UserSettings(source="esconv"), "held_out", root)
    valid = load_profiles(UserSettings(source="esconv", held_out_split="valid"), "held_out", root)
    assert len(held) > 100 and len(valid) > 100 and len(train) == 3
    everyone = {p.id for p in load_profiles(UserSettings(source="esconv"), "train", root)}
    assert not everyone & {p.id for p in held} and not everyone & {p.id for p in valid}
    # the SAGE profiles are benchmark test users: evaluation only
    assert len(load_profiles(UserSettings(source="sage"), "held_out", root)) == 100
    with pytest.raises(InputError, match=rf"{SAGE.name}: refusing to use eval-only data as training users"):
        load_profiles(UserSettings(source="sage"), "train", root)
    with pytest.raises(InputError, match=r"test\.jsonl: refusing to use selection data as training users"):
        load_profiles(UserSettings(path=str(data_dir / "esconv" / "test.jsonl")), "train", root)
    with pytest.raises(InputError, match=r"train\.jsonl: refusing to evaluate on train data"):
        load_profiles(UserSettings(held_out_path=str(data_dir / "esconv" / "train.jsonl")), "held_out", root)
