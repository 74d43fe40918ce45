"""The quality benchmark: each task on tiny hand-made data with a scripted backend (metrics computed by
hand), resume and refusal to mix runs, and every task on a few real items with the bundled model."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from care_lab.bench.quality import QualityRunner
from care_lab.bench.tasks import TASKS, DataPaths, Settings, select, spread
from care_lab.bench.variants import MODEL_VARIANTS, VARIANTS, Item, VariantScorer
from care_sdk import AdaptiveReward, Message, Rubric, RubricEvaluator, RubricGenerator
from care_sdk.backends import EVALUATION, GenerationRequest
from care_sdk.cli import main
from care_sdk.errors import ConfigError
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json

# -- a scripted model whose rewards follow markers in the text -----------------------------------

WEIGHTS = {
    "[COG]": {"cognitive": 6, "affective": 2, "proactive": 2},
    "[AFF]": {"cognitive": 2, "affective": 6, "proactive": 2},
    "[PRO]": {"cognitive": 2, "affective": 2, "proactive": 6},
}


def script(request: GenerationRequest) -> str:
    """Rubric: weights from the last marker in the context. Evaluation: scores from the reply's marker."""
    text = request.messages[-1].content
    assert request.json_schema is not None
    if request.purpose == EVALUATION:
        reply = text.rsplit("Candidate reply:\n", 1)[1]
        dims = re.findall(r"^c\d+ \((\w+)\)", text, re.M)
        if "<FAIL>" in reply:
            return "not json"
        if "<GOOD>" in reply:
            return evaluation_json([5] * len(dims))
        if "<BAD>" in reply:
            return evaluation_json([1] * len(dims))
        if "<COG>" in reply:
            return evaluation_json([5 if d == "cognitive" else 1 for d in dims])
        return evaluation_json([3] * len(dims))
    marker = max(WEIGHTS, key=lambda m: text.rfind(m))
    weights = WEIGHTS[marker] if text.rfind(marker) >= 0 else {"cognitive": 1, "affective": 1, "proactive": 1}
    return rubric_json(weights)


def runner(out: Path, backend: ScriptedBackend | None = None) -> QualityRunner:
    backend = backend or ScriptedBackend(script)
    return QualityRunner(RubricGenerator(backend), RubricEvaluator(backend), out_dir=out, batch_size=3)


# -- tiny data in each corpus's own format --------------------------------------------------------

SUCCESS = [
    [
        ("usr", "[COG] I can't decide about the job.", None),
        ("sys", "<GOOD> What are the options?", "Question"),
        ("usr", "[AFF] I feel awful about it.", None),
        ("sys", "<GOOD> That sounds painful.", "Reflection of feelings"),
    ],
    [
        ("usr", "[COG] My boss yelled at me.", None),
        ("sys", "<GOOD> You did well to stay calm.", "Affirmation and Reassurance"),
    ],
    [
        ("usr", "[PRO] What do I do now?", None),
        ("sys", "<MID> Try a walk.", "Providing Suggestions"),
        ("usr", "ok", None),
        ("sys", "<MID> bye", "Others"),
    ],
]
FAILED = [
    [("speaker", "[AFF] I am so sad.", None), ("listener", "<BAD> whatever", "Other")],
    [("speaker", "hi", None), ("listener", "<MID> hm", "Questions")],
]
CONVERSATIONS = {  # id: (seeker line, supporter reply, expert positives, expert negatives)
    "a1": ("[AFF] I was passed over for a promotion.", "<GOOD> That must sting.", 5, 1),
    "a4": ("[AFF] My manager ignores me.", "<MID> Hm, okay.", 3, 3),
    "c11": ("[AFF] My colleague took credit.", "<BAD> Happens to everyone.", 2, 4),
    "c4": ("[COG] I can't tell if my work matters.", "<COG> What would mattering look like?", 4, 2),
}
POSITIVE = ("validating_emotions", "encouraging_elaboration", "demonstrating_understanding")
NEGATIVE = ("advice_giving", "self_oriented", "dismissing_emotions")
JUDGED = [  # (conversation, turn_index, system, reply, aggregated judge score)
    ("a1", 1, "gold", "<GOOD> gold one", 4.5),
    ("a1", 1, "s1", "<BAD> s1 one", 3.0),
    ("a1", 1, "s2", "<MID> s2 one", 4.0),
    ("a4", 1, "gold", "<BAD> gold two", 5.0),
    ("a4", 1, "s1", "<GOOD> s1 two", 3.0),
    ("a4", 1, "s2", "<GOOD> s2 two!", 3.0),
    ("a4", 1, "s3", "<BAD> s3 two", 1.0),
    ("a1", 2, "gold", "<GOOD> no such turn", 3.0),
    ("zz", 1, "gold", "<GOOD> no such conversation", 3.0),
]
SAGE = [  # (role, text, emotion point, change caused by the previous reply)
    ("user", "[AFF] 我很难过", 40, None),
    ("assistant", "<GOOD> 我理解你", None, None),
    ("user", "谢谢", 50, 10),
    ("assistant", "<BAD> 随便", None, None),
    ("user", "唉", 30, -20),
    ("assistant", "<MID> 嗯", None, None),
    ("user", "好吧", 30, 0),
]


def write_esconv(path: Path, dialogues: list[list[tuple[str, str, str | None]]]) -> None:
    """ESConv dialogues in the dataset's JSONL form, one per line: (speaker, text, strategy) turns."""
    with path.open("w") as handle:
        for turns in dialogues:
            dialog = [{"text": t, "speaker": s, **({"strategy": g} if g else {})} for s, t, g in turns]
            handle.write(
                json.dumps({"emotion_type": "anxiety", "problem_type": "job", "situation": "s", "dialog": dialog})
                + "\n"
            )


def write_data(root: Path) -> Path:
    esconv = root / "esconv"
    esconv.mkdir(parents=True)
    write_esconv(esconv / "test.jsonl", SUCCESS)
    failed = [
        {
            "emotion_type": "sadness",
            "dialog": [{"speaker": s, "content": t, "annotation": {"strategy": g} if g else {}} for s, t, g in turns],
        }
        for turns in FAILED
    ]
    (esconv / "FailedESConv.json").write_text(json.dumps(failed))

    base = root / "mint_lend_an_ear" / "lend_an_ear_eval"
    (base / "expert_ratings").mkdir(parents=True)
    with (base / "lend_an_ear_50_conversations.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["conversation_id", "full_conversation", "response_length"])
        for cid, (seeker, reply, _, _) in CONVERSATIONS.items():
            writer.writerow([cid, f"Seeker: {seeker}\nSupporter: {reply}", "short"])
    for expert in (1, 2, 3):
        with (base / "expert_ratings" / f"expert{expert}_ratings.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["conversation_id", *POSITIVE, *NEGATIVE])
            for cid, (_, _, pos, neg) in CONVERSATIONS.items():
                if expert == 3 and cid == "a1":
                    pos, neg = 1, 5  # an outlier the median ignores
                writer.writerow([cid, *([pos] * 3), *([neg] * 3)])
    judged = root / "mint_lend_an_ear" / "judged_turns"
    judged.mkdir()
    with (judged / "judged_turn_responses_gold_and_qwen3-4b_systems.jsonl").open("w") as handle:
        for cid, index, system, reply, score in JUDGED:
            handle.write(
                json.dumps(
                    {
                        "system": system,
                        "conversation_id": cid,
                        "turn_index": index,
                        "response": reply,
                        "aggregated_empathy": score,
                        "judge": "toy",
                    }
                )
                + "\n"
            )
    (judged / "gold_kappa_turn_vs_experts_agreement.csv").write_text(
        "model,metric,n_pairs,spearman_rho\ntoy,validating_emotions,4,0.7\ntoy,mean,4,0.6\n"
    )

    sage = root / "sage_rlver" / "results_toy"
    sage.mkdir(parents=True)
    history = []
    for role, text, point, change in SAGE:
        message: dict[str, Any] = {"role": role, "content": text}
        if role == "user":
            message["emotion-point"] = point
            if change is not None:
                message["planning"] = {"change": change}
        history.append(message)
    (sage / "toy_result.jsonl").write_text(
        json.dumps({"id": "p1", "history": history, "emo_point": 30}, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return root


@pytest.fixture
def toy_data(tmp_path: Path) -> DataPaths:
    return DataPaths(write_data(tmp_path / "data"))


def metric(report: Any, task: str, name: str, variant: str) -> float | None:
    result = next(r for r in report.results if r.name == task)
    row = next(r for r in result.rows if r.name == name)
    return row.values[variant].value if variant in row.values else None


SETTINGS = Settings(resamples=200)


# -- tasks by hand ---------------------------------------------------------------------------------


def test_alignment_by_hand(toy_data: DataPaths, tmp_path: Path) -> None:
    report = runner(tmp_path / "out").run(["alignment"], toy_data, SETTINGS)
    # 4 labelled turns ("Others" maps to no dimension): COG/Question hit, AFF/Reflection hit,
    # COG context but Affirmation (affective) miss, PRO/Suggestions hit.
    assert metric(report, "alignment", "top-dimension match", "care") == pytest.approx(0.75)
    # r_align of the miss: affective not on top, and cognitive (n=0) outweighs affective: 1 - 2 * 0.5 = 0.
    assert metric(report, "alignment", "mean r_align", "care") == pytest.approx(0.75)
    assert metric(report, "alignment", "top-dimension match", "fixed_criteria") == pytest.approx(0.75)
    # Uniform weights: a random tie-break hits one of three dimensions.
    assert metric(report, "alignment", "top-dimension match", "uniform_weights") == pytest.approx(1 / 3)
    assert metric(report, "alignment", "top-dimension match", "fixed_rubric") == pytest.approx(1 / 3)
    # Strict top rule: a tie for the largest weight is no priority order, one violation per turn.
    assert metric(report, "alignment", "mean r_align", "uniform_weights") == pytest.approx(0.5)
    assert metric(report, "alignment", "top-dimension match", "length") is None
    result = report.results[0]
    assert (result.units, result.available) == (4, 4)
    assert result.extra["chance"] == pytest.approx(1 / 3)


def test_alignment_beside_the_turn_position_prior(toy_data: DataPaths, tmp_path: Path) -> None:
    """With ESConv train beside the test file, the note gives the prior fitted there and CARE's paired gain."""
    report = runner(tmp_path / "out").run(["alignment"], toy_data, SETTINGS)
    assert "Turn-position prior: not measured" in " ".join(report.results[0].notes)
    train = [  # first supporter turns mostly a question (cognitive), the second a reflection (affective)
        [("usr", "a", None), ("sys", "Why?", "Question"), ("usr", "b", None), ("sys", "Oh.", "Reflection of feelings")],
        [("usr", "c", None), ("sys", "How so?", "Question")],
    ]
    write_esconv(toy_data.root / "esconv" / "train.jsonl", train)
    report = runner(tmp_path / "out2").run(["alignment"], toy_data, SETTINGS)
    result = report.results[0]
    # The prior names cognitive at turn 1 and affective at turn 2: of the test turns (1 cognitive, 2 affective,
    # 1 affective, 1 proactive) it hits the first two; CARE also hits the proactive turn and misses the same one.
    assert result.extra["turn_position_prior"]["value"] == pytest.approx(0.5)
    assert result.extra["care_minus_prior"]["value"] == pytest.approx(0.25)
    assert any(n.startswith("Turn-position prior (") and "paired on its 4 turns" in n for n in result.notes)
    assert toy_data.root / "esconv" / "train.jsonl" in TASKS["alignment"].load(toy_data, SETTINGS).sources


def test_turn_numbers_count_a_supporter_opening(tmp_path: Path) -> None:
    """A record's turn_number is the one the generator prompt states: a supporter greeting that opens
    the conversation is the first supporter turn, though it is no item (nothing comes before it)."""
    (tmp_path / "esconv").mkdir()
    dialogue = [
        ("sys", "Hello, how are you?", "Question"),  # the greeting: turn 1, not scored (nothing before it)
        ("usr", "bad", None),
        ("sys", "What happened?", "Question"),
        ("usr", "x", None),
        ("sys", "Oh.", "Restatement or Paraphrasing"),
    ]
    write_esconv(tmp_path / "esconv" / "test.jsonl", [dialogue])
    items = TASKS["alignment"].load(DataPaths(tmp_path), SETTINGS).items
    assert sorted(i.fields["turn_number"] for i in items) == [2, 3]


def test_pairwise_by_hand(toy_data: DataPaths, tmp_path: Path) -> None:
    report = runner(tmp_path / "out").run(["pairwise"], toy_data, SETTINGS)
    # Turn a1: (gold 1.0 > s1 0.0) agrees, (s2 0.5 > s1 0.0) agrees; gold vs s2 differ by 0.5 < margin.
    # Turn a4: gold 0.0 vs s1 1.0 and vs s2 1.0 disagree, gold vs s3 tie (both 0.0), s1 and s2 beat s3.
    for variant in ("care", "uniform_weights", "fixed_criteria", "fixed_rubric"):
        assert metric(report, "pairwise", "accuracy (ties = 1/2)", variant) == pytest.approx(4.5 / 7)
        assert metric(report, "pairwise", "accuracy, untied pairs", variant) == pytest.approx(4 / 6)
        assert metric(report, "pairwise", "share of tied pairs", variant) == pytest.approx(1 / 7)
    # Length: a1 gold (15 chars) > s1 (12) agrees, s2 (12) = s1 ties. a4: gold (14) > s1 (13) agrees,
    # gold = s2 (14) ties, gold > s3 (12), s1 > s3 and s2 > s3 agree: (1 + 0.5 + 1 + 0.5 + 1 + 1 + 1) / 7.
    lengths = {s: len(r) for c, i, s, r, _ in JUDGED if c == "a4" and i == 1}
    assert lengths == {"gold": 14, "s1": 13, "s2": 14, "s3": 12}
    assert metric(report, "pairwise", "accuracy (ties = 1/2)", "length") == pytest.approx(6 / 7)
    # Every toy reply has three words: all 7 pairs are of similar length, and the row is the same.
    assert metric(report, "pairwise", "accuracy, replies of similar length", "care") == pytest.approx(4.5 / 7)
    assert report.results[0].extra["pairs_of_similar_length"] == 7
    # The two judged rows that point nowhere are reported, not silently dropped.
    issues = [str(i) for i in report.issues]
    assert any("line 8: turn_index" in i for i in issues)
    assert any("line 9: turn_index" in i and "zz" in i for i in issues)


def test_pairwise_similar_length_leaves_out_a_long_reply(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a4's s2 now writes thirteen words: its two pairs (gold > s2 disagrees, s2 > s3 agrees) leave the
    # similar-length row, which keeps a1's two agreements and a4's gold > s1 (0), gold = s3 (1/2), s1 > s3 (1).
    long = "<GOOD> s2 two, and then a great many more words than the others"
    judged = [(c, i, s, long if (c, s) == ("a4", "s2") else r, j) for c, i, s, r, j in JUDGED]
    monkeypatch.setattr(sys.modules[__name__], "JUDGED", judged)
    report = runner(tmp_path / "out").run(["pairwise"], DataPaths(write_data(tmp_path / "data")), SETTINGS)
    assert metric(report, "pairwise", "accuracy (ties = 1/2)", "care") == pytest.approx(4.5 / 7)
    assert metric(report, "pairwise", "accuracy, replies of similar length", "care") == pytest.approx(3.5 / 5)
    assert report.results[0].extra["pairs_of_similar_length"] == 5
    assert "5 of them are replies of similar length" in " ".join(report.results[0].notes)


def test_experts_by_hand(toy_data: DataPaths, tmp_path: Path) -> None:
    report = runner(tmp_path / "out").run(["experts"], toy_data, SETTINGS)
    # Expert aggregates (median of 3; a1's outlier ignored): a1 5, c4 4, a4 3, c11 2.
    # CARE rewards: a1 1.0, c4 0.6 (cognitive criteria met, cognitive weight 0.6), a4 0.5, c11 0.0 -> same order.
    assert metric(report, "experts", "Spearman vs expert aggregate", "care") == pytest.approx(1.0)
    # Uniform weights give c4 1/3 < a4 0.5: one swapped neighbour pair -> 1 - 6 * 2 / (4 * 15) = 0.8.
    assert metric(report, "experts", "Spearman vs expert aggregate", "uniform_weights") == pytest.approx(0.8)
    detail = report.results[0].details[0]
    assert "| validating_emotions | 1.00" in detail
    assert "0.700" in detail and "0.600 (mean)" in detail  # the published judge figures, side by side
    by_dim = report.results[0].extra["care_by_dimension"]
    assert by_dim["advice_giving"]["reward"]["value"] == pytest.approx(-1.0)  # a negative expert dimension


def test_success_by_hand(toy_data: DataPaths, tmp_path: Path) -> None:
    report = runner(tmp_path / "out").run(["success"], toy_data, SETTINGS)
    # Success dialogue rewards 1.0, 1.0, 0.5; failed 0.0, 0.5: 5.5 of 6 pairs ordered right.
    assert metric(report, "success", "AUC (success > failure)", "care") == pytest.approx(5.5 / 6)
    means = report.results[0].extra["class_means"]["care"]
    assert means == {"success": pytest.approx(2.5 / 3), "failed": pytest.approx(0.25)}


def test_simulated_by_hand(toy_data: DataPaths, tmp_path: Path) -> None:
    report = runner(tmp_path / "out").run(["simulated"], toy_data, SETTINGS)
    # Rewards 1.0, 0.0, 0.5 against emotion changes +10, -20, 0: the same order.
    assert metric(report, "simulated", "Spearman vs emotion change", "care") == pytest.approx(1.0)
    # Pearson: deviations (0.5, -0.5, 0) and (40/3, -50/3, 10/3): 15 / sqrt(0.5 * 1400 / 3).
    assert metric(report, "simulated", "Pearson vs emotion change", "care") == pytest.approx(
        15 / (0.5 * 1400 / 3) ** 0.5
    )
    # Length (chars 6, 4, 3) against +10, -20, 0: ranks (3, 2, 1) vs (3, 1, 2) -> 0.5.
    assert metric(report, "simulated", "Spearman vs emotion change", "length") == pytest.approx(0.5)


# -- the runner ------------------------------------------------------------------------------------


def test_full_run_writes_reports_and_records(toy_data: DataPaths, tmp_path: Path) -> None:
    out = tmp_path / "out"
    backend = ScriptedBackend(script)
    report = runner(out, backend).run(list(TASKS), toy_data, SETTINGS)
    data = json.loads((out / "quality.json").read_text())
    assert [t["name"] for t in data["tasks"]] == list(TASKS)
    assert data["backend"]["generator"].startswith("scripted:scripted|prompt=")
    assert data["fixed_criteria_version"] and data["care_sdk"] and data["python"]
    assert len(data["data"]) >= 6 and all(len(h) == 64 for h in data["data"].values())
    assert data["settings"]["resamples"] == 200
    table = (out / "quality.md").read_text()
    assert table.startswith(
        "| task | metric | n | CARE | uniform weights | fixed criteria | fixed rubric | length only |"
    )
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    # 4 rubric-only alignment turns (no length record) and 21 scored replies, 5 variants each.
    assert report.scored == 25 and len(records) == 4 * 4 + 21 * 5
    assert {r["variant"] for r in records} == set(VARIANTS)
    alignment = [r for r in records if r["task"] == "alignment" and r["variant"] == "care"]
    assert all(r["emotion"] == "anxiety" and r["rubric"]["weights"] and r["turn_number"] for r in alignment)
    # Shared work: 14 distinct contexts (one rubric each, reused across tasks) and two evaluations per
    # scored reply (42); the other two model variants' 42 evaluations are answered from the memo.
    assert len(backend.requests) == 14 + 42
    assert data["requests"] == {"sent": 14 + 42, "shared": 42}


def test_resume_scores_only_what_is_missing(toy_data: DataPaths, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = runner(out).run(list(TASKS), toy_data, SETTINGS)
    lines = (out / "records.jsonl").read_text().splitlines()
    # Drop the last item's records (5 variants) and leave a line cut off by an interrupt.
    (out / "records.jsonl").write_text("\n".join(lines[:-5]) + '\n{"task": "simulated", "key": \n')
    backend = ScriptedBackend(script)
    second = runner(out, backend).run(list(TASKS), toy_data, SETTINGS)
    assert (second.scored, second.reused) == (1, first.scored - 1)
    assert len(backend.requests) == 3  # one rubric and two evaluations for the one missing item
    assert second.markdown() == first.markdown()
    assert (out / "records.jsonl").read_text().splitlines() == lines


def test_a_stopped_run_keeps_each_context_scored_before_the_stop(toy_data: DataPaths, tmp_path: Path) -> None:
    # llama.cpp answers one request at a time: records are kept after each context, not each batch.
    out = tmp_path / "out"

    def stopping(request: GenerationRequest) -> str:
        if request.purpose == EVALUATION and "<BAD> s3 two" in request.messages[-1].content:
            raise KeyboardInterrupt  # the run is stopped on the second turn's last reply
        return script(request)

    backend = ScriptedBackend(stopping)
    stopped = QualityRunner(RubricGenerator(backend), RubricEvaluator(backend), out_dir=out, batch_size=8, serial=True)
    with pytest.raises(KeyboardInterrupt):
        stopped.run(["pairwise"], toy_data, SETTINGS)
    kept = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert {r["key"] for r in kept} == {"a1:1:gold", "a1:1:s1", "a1:1:s2"}  # the first turn, whole
    assert len(kept) == 3 * len(VARIANTS)
    again = ScriptedBackend(script)
    resumed = QualityRunner(RubricGenerator(again), RubricEvaluator(again), out_dir=out, batch_size=8, serial=True)
    report = resumed.run(["pairwise"], toy_data, SETTINGS)
    assert (report.scored, report.reused) == (4, 3)
    whole = QualityRunner(
        RubricGenerator(ScriptedBackend(script)), RubricEvaluator(ScriptedBackend(script)), out_dir=tmp_path / "whole"
    ).run(["pairwise"], toy_data, SETTINGS)
    assert report.markdown() == whole.markdown()


def test_failed_items_are_reported_and_retried_on_resume(toy_data: DataPaths, tmp_path: Path) -> None:
    out = tmp_path / "out"
    sage = toy_data.sage_files[0]
    sage.write_text(sage.read_text().replace("<BAD> 随便", "<FAIL> 随便"))
    report = runner(out).run(["simulated"], toy_data, SETTINGS)
    result = report.results[0]
    assert result.failed == {"care": 1, "uniform_weights": 1, "fixed_criteria": 1, "fixed_rubric": 1, "length": 0}
    assert result.rows[0].values["care"].n == 2  # the failed turn is left out, not scored 0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    failed = [r for r in records if r["error"]]
    assert len(failed) == 4 and all("evaluation failed" in r["error"] and r["reward"] is None for r in failed)
    assert "Items without a result: CARE 1" in report.markdown()
    sage.write_text(sage.read_text().replace("<FAIL> 随便", "<BAD> 随便"))
    again = runner(out).run(["simulated"], toy_data, SETTINGS)
    assert again.scored == 1 and not any(again.results[0].failed.values())


def records_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_items_scored_elsewhere_are_kept_by_the_runner_as_its_own(toy_data: DataPaths, tmp_path: Path) -> None:
    whole = runner(tmp_path / "whole").run(list(TASKS), toy_data, SETTINGS)
    backend = ScriptedBackend(script)
    elsewhere = VariantScorer(RubricGenerator(backend), RubricEvaluator(backend), VARIANTS)
    calls: list[int] = []

    def score_batches(items: Any) -> Any:  # as a Ray cluster would: every item at once, records back here
        calls.append(len(items))
        return elsewhere.score_batches(items)

    out = tmp_path / "elsewhere"
    generator = RubricGenerator(ScriptedBackend([]))  # this process's own models score nothing
    there = QualityRunner(generator, RubricEvaluator(ScriptedBackend([])), out_dir=out, score_batches=score_batches)
    report = there.run(list(TASKS), toy_data, SETTINGS)
    assert calls == [whole.scored] and report.markdown() == whole.markdown()
    assert (out / "records.jsonl").read_text() == (tmp_path / "whole" / "records.jsonl").read_text()
    assert there.run(list(TASKS), toy_data, SETTINGS).reused == whole.scored and calls == [whole.scored]


def test_a_run_of_some_variants_counts_failures_of_those_only(toy_data: DataPaths, tmp_path: Path) -> None:
    sage = toy_data.sage_files[0]
    sage.write_text(sage.read_text().replace("<BAD> 随便", "<FAIL> 随便"))
    backend = ScriptedBackend(script)
    variants = ["care", "length"]
    two = QualityRunner(RubricGenerator(backend), RubricEvaluator(backend), out_dir=tmp_path, variants=variants)
    result = two.run(["simulated"], toy_data, SETTINGS).results[0]
    assert result.failed == {"care": 1, "length": 0}  # not the variants this run did not score


def test_another_model_cannot_reuse_the_directory(toy_data: DataPaths, tmp_path: Path) -> None:
    out = tmp_path / "out"
    runner(out).run(["alignment"], toy_data, Settings(limit=1, resamples=10))
    other = ScriptedBackend(script, name="other-model")
    with pytest.raises(ConfigError, match="another generator, evaluator"):
        runner(out, other).run(["alignment"], toy_data, Settings(limit=1, resamples=10))


def test_unknown_task_and_variant(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown task"):
        runner(tmp_path).run(["nope"], DataPaths(tmp_path))
    with pytest.raises(ConfigError, match="unknown variant"):
        VariantScorer(None, None, ["care", "bogus"])
    assert main(["bench", "quality", "--tasks", "alignment,nope"]) == 2


def test_variants_share_work_without_changing_rewards() -> None:
    items = [
        Item(key=f"k{i}", context=(Message(role="user", content=f"{m} story {i}"),), reply=r)
        for i, (m, r) in enumerate([("[COG]", "<COG> a"), ("[AFF]", "<MID> b"), ("[PRO]", "<COG> c")])
    ]
    backend = ScriptedBackend(script)
    scored = VariantScorer(RubricGenerator(backend), RubricEvaluator(backend)).score(items)
    assert len(backend.requests) == 3 * len(items)  # one rubric + two evaluations per item
    options: dict[str, dict[str, Any]] = {
        "care": {},
        "uniform_weights": {"variant": "uniform_weights"},
        "fixed_criteria": {"variant": "fixed_criteria"},
        "fixed_rubric": {"rubric": Rubric.uniform_fixed()},
    }
    for variant, kwargs in options.items():
        alone = ScriptedBackend(script)
        reward = AdaptiveReward(RubricGenerator(alone), RubricEvaluator(alone), **kwargs)
        expected = [r.reward for r in reward.score_batch([(list(i.context), i.reply or "") for i in items])]
        assert [s[variant]["reward"] for s in scored] == pytest.approx(expected), variant
    assert [s["care"]["reward"] for s in scored] == pytest.approx([0.6, 0.5, 0.2])
    assert [s["length"]["reward"] for s in scored] == [7.0, 7.0, 7.0]


def test_a_serial_backend_gets_one_contexts_evaluations_together() -> None:
    contexts = [(Message(role="user", content=f"{m} story {i}"),) for i, m in enumerate(["[COG]", "[AFF]"])]
    items = [Item(key=f"k{i}", context=contexts[i % 2], reply=f"<COG> reply {i}") for i in range(4)]

    def run(serial: bool) -> tuple[list[dict[str, dict[str, Any]]], list[str]]:
        backend = ScriptedBackend(script)
        scored = VariantScorer(RubricGenerator(backend), RubricEvaluator(backend), serial=serial).score(items)
        story = [
            next(s for s in ("story 0", "story 1") if s in r.messages[-1].content)
            for r in backend.requests
            if r.purpose == EVALUATION
        ]
        return scored, story

    batched, batched_order = run(serial=False)
    serial, serial_order = run(serial=True)
    assert serial == batched  # the same records, whatever the order
    # all at once: each variant's criteria go through every item; serial: one context, then the other
    assert batched_order == ["story 0", "story 1"] * 4
    assert serial_order == ["story 0"] * 4 + ["story 1"] * 4


def test_selection_is_a_stable_prefix() -> None:
    units = list(range(100))
    small, large = select(units, 10, 0), select(units, 30, 0)
    assert large[:10] == small and len(large) == 30  # a prefix, in the same order
    assert sorted(select(units, None, 0)) == units
    assert spread(list(range(12)), 3) == [0, 6, 11]


# -- the real model --------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_task_runs_on_the_bundled_model(data_dir: Path, tmp_path: Path) -> None:
    """Every task on the shipped default (the bundled model with its generator and evaluator adapters).

    The base model without its adapters writes rubrics that often run past ``max_tokens`` (criteria filled to
    the schema's 200 characters), so it is not the model this checks the tasks' plumbing on."""
    out = tmp_path / "out"
    generator = RubricGenerator("default")
    evaluator = RubricEvaluator("default")
    settings = Settings(limit=1, max_turns=1, systems=("gold", "baseline1_vanilla_Qwen3-4B"), resamples=50)
    run = QualityRunner(generator, evaluator, out_dir=out, batch_size=4)
    report = run.run(list(TASKS), DataPaths(data_dir), settings)
    assert [r.name for r in report.results] == list(TASKS)
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert {r["task"] for r in records} == set(TASKS)
    for record in records:
        if record["variant"] == "length" or record["error"]:
            continue
        assert record["rubric"] is not None
        if record["task"] != "alignment":
            assert 0.0 <= record["reward"] <= 1.0
            assert len(record["evaluation"]["scores"]) == len(record["rubric"]["criteria"])
    for record in records:  # every missing reward carries its reason (alignment records hold rubrics only)
        if record["reward"] is None and record["task"] != "alignment":
            assert record["error"]
    # The model calls worked: every task has a result from every model variant, and failures are rare.
    done = {(r["task"], r["variant"]) for r in records if not r["error"] and (r["reward"] is not None or r["rubric"])}
    assert done >= {(task, variant) for task in TASKS for variant in MODEL_VARIANTS}
    failed = [r for r in records if r["error"]]
    assert len(failed) <= len(records) // 4, [r["error"] for r in failed]
    data = json.loads((out / "quality.json").read_text())
    assert data["model"] == "llamacpp:SmolLM2-135M-Instruct.Q4_1.gguf+generator.gguf"
    # A re-run reuses everything and reports the same numbers.
    again = QualityRunner(generator, evaluator, out_dir=out).run(list(TASKS), DataPaths(data_dir), settings)
    assert again.scored == 0 and again.markdown() == report.markdown()


@pytest.mark.slow
def test_cli_quality_on_the_bundled_model(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "q"
    code = main(
        [
            "bench",
            "quality",
            "--tasks",
            "alignment",
            "--limit",
            "1",
            "--data-dir",
            str(data_dir),
            "--out",
            str(out),
            "--quiet",
            "--resamples",
            "50",
        ]
    )
    captured = capsys.readouterr()
    assert "| Priority alignment (ESConv test supporter turns) | top-dimension match | " in captured.out
    assert "alignment: 1 of 1970 units" in captured.err
    report = json.loads((out / "quality.json").read_text())
    missing = sum(report["tasks"][0]["failed"].values())
    assert code == (1 if missing else 0)  # status 1 exactly when some item has no result
    assert report["model"] == "llamacpp:SmolLM2-135M-Instruct.Q4_1.gguf+generator.gguf"
    # ``default`` (the command's default backend) gives each component its bundled adapter
    assert report["backend"]["generator"].startswith("llamacpp:SmolLM2-135M-Instruct.Q4_1.gguf+generator.gguf|")
    assert report["backend"]["evaluator"].startswith("llamacpp:SmolLM2-135M-Instruct.Q4_1.gguf+evaluator.gguf|")


@pytest.mark.slow
def test_cli_on_a_local_ray_cluster_then_resumed_in_one_process(data_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "q"
    command = [sys.executable, "-m", "care_sdk.cli", "bench", "quality", "--tasks", "alignment", "--limit", "2"]
    command += ["--variants", "care", "--data-dir", str(data_dir), "--out", str(out), "--quiet", "--resamples", "50"]
    on_ray = subprocess.run([*command, "--ray", "local", "--ray-workers", "2"], capture_output=True, text=True)
    assert on_ray.returncode == 0, on_ray.stderr
    assert "2 items scored, 0 reused" in on_ray.stderr and "| 2 |" in on_ray.stdout
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2 and len({r["key"] for r in records}) == 2 and not any(r["error"] for r in records)
    again = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert "0 items scored, 2 reused" in again.stderr, again.stderr
    assert again.stdout == on_ray.stdout
