"""build-data: teacher targets checked against r_align, the two-judge filter, pairs, splits, counts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from care_sdk.backends import GenerationRequest
from care_sdk.prompts import parse_rubric
from care_sdk.testing import ScriptedBackend, rubric_json
from care_sdk.training import r_align
from care_sdk.training.build_data import SPLITS, _Backends, build_data, input_key
from care_sdk.training.config import BuildDataConfig
from care_sdk.types import Message

COUNTS = re.compile(r"Strategy count per dimension: cognitive (\d+), affective (\d+), proactive (\d+)")


def _read(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class Roles:
    """Scripted teacher / judges / annotator, answering by the role their prompt names."""

    def __init__(self) -> None:
        self.teacher_calls = 0
        self.judge_calls = 0

    def __call__(self, request: GenerationRequest) -> str:
        system = request.messages[0].content
        user = request.messages[-1].content
        if system.startswith("You write a target rubric"):
            self.teacher_calls += 1
            c, a, p = (int(x) for x in COUNTS.search(user).groups())  # type: ignore[union-attr]
            if c > 0 and a == 0:
                # a weight vector that violates the rule for these counts, on every attempt
                return rubric_json(
                    {"cognitive": 1 + 10 * (c == 0), "affective": 1 + 10 * (a == 0), "proactive": 1 + 10 * (p == 0)}
                )
            return rubric_json({"cognitive": c + 0.5, "affective": a + 0.5, "proactive": p + 0.5})
        if system.startswith("You check a proposed rubric"):
            self.judge_calls += 1
            accept = "proactive 0.6" not in user
            return json.dumps({"accept": accept, "reason": "fine" if accept else "too proactive"})
        if system.startswith("You label the support strategies"):
            return json.dumps({"strategies": ["Question", "Providing Suggestions"]})
        raise AssertionError(system[:60])


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Roles:
    roles = Roles()
    backend = ScriptedBackend(roles)
    monkeypatch.setattr(_Backends, "get", lambda self, spec: backend)
    return roles


def _config(tmp_path: Path, data_dir: Path, **kw: object) -> BuildDataConfig:
    base: dict[str, object] = dict(
        output_dir=str(tmp_path / "out"),
        data_dir=str(data_dir),
        max_dialogues=4,
        max_turns=12,
        teacher="scripted",
        judges=("scripted", "scripted"),
        annotator="scripted",
        pref_margin=1.0,
    )
    base.update(kw)
    return BuildDataConfig(**base)  # type: ignore[arg-type]


def test_build_data_writes_splits_and_counts(tmp_path: Path, data_dir: Path, scripted: Roles) -> None:
    report = build_data(_config(tmp_path, data_dir), log=lambda s: None)
    out = tmp_path / "out"
    for name in ("sft", "pairs"):
        for split in SPLITS:
            assert (out / name / f"{split}.jsonl").exists()
    sft = {s: _read(out / "sft" / f"{s}.jsonl") for s in SPLITS}
    pairs = {s: _read(out / "pairs" / f"{s}.jsonl") for s in SPLITS}
    counts = report.sft
    # every candidate is accounted for: kept, skipped, rejected by a stated reason, or beyond max_turns
    kept = sum(len(v) for v in sft.values())
    assert kept == counts["kept: train"] + counts["kept: valid"] + counts["kept: test"] > 0
    assert counts["rejected: misaligned weights"] > 0
    assert counts["rejected: by the judges"] > 0 and counts["judge 1: rejected"] > 0
    assert scripted.teacher_calls > kept  # misaligned turns were re-sampled before rejection
    for rows in sft.values():
        for row in rows:
            rubric = parse_rubric(str(row["target"]))
            assert r_align(rubric, row["strategy_counts"]) == 1.0  # type: ignore[arg-type]
            assert row["target_origin"] == "teacher"
    # ESConv keeps its own splits; Lend-an-Ear is split by conversation id
    assert {r["split"] for r in sft["train"]} == {"train"}
    assert any(r["source"] == "esconv" for r in sft["test"])
    # pairs: both builders, counts present, MINT pairs respect the margin, unlabelled chosen replies annotated
    all_pairs = [p for rows in pairs.values() for p in rows]
    assert {p["source"] for p in all_pairs} == {"esconv", "lend-an-ear"}
    for p in all_pairs:
        assert set(p["chosen_strategy_counts"]) == {"cognitive", "affective", "proactive"}  # type: ignore[arg-type]
        assert p["chosen"] != p["rejected"]
        if p["source"] == "lend-an-ear":
            assert p["margin"] >= 1.0  # type: ignore[operator]
            assert p["strategy_origin"] == ("label" if p["chosen_system"] == "gold" else "annotator")
        else:
            assert p["dialogue_id"] not in str(p["rejected_system"])
    assert report.pairs["annotated"] > 0
    # no input lands in two splits
    for name, rows_by_split in (("sft", sft), ("pairs", pairs)):
        keys = {
            s: {input_key([Message.model_validate(m) for m in r["context"]]) for r in rows}  # type: ignore[union-attr]
            for s, rows in rows_by_split.items()
        }
        assert not keys["train"] & keys["test"], name
        assert not keys["train"] & keys["valid"] and not keys["valid"] & keys["test"], name
    saved = json.loads((out / "report.json").read_text())
    assert saved["sft"]["kept: train"] == len(sft["train"])
    assert saved["files"]["pairs/train.jsonl"] == len(pairs["train"])


def test_build_data_is_deterministic_and_repair_keeps_misaligned(
    tmp_path: Path, data_dir: Path, scripted: Roles
) -> None:
    a = build_data(_config(tmp_path / "a", data_dir, on_misaligned="repair", judges=None), log=lambda s: None)
    b = build_data(_config(tmp_path / "b", data_dir, on_misaligned="repair", judges=None), log=lambda s: None)
    assert a.sft == b.sft and a.pairs == b.pairs
    for name in ("sft/train.jsonl", "pairs/test.jsonl"):
        assert (tmp_path / "a" / "out" / name).read_text() == (tmp_path / "b" / "out" / name).read_text()
    rows = _read(tmp_path / "a" / "out" / "sft" / "train.jsonl")
    repaired = [r for r in rows if r["target_origin"] == "repaired"]
    assert repaired and a.sft["repaired: misaligned weights"] > 0
    assert all(r_align(parse_rubric(str(r["target"])), r["strategy_counts"]) == 1.0 for r in repaired)  # type: ignore[arg-type]


def test_build_data_without_teacher_uses_count_weights_and_reports_unlabelled_pairs(
    tmp_path: Path, data_dir: Path
) -> None:
    lines: list[str] = []
    report = build_data(
        _config(tmp_path, data_dir, teacher=None, judges=None, annotator=None, esconv_splits=("test",)),
        log=lines.append,
    )
    assert "kept: test" in lines[-1]  # the counts table is printed
    rows = _read(tmp_path / "out" / "sft" / "test.jsonl")
    assert rows and all(r["target_origin"] == "counts" for r in rows)
    assert report.pairs["dropped: no strategy labels (no annotator)"] > 0


def test_outputs_load_with_datasets(tmp_path: Path, data_dir: Path) -> None:
    datasets = pytest.importorskip("datasets")
    build_data(_config(tmp_path, data_dir, teacher=None, judges=None, annotator=None), log=lambda s: None)
    ds = datasets.load_dataset("json", data_files=str(tmp_path / "out" / "pairs" / "train.jsonl"), split="train")
    assert {"context", "chosen", "rejected", "chosen_strategy_counts"} <= set(ds.column_names)


@pytest.mark.slow
def test_build_data_with_the_bundled_model_as_every_role(tmp_path: Path, data_dir: Path) -> None:
    """The real path: llama.cpp with the bundled model as teacher, both judges and annotator."""
    cfg = BuildDataConfig(
        output_dir=str(tmp_path / "out"),
        data_dir=str(data_dir),
        esconv_splits=("test",),
        use_mint=False,
        max_dialogues=1,
        max_turns=2,
        teacher="default",
        judges=("default", "default"),
        teacher_attempts=2,
        on_misaligned="repair",
        teacher_max_tokens=300,
    )
    report = build_data(cfg, log=lambda s: None)
    sft = report.sft
    judged = sft["kept: test"] + sft["rejected: by the judges"]
    # every candidate got a teacher target (possibly repaired) or an unusable-reply rejection
    assert judged + sft["rejected: teacher reply unusable"] == 2
    for row in _read(tmp_path / "out" / "sft" / "test.jsonl"):
        assert r_align(parse_rubric(str(row["target"])), row["strategy_counts"]) == 1.0  # type: ignore[arg-type]
