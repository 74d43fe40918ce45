"""The contrast benchmark's logic: its replies, its measures, its resumable records, its command."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from care_lab.bench.contrast import FAMILY_NAMES, ContrastItem, contrast_replies, family_texts, summarise
from care_lab.bench.contrast_run import esconv_items, evaluator_adapter, merge_records, reward_scorer, score_arm
from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json

ITEMS = [
    ContrastItem(
        "a", [{"role": "user", "content": "My cat died."}, {"role": "user", "content": "I miss her."}], "So sad."
    ),
    ContrastItem("b", [{"role": "user", "content": "I failed my exam."}], "That hurts. What happened?"),
]


def test_every_context_gets_the_real_reply_then_one_reply_per_family() -> None:
    replies = contrast_replies(ITEMS)
    assert [r.family for r in replies[0]] == ["real", *FAMILY_NAMES]
    by_family = {r.family: r.text for r in replies[0]}
    assert by_family["real"] == "So sad."
    assert by_family["other_conversation"] == "That hurts. What happened?"  # the next context's real reply
    assert by_family["echo"] == "I miss her."  # the user's last message
    assert by_family["harm_validating"] in family_texts()["harm_validating"]
    assert contrast_replies(ITEMS) == replies  # the choice among a family's texts is fixed


def _record(scores: list[float | None]) -> dict[str, Any]:
    return {"families": ["real", *FAMILY_NAMES], "scores": {"r": scores}}


def test_a_tie_or_a_missing_score_fails_and_all_ties_are_counted() -> None:
    n = len(FAMILY_NAMES)
    above = _record([0.9] + [0.1] * n)
    tied = _record([0.5] * (n + 1))
    missing = _record([None] + [0.1] * n)
    out = summarise([above, tied, missing], ["r"], resamples=20)["r"]
    assert out["families"]["dismissive"]["value"] == pytest.approx(1 / 3)
    assert out["all_tie"]["value"] == pytest.approx(1 / 3)
    assert out["worst"] == pytest.approx(1 / 3) and out["n"] == 3


def _scripted_reward(calls: list[str]) -> AdaptiveReward:
    def script(request: Any) -> str:
        calls.append(request.purpose)
        if request.purpose == "evaluation":
            return evaluation_json([5, 4, 3, 3, 2, 1])
        return rubric_json({"cognitive": 2, "affective": 1, "proactive": 1})

    backend = ScriptedBackend(script)
    return AdaptiveReward(RubricGenerator(backend), RubricEvaluator(backend))


def test_an_arm_scores_each_context_once_with_one_rubric_and_resumes(tmp_path: Path) -> None:
    calls: list[str] = []
    records = score_arm(
        "scripted", ITEMS, tmp_path, progress=lambda _: None, scorer=reward_scorer(_scripted_reward(calls))
    )
    assert set(records) == {"a", "b"} and (tmp_path / "scripted.jsonl").is_file()
    assert calls.count("rubric") == 2  # one rubric per context, shared by its ten replies
    again: list[str] = []
    resumed = score_arm(
        "scripted", ITEMS, tmp_path, progress=lambda _: None, scorer=reward_scorer(_scripted_reward(again))
    )
    assert resumed == records and again == []  # nothing scored twice
    merged = merge_records(ITEMS, {"scripted": records}, {})
    summary = summarise(merged, ["scripted", "length"], resamples=10)
    # the scripted judge gives every evaluated reply one score: the echo ("I miss her.", short) and the
    # guards' settled replies aside, the real reply never beats a family
    assert summary["scripted"]["families"]["one_word"]["value"] == 0.0
    assert summary["length"]["families"]["one_word"]["value"] == 1.0


def test_a_model_arm_keeps_no_record_of_another_evaluator_adapter(tmp_path: Path) -> None:
    import hashlib

    from care_sdk.bundled.adapters import bundled_adapter

    shipped = bundled_adapter("evaluator")
    assert shipped is not None
    assert evaluator_adapter("shipped") == hashlib.sha256(shipped.read_bytes()).hexdigest()[:12]
    assert evaluator_adapter("base") is None
    (tmp_path / "shipped.jsonl").write_text(json.dumps({"id": "a", "evaluator": "000000000000"}) + "\n")
    with pytest.raises(ValueError, match=r"shipped.jsonl, context a: scored with evaluator 000000000000"):
        score_arm("shipped", ITEMS, tmp_path, progress=lambda _: None)
    (tmp_path / "shipped.jsonl").write_text(json.dumps({"id": "a"}) + "\n")  # a record from before the pin
    with pytest.raises(ValueError, match=r"\(not recorded\)"):
        score_arm("shipped", ITEMS, tmp_path, progress=lambda _: None)


def test_the_pairwise_arms_fit_reads_the_pmi_of_any_record_of_the_context() -> None:
    from care_sdk.bundled.context_fit import Gate

    n = 1 + len(FAMILY_NAMES)
    reads = {"scores": [0.4] * n, "evaluated": [True] * n, "pmi": [20.0] + [0.0] * (n - 1), "own_share": [1.0] * n}
    pairwise = {"scores": [0.5] + [0.1] * (n - 1), "evaluated": [True] * n, "criteria": [None] * n}
    arms = {
        "pairwise2": {"a": {**pairwise, **{k: reads[k] for k in ("pmi", "own_share")}}},
        "pairwise3": {"a": pairwise},
    }
    merged = merge_records(ITEMS[:1], arms, {"train": Gate(slope=0.25, intercept=-2.0)})[0]["scores"]
    fit_real, fit_other = 1 / (1 + math.exp(-3.0)), 1 / (1 + math.exp(2.0))
    assert merged["pairwise3_fit0"][0] == pytest.approx(fit_real * 0.5, rel=1e-4)
    assert merged["pairwise3_fit0"][1] == pytest.approx(fit_other * 0.1, rel=1e-4)
    assert merged["pairwise3_fit"][1] == pytest.approx(fit_other * (0.5 + 0.05), rel=1e-4)
    assert merged["pairwise2_fit0"] == merged["pairwise3_fit0"]


def test_the_method_arm_gives_context_fit_with_and_without_its_floor() -> None:
    from care_sdk.bundled.context_fit import Gate

    n = 1 + len(FAMILY_NAMES)
    method = {
        "scores": [0.5] + [0.1] * (n - 1),
        "evaluated": [True] * (n - 1) + [False],  # the last reply settled by a guard keeps its reward
        "criteria": [None] * n,
        "pmi": [20.0] + [0.0] * (n - 1),
        "own_share": [1.0] * n,
    }
    merged = merge_records(ITEMS[:1], {"method": {"a": method}}, {"train": Gate(slope=0.25, intercept=-2.0)})
    scores = merged[0]["scores"]
    fit_real, fit_other = 1 / (1 + math.exp(-3.0)), 1 / (1 + math.exp(2.0))
    assert scores["fit0_train"][:2] == pytest.approx([fit_real * 0.5, fit_other * 0.1], rel=1e-4)
    assert scores["fit_train"][:2] == pytest.approx([fit_real * 0.75, fit_other * 0.55], rel=1e-4)
    assert scores["fit0_train"][-1] == scores["fit_train"][-1] == 0.1


def test_the_selection_sample_follows_the_rule(data_dir: Path) -> None:
    items = esconv_items(data_dir / "esconv" / "valid.jsonl", 5)
    assert len(items) == 5 and len({i.id for i in items}) == 5
    for item in items:
        assert sum(m["role"] == "user" for m in item.context) >= 2 and len(item.reply.split()) >= 12


def test_the_sample_shaped_like_the_test_read_takes_earlier_shorter_turns(data_dir: Path) -> None:
    path = data_dir / "esconv" / "test.jsonl"  # role selection
    shaped = esconv_items(path, 200, min_users=1, min_words=8)
    default = {i.id.split("#")[0]: i for i in esconv_items(path, 200)}
    assert shaped and all(len(i.reply.split()) >= 8 and any(m["role"] == "user" for m in i.context) for i in shaped)
    earlier = [i for i in shaped if i.id.split("#")[0] in default and i.id != default[i.id.split("#")[0]].id]
    assert earlier and all(len(i.context) < len(default[i.id.split("#")[0]].context) for i in earlier)


def test_care_bench_contrast_is_a_command() -> None:
    from care_sdk.cli import build_parser

    args = build_parser().parse_args(
        ["bench", "contrast", "--backend", "openai:m@http://127.0.0.1:9/v1", "--limit", "3"]
    )
    assert args.limit == 3 and args.backend.startswith("openai:")
