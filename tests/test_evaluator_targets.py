"""Evaluator training data: targets from the Lend-an-Ear judge and ESConv candidates, split by
conversation, rendered exactly as the evaluator prompts at inference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from care_lab.data import lend_an_ear_split
from care_lab.training.build_data import build_data
from care_lab.training.config import BuildDataConfig
from care_lab.training.evaluator_targets import (
    EVASIVE_REPLIES,
    PLATITUDES,
    judged_scores,
)
from care_lab.training.sft import sft_rows
from care_sdk import RubricEvaluator
from care_sdk.errors import ConfigError
from care_sdk.prompts import evaluator_messages, parse_evaluation
from care_sdk.testing import ScriptedBackend, evaluation_json
from care_sdk.types import Dimension, Message, Rubric


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("evaluator_data")
    config = BuildDataConfig(
        output_dir=str(out),
        data_dir=str(data_dir),
        targets="evaluator",
        esconv_splits=("train", "valid"),
        use_mint=True,
        max_dialogues=20,
        max_context_messages=4,
    )
    build_data(config, log=lambda s: None)
    return out


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_lend_an_ear_records_come_from_train_conversations_only(built: Path) -> None:
    records = [r for r in _records(built / "sft" / "train.jsonl") if r["source"] == "lend-an-ear"]
    assert len(records) > 1000
    assert {lend_an_ear_split(r["dialogue_id"]) for r in records} == {"train"}
    valid = _records(built / "sft" / "valid.jsonl")
    assert valid and {r["source"] for r in valid} == {"esconv"}
    roles = json.loads((built / "roles.json").read_text())
    assert roles == {"sft/train.jsonl": "train", "sft/valid.jsonl": "selection"}


def test_judge_scores_become_criterion_targets_with_negative_dimensions_reversed(built: Path) -> None:
    record = next(r for r in _records(built / "sft" / "train.jsonl") if r["source"] == "lend-an-ear")
    rubric = Rubric.model_validate(record["rubric"])
    evaluation = parse_evaluation(record["target"], rubric)
    assert [s.score for s in evaluation.scores] == record["scores"]
    assert [c.dimension for c in rubric.criteria] == [Dimension.COGNITIVE] * 2 + [Dimension.AFFECTIVE] * 2 + [
        Dimension.PROACTIVE
    ] * 2
    scores = {"validating_emotions": 4, "encouraging_elaboration": 1, "demonstrating_understanding": 3}
    scores |= {"advice_giving": 5, "self_oriented": 4, "dismissing_emotions": 5}
    assert [s for _, s in judged_scores(scores)] == [3, 1, 4, 1, 5, 2]


def test_esconv_reference_outscores_every_negative_of_its_context(built: Path) -> None:
    records = [r for r in _records(built / "sft" / "train.jsonl") if r["source"] == "esconv"]
    by_context: dict[tuple[str, int], dict[str, list[int]]] = {}
    for r in records:
        by_context.setdefault((r["dialogue_id"], r["turn_index"]), {})[r["kind"]] = r["scores"]
    compared = 0
    for kinds in by_context.values():
        if "reference" in kinds and len(kinds) == 2:
            (negative,) = [v for k, v in kinds.items() if k != "reference"]
            assert sum(kinds["reference"]) > sum(negative)
            compared += 1
    assert compared > 20
    negatives = {r["reply"] for r in records if r["kind"] in ("platitude", "evasive")}
    assert negatives <= set(PLATITUDES) | set(EVASIVE_REPLIES)


def test_esconv_test_split_is_refused(tmp_path: Path, data_dir: Path) -> None:
    config = BuildDataConfig(output_dir=str(tmp_path), data_dir=str(data_dir), targets="evaluator")
    with pytest.raises(ConfigError, match="test"):
        build_data(config, log=lambda s: None)


def test_sft_rows_render_the_prompt_the_evaluator_sends(built: Path) -> None:
    record = _records(built / "sft" / "train.jsonl")[0]
    row = sft_rows([record], keep=4, criteria_per_dimension=2, role="evaluator")[0]
    rubric = Rubric.model_validate(record["rubric"])
    evaluator = RubricEvaluator(ScriptedBackend([evaluation_json([3] * 6)]), max_context_messages=4)
    sent = evaluator.request(record["context"], rubric, record["reply"]).messages
    assert row["prompt"] == [m.model_dump() for m in sent]
    assert row["completion"] == [{"role": "assistant", "content": record["target"]}]
    with pytest.raises(Exception, match="rubric"):
        sft_rows([{"context": record["context"], "target": "{}"}], keep=4, criteria_per_dimension=2, role="evaluator")


def test_the_context_cut_keeps_the_last_messages_only() -> None:
    context = [Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i}") for i in range(7)]
    text = evaluator_messages(context, Rubric.uniform_fixed(), "ok", max_context_messages=3)[1].content
    assert "message 4" in text and "message 6" in text and "message 3" not in text
    with pytest.raises(ConfigError):
        RubricEvaluator(ScriptedBackend([]), max_context_messages=0)


def test_negatives_per_reference_and_the_esconv_share_are_settings(tmp_path: Path, data_dir: Path) -> None:
    settings = {"targets": "evaluator", "esconv_splits": ("train",), "max_dialogues": 20, "max_context_messages": 4}
    config = BuildDataConfig(
        output_dir=str(tmp_path / "esconv"),
        data_dir=str(data_dir),
        use_mint=False,
        negatives=("offcontext", "platitude"),
        negatives_per_reference=2,
        **settings,
    )
    build_data(config, log=lambda s: None)
    by_context: dict[tuple[str, int], list[dict]] = {}
    for r in _records(tmp_path / "esconv" / "sft" / "train.jsonl"):
        by_context.setdefault((r["dialogue_id"], r["turn_index"]), []).append(r)
    assert len(by_context) > 20
    for group in by_context.values():
        assert sorted(r["kind"] for r in group) == ["offcontext", "platitude", "reference"]
        reference = next(r for r in group if r["kind"] == "reference")
        assert all(r["rubric"] == reference["rubric"] and r["context"] == reference["context"] for r in group)
        assert all(sum(r["scores"]) < sum(reference["scores"]) for r in group if r is not reference)
        offcontext = next(r for r in group if r["kind"] == "offcontext")
        assert offcontext["reply"] != reference["reply"]

    config = BuildDataConfig(
        output_dir=str(tmp_path / "both"), data_dir=str(data_dir), esconv_per_judged=0.1, **settings
    )
    build_data(config, log=lambda s: None)
    records = _records(tmp_path / "both" / "sft" / "train.jsonl")
    judged = sum(r["source"] == "lend-an-ear" for r in records)
    assert sum(r["source"] == "esconv" for r in records) == round(0.1 * judged)
