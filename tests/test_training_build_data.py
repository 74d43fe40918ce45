"""build-data: teacher targets (alignment measured, not enforced), target judges, same-context
candidate pairs judged by majority, Lend-an-Ear pairs, annotator, splits, roles and counts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from care_lab.data.judged_pairs import HUMAN_SYSTEMS
from care_lab.data.roles import OUTPUT_ROLES, data_role
from care_lab.training import r_align
from care_lab.training.build_data import SPLITS, build_data, input_key
from care_lab.training.config import BuildDataConfig, load_config, model_identity, validate_config
from care_sdk.backends import BackendPool, GenerationRequest
from care_sdk.errors import ConfigError
from care_sdk.prompts import parse_rubric
from care_sdk.testing import ScriptedBackend, rubric_json
from care_sdk.types import Message

COUNTS = re.compile(r"Strategy count per dimension: cognitive (\d+), affective (\d+), proactive (\d+)")
REPLIES = re.compile(r"Reply A: (.*)\n\nReply B: (.*)\n\nWhich reply", re.S)


def _read(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class Roles:
    """Scripted teacher / target judges / candidates / pair judges / annotator, answering by the role
    their system prompt names. Pair judges prefer the longer reply (a tie on equal length)."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def _count(self, role: str) -> None:
        self.calls[role] = self.calls.get(role, 0) + 1

    def __call__(self, request: GenerationRequest) -> str:
        system = request.messages[0].content
        user = request.messages[-1].content
        if system.startswith("You write a target rubric"):
            self._count("teacher")
            assert "must get the largest weight" not in system  # v2: alignment is not demanded
            c, a, p = (int(x) for x in COUNTS.search(user).groups())  # type: ignore[union-attr]
            if c > 0 and a == 0:  # weights that violate r_align for these counts
                return rubric_json({"cognitive": 1 + 10 * (c == 0), "affective": 1 + 10 * (a == 0), "proactive": 1})
            return rubric_json({"cognitive": c + 0.5, "affective": a + 0.5, "proactive": p + 0.5})
        if system.startswith("You check a proposed rubric"):
            self._count("target judge")
            accept = "proactive 0.6" not in user
            return json.dumps({"accept": accept, "reason": "fine" if accept else "too proactive"})
        if system.startswith("You are a warm"):
            self._count("candidate")
            return f"I hear you, that sounds hard. Tell me more ({(request.seed or 0) // 1000})."  # equal lengths
        if system.startswith("You compare two candidate replies"):
            self._count("pair judge")
            a, b = REPLIES.search(user).groups()  # type: ignore[union-attr]
            better = "tie" if len(a) == len(b) else ("A" if len(a) > len(b) else "B")
            return json.dumps({"better": better, "reason": "longer"})
        if system.startswith("You label the support strategies"):
            self._count("annotator")
            return json.dumps({"strategies": ["Question", "Providing Suggestions"]})
        raise AssertionError(system[:60])


@pytest.fixture
def scripted() -> tuple[Roles, BackendPool]:
    roles = Roles()
    backend = ScriptedBackend(roles)
    return roles, BackendPool({"scripted": backend, "judge": backend})  # pair judges: another name


def _config(tmp_path: Path, data_dir: Path, **kw: object) -> BuildDataConfig:
    base: dict[str, object] = dict(
        output_dir=str(tmp_path / "out"),
        data_dir=str(data_dir),
        max_dialogues=4,
        max_turns=6,
        teacher="scripted",
        target_judges=("scripted", "scripted"),
        candidates=("scripted", "scripted"),
        judges=("judge", "judge", "judge"),  # no judge writes candidates
        annotator="scripted",
        pref_margin=1.0,
    )
    base.update(kw)
    return BuildDataConfig(**base)  # type: ignore[arg-type]


def test_build_data_writes_splits_roles_and_counts(
    tmp_path: Path, data_dir: Path, scripted: tuple[Roles, BackendPool]
) -> None:
    roles, pool = scripted
    report = build_data(_config(tmp_path, data_dir), pool=pool, log=lambda s: None)
    out = tmp_path / "out"
    for name in ("sft", "pairs"):
        for split in SPLITS:
            assert (out / name / f"{split}.jsonl").exists()
            # roles.json declares each file's role: valid and test come from selection data
            assert data_role(out / name / f"{split}.jsonl") == OUTPUT_ROLES[split]
            assert {r["role"] for r in _read(out / name / f"{split}.jsonl")} <= {OUTPUT_ROLES[split]}
    sft = {s: _read(out / "sft" / f"{s}.jsonl") for s in SPLITS}
    pairs = {s: _read(out / "pairs" / f"{s}.jsonl") for s in SPLITS}
    counts = report.sft
    kept = sum(len(v) for v in sft.values())
    assert kept == counts["kept: train"] + counts["kept: valid"] + counts["kept: test"] > 0
    # alignment is measured and reported, not enforced: misaligned targets are kept (and counted)
    assert counts["misaligned targets (kept)"] > 0 and counts["aligned targets (r_align = 1)"] > 0
    assert "rejected: misaligned weights" not in counts
    assert counts["rejected: by the judges"] > 0 and counts["judge 1: rejected"] > 0
    dropped = sum(v for k, v in counts.items() if k.startswith("dropped: input also"))
    assert roles.calls["teacher"] == kept + counts["rejected: by the judges"] + dropped  # no resampling
    for rows in sft.values():
        for row in rows:
            assert row["r_align"] == r_align(parse_rubric(str(row["target"])), row["strategy_counts"])  # type: ignore[arg-type]
            assert row["target_origin"] == "teacher"
    assert {r["split"] for r in sft["train"]} == {"train"}
    assert any(r["source"] == "esconv" for r in sft["test"])
    # pairs: same-context candidate pairs and Lend-an-Ear pairs; never off-context by default
    all_pairs = [p for rows in pairs.values() for p in rows]
    assert {p["origin"] for p in all_pairs} == {"candidates", "mint-judge"}
    for p in all_pairs:
        assert set(p["chosen_strategy_counts"]) == {"cognitive", "affective", "proactive"}  # type: ignore[arg-type]
        assert p["chosen"] != p["rejected"]
        if p["origin"] == "candidates":
            assert len(str(p["chosen"])) > len(str(p["rejected"]))  # the majority's choice
            assert p["votes"] == "3/3"
        else:
            assert p["margin"] >= 1.0  # type: ignore[operator]
            assert p["rejected_system"] not in HUMAN_SYSTEMS  # mint_reject_human is off by default
        assert p["strategy_origin"] == ("label" if p["chosen_system"] in HUMAN_SYSTEMS else "annotator")
    assert report.pairs["annotated"] > 0 and report.pairs["candidates: comparisons"] > 0
    # the two candidates have equal lengths: the judges' tie drops that pair
    assert report.pairs["candidates: dropped (tie or split vote)"] > 0
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
    assert saved["prompt_version"] == "data-v2"
    # the Lend-an-Ear pairs' length balance is reported
    balance = saved["lengths"]["mint-judge"]
    assert (
        balance["pairs"] == sum(p["origin"] == "mint-judge" for p in all_pairs) and 0 <= balance["chosen longer"] <= 1
    )


def test_candidate_pairs_are_kept_by_strict_majority_only(tmp_path: Path, data_dir: Path) -> None:
    """One judge prefers the reference, one a candidate, one says tie: no majority, no pair."""

    def split_vote(request: GenerationRequest) -> str:
        system = request.messages[0].content
        if system.startswith("You are a warm"):
            return f"Candidate reply {request.seed}."
        if system.startswith("You compare two candidate replies"):
            a, _ = REPLIES.search(request.messages[-1].content).groups()  # type: ignore[union-attr]
            judge = (request.seed or 0) // 101  # judge n asks with seed + 101 * n
            if judge == 3:
                return json.dumps({"better": "tie", "reason": "same"})
            wants = "Candidate" if judge == 1 else "not a candidate"
            a_is = a.startswith("Candidate") == (wants == "Candidate")
            return json.dumps({"better": "A" if a_is else "B", "reason": "x"})
        raise AssertionError(system[:40])

    backend = ScriptedBackend(split_vote)
    pool = BackendPool({"s": backend, "j": backend})
    cfg = _config(
        tmp_path,
        data_dir,
        teacher=None,
        target_judges=None,
        candidates=("s",),
        judges=("j", "j", "j"),
        annotator=None,
        use_mint=False,
        esconv_splits=("test",),
        max_dialogues=1,
        max_turns=2,
    )
    report = build_data(cfg, pool=pool, log=lambda s: None)
    assert report.pairs["candidates: comparisons"] == 2
    assert report.pairs["candidates: dropped (tie or split vote)"] == 2
    assert report.files["pairs/test.jsonl"] == 0


def test_enforced_alignment_rejects_or_repairs_and_is_deterministic(
    tmp_path: Path, data_dir: Path, scripted: tuple[Roles, BackendPool]
) -> None:
    roles, pool = scripted
    cfg = dict(target_judges=None, judges=None, candidates=(), use_mint=False)
    a = build_data(_config(tmp_path / "a", data_dir, on_misaligned="repair", **cfg), pool=pool, log=lambda s: None)
    b = build_data(_config(tmp_path / "b", data_dir, on_misaligned="repair", **cfg), pool=pool, log=lambda s: None)
    assert a.sft == b.sft
    assert (tmp_path / "a/out/sft/train.jsonl").read_text() == (tmp_path / "b/out/sft/train.jsonl").read_text()
    rows = _read(tmp_path / "a" / "out" / "sft" / "train.jsonl")
    repaired = [r for r in rows if r["target_origin"] == "repaired"]
    assert repaired and a.sft["repaired: misaligned weights"] > 0
    assert all(r["r_align"] == 1.0 for r in rows)
    c = build_data(_config(tmp_path / "c", data_dir, on_misaligned="reject", **cfg), pool=pool, log=lambda s: None)
    assert c.sft["rejected: misaligned weights"] == a.sft["repaired: misaligned weights"]
    assert roles.calls["teacher"] > 3 * c.sft["kept: train"]  # misaligned turns were re-sampled


def test_lend_an_ear_human_reply_and_offcontext_options(
    tmp_path: Path, data_dir: Path, scripted: tuple[Roles, BackendPool]
) -> None:
    _, pool = scripted
    cfg = dict(teacher=None, target_judges=None, judges=None, candidates=(), max_dialogues=12)
    off = build_data(_config(tmp_path / "off", data_dir, **cfg), pool=pool, log=lambda s: None)
    on = build_data(
        _config(tmp_path / "on", data_dir, mint_reject_human=True, offcontext_pairs=True, **cfg),
        pool=pool,
        log=lambda s: None,
    )
    rejected_human = sum(v for k, v in on.pairs.items() if k.startswith("human reply rejected (mint-judge)"))
    assert rejected_human > 0
    assert not any(k.startswith("human reply rejected (mint-judge)") for k in off.pairs)
    assert off.pairs["mint: turns whose human reply may not be rejected"] > 0
    assert any(k.endswith("(offcontext)") for k in on.pairs) and not any(k.endswith("(offcontext)") for k in off.pairs)


def test_build_data_without_models_uses_count_weights_and_reports_unlabelled_pairs(
    tmp_path: Path, data_dir: Path
) -> None:
    lines: list[str] = []
    report = build_data(
        _config(
            tmp_path,
            data_dir,
            teacher=None,
            target_judges=None,
            judges=None,
            annotator=None,
            esconv_splits=("test",),
            offcontext_pairs=True,
        ),
        log=lines.append,
    )
    assert "kept: test" in lines[-1]  # the counts table is printed
    rows = _read(tmp_path / "out" / "sft" / "test.jsonl")
    assert rows and all(r["target_origin"] == "counts" and r["r_align"] == 1.0 for r in rows)
    assert report.pairs["dropped: no strategy labels (no annotator)"] > 0


def test_outputs_load_with_datasets(tmp_path: Path, data_dir: Path) -> None:
    datasets = pytest.importorskip("datasets")
    cfg = _config(tmp_path, data_dir, teacher=None, target_judges=None, judges=None, annotator=None)
    build_data(cfg, log=lambda s: None)
    ds = datasets.load_dataset("json", data_files=str(tmp_path / "out" / "sft" / "train.jsonl"), split="train")
    assert {"context", "target", "strategy_counts", "r_align"} <= set(ds.column_names)


def test_no_judge_votes_on_a_pair_holding_its_own_candidate(
    tmp_path: Path, data_dir: Path, scripted: tuple[Roles, BackendPool]
) -> None:
    """The config refuses a judge that writes candidates, naming the field; the pairs code skips such votes too."""
    with pytest.raises(
        ConfigError, match=r"judges: .*judges\[1\] \(openai:gpt-4.1@http://x/v1\) also writes candidates"
    ):
        validate_config(
            BuildDataConfig,
            {
                "output_dir": "o",
                "candidates": ["openai:gpt-4.1"],
                "judges": ["openai:deepseek-chat", "openai:gpt-4.1@http://x/v1"],
            },
            source="paper.yaml",
        )
    with pytest.raises(ConfigError, match="judges"):  # the bundled model is one model, with or without adapters
        validate_config(BuildDataConfig, {"output_dir": "o", "candidates": ["base"], "judges": ["default"]})
    paper = load_config(BuildDataConfig, Path(__file__).parents[1] / "training" / "configs" / "build_data_paper.yaml")
    writers = {model_identity(c) for c in paper.candidates}
    assert paper.judges and not writers & {model_identity(j) for j in paper.judges}
    # past the config (a config built without validation), the votes are skipped and the pairs dropped
    _, pool = scripted
    good = _config(tmp_path, data_dir, teacher=None, target_judges=None, use_mint=False, max_dialogues=1, max_turns=2)
    cfg = good.model_copy(update={"candidates": ("scripted",), "include_reference": True, "judges": ("scripted",) * 3})
    report = build_data(cfg, pool=pool, log=lambda s: None)
    comparisons = report.pairs["candidates: comparisons"]
    assert comparisons > 0 and report.pairs["candidates: self-votes skipped"] == 3 * comparisons
    assert report.pairs["candidates: dropped (no judge without a reply in the pair)"] == comparisons


@pytest.mark.slow
def test_build_data_with_the_bundled_model_as_every_role(tmp_path: Path, data_dir: Path) -> None:
    """The real path: llama.cpp with the bundled model as teacher and target judge (it cannot also
    judge pairs of its own candidates, and there is no other local model: no candidate pairs)."""
    cfg = BuildDataConfig(
        output_dir=str(tmp_path / "out"),
        data_dir=str(data_dir),
        esconv_splits=("test",),
        use_mint=False,
        max_dialogues=1,
        max_turns=2,
        teacher="default",
        target_judges=("default",),
        teacher_attempts=2,
        teacher_max_tokens=300,
        candidates=(),
        judges=None,
    )
    report = build_data(cfg, log=lambda s: None)
    sft = report.sft
    judged = sft["kept: test"] + sft["rejected: by the judges"]
    # every candidate got a teacher target (kept or judged away) or an unusable-reply rejection
    assert judged + sft["rejected: teacher reply unusable"] == 2
    assert sft["aligned targets (r_align = 1)"] + sft["misaligned targets (kept)"] == sft["kept: test"]
    assert report.pairs["candidates: comparisons"] == 0 and report.files["pairs/test.jsonl"] == 0
