"""``care plot``: the summaries behind each figure (by hand) and valid PNGs from real ``care score`` output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator
from care_sdk.backends import EVALUATION
from care_sdk.cli import main
from care_sdk.errors import InputError
from care_sdk.report.records import (
    dominant_by_emotion,
    heatmap_data,
    read_meta,
    read_records,
    rewards_by_variant,
    weights_by_turn,
)
from care_sdk.score_files import score_file
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def w(c: float, a: float, p: float) -> dict[str, Any]:
    return {"weights": {"cognitive": c, "affective": a, "proactive": p}, "criteria": []}


# -- summaries -------------------------------------------------------------------------------------


def test_weights_by_turn_means_and_standard_errors() -> None:
    records = [
        {"id": "a", "turn": 1, "rubric": w(0.6, 0.2, 0.2)},
        {"id": "b", "turn": 1, "rubric": w(0.2, 0.6, 0.2)},
        {"id": "a", "turn": 3, "rubric": w(0.2, 0.2, 0.6)},
        {"id": "a", "turn": 5, "rubric": w(0.2, 0.2, 0.6), "turn_number": 9},  # explicit turn number wins
        {"id": "c", "turn": 1, "reward": None, "error": "failed", "rubric": None},  # no rubric: ignored
    ]
    data = weights_by_turn(records, max_turn=5)
    assert sorted(data) == [1, 2, 5]  # turn 9 pooled into 5
    mean, se, n = data[1]["cognitive"]
    # Values 0.6 and 0.2: mean 0.4, sample sd 0.2828, standard error 0.2.
    assert (mean, n) == (pytest.approx(0.4), 2) and se == pytest.approx(0.2)
    assert data[2]["proactive"] == (pytest.approx(0.6), 0.0, 1)


def test_weights_by_turn_counts_a_shared_context_once() -> None:
    # Benchmark records: 3 systems' replies to one turn share its rubric; the turn counts once.
    records = [{"task": "pairwise", "id": "c", "turn": 3, "system": s, "rubric": w(0.5, 0.3, 0.2)} for s in "xyz"]
    assert weights_by_turn(records)[1]["cognitive"][2] == 1


def test_dominant_by_emotion_splits_ties() -> None:
    records = [
        {"id": "a", "turn": 1, "emotion": "anxiety", "rubric": w(0.5, 0.3, 0.2)},
        {"id": "a", "turn": 3, "emotion": "anxiety", "rubric": w(0.4, 0.4, 0.2)},
        {"id": "b", "turn": 1, "emotion": "anger", "rubric": w(0.1, 0.1, 0.8)},
        {"id": "c", "turn": 1, "rubric": w(0.1, 0.1, 0.8)},  # no emotion: left out
    ]
    data = dominant_by_emotion(records)
    assert list(data) == ["anxiety", "anger"]  # most turns first
    shares, n = data["anxiety"]
    assert n == 2 and shares == {"cognitive": 0.75, "affective": 0.25, "proactive": 0.0}


def test_rewards_by_variant_groups_tasks_and_drops_length() -> None:
    records = [
        {"task": "success", "variant": "care", "id": "a", "turn": 1, "reward": 0.5},
        {"task": "success", "variant": "length", "id": "a", "turn": 1, "reward": 120.0},
        {"task": "success", "variant": "fixed_rubric", "id": "a", "turn": 1, "reward": 0.25},
        {"task": "success", "variant": "care", "id": "a", "turn": 3, "reward": None},
    ]
    assert rewards_by_variant(records) == {"success": {"care": [0.5], "fixed_rubric": [0.25]}}


def test_heatmap_picks_the_dialogue_with_most_evaluated_turns() -> None:
    def rec(dialogue: str, turn: int, scores: list[tuple[str, int]]) -> dict[str, Any]:
        return {
            "id": dialogue,
            "turn": turn,
            "reward": 0.5,
            "rubric": w(0.4, 0.4, 0.2),
            "evaluation": {"scores": [{"dimension": d, "criterion": f"{d} {turn}", "score": s} for d, s in scores]},
        }

    records = [
        rec("short", 1, [("cognitive", 5), ("affective", 1), ("proactive", 3)]),
        rec("long", 1, [("cognitive", 2), ("cognitive", 4), ("affective", 3), ("proactive", 5)]),
        rec("long", 3, [("cognitive", 1), ("affective", 2), ("affective", 5), ("proactive", 4)]),
    ]
    data = heatmap_data(records)
    assert data is not None and data.dialogue == "long" and data.turns == [1, 2]
    assert data.rows == ["cognitive 1", "cognitive 2", "affective 1", "affective 2", "proactive 1"]
    assert data.scores == [[2.0, 1.0], [4.0, None], [3.0, 2.0], [None, 5.0], [5.0, 4.0]]
    assert heatmap_data(records, "short").rows == ["cognitive 1", "affective 1", "proactive 1"]  # type: ignore[union-attr]
    assert heatmap_data(records, "missing") is None


def test_read_records_names_each_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"id": "a", "turn": 1, "reward": 0.5}\n'
        "{oops\n"
        '{"id": "a", "turn": "x"}\n'
        '{"id": "a", "turn": 2, "rubric": {"weights": {"cognitive": 1}}}\n'
        "\n"
        '{"turn": 4}\n'
    )
    result = read_records(path)
    assert len(result.records) == 1
    assert [str(e) for e in result.issues] == [
        f"{path}:line 2: not valid JSON: Expecting property name enclosed in double quotes at column 2",
        f"{path}:line 3: turn: expected an integer, got 'x'",
        f"{path}:line 4: rubric.weights: expected a number for each of cognitive, affective, proactive",
        f"{path}:line 6: id: missing",
    ]
    with pytest.raises(InputError, match="cannot read"):
        read_records(tmp_path / "absent.jsonl")


def test_read_meta_rejects_lines_without_id(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"id": "a", "emotion": "fear"}\n{"emotion": "anger"}\n')
    with pytest.raises(InputError, match=r"m.jsonl:line 2: id: missing"):
        read_meta(path)


# -- figures ---------------------------------------------------------------------------------------


def _script(request: Any) -> str:
    if request.purpose == EVALUATION:
        n = len(request.json_schema["properties"]["scores"]["required"])
        return evaluation_json([(i % 5) + 1 for i in range(n)])
    turns = request.messages[-1].content.count("User:")
    return rubric_json({"cognitive": 1 + turns % 3, "affective": 2, "proactive": 1 + turns % 2})


@pytest.fixture
def scored_file(tmp_path: Path) -> Path:
    """Real ``care score`` output for three small dialogues, scored with a scripted model."""
    dialogues = tmp_path / "dialogues.jsonl"
    lines = []
    for d in range(3):
        messages = []
        for t in range(3 + d):
            messages += [
                {"role": "user", "content": f"message {t} of dialogue {d}"},
                {"role": "assistant", "content": f"reply {t}"},
            ]
        lines.append(json.dumps({"id": f"d{d}", "messages": messages}))
    dialogues.write_text("\n".join(lines) + "\n")
    backend = ScriptedBackend(_script)
    out = tmp_path / "scores.jsonl"
    summary = score_file(dialogues, AdaptiveReward(RubricGenerator(backend), RubricEvaluator(backend)), out=out)
    assert summary.ok and summary.scored == 12
    return out


def _assert_png(path: Path) -> None:
    plt = pytest.importorskip("matplotlib.pyplot")
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = plt.imread(path)
    assert image.shape[0] >= 250 and image.shape[1] >= 400


def test_care_plot_draws_every_figure_from_care_score_output(
    scored_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    meta = tmp_path / "meta.jsonl"
    meta.write_text('{"id": "d0", "emotion_type": "anxiety"}\n{"id": "d1", "emotion": "anger"}\n')
    out = tmp_path / "figs"
    assert main(["plot", str(scored_file), "--out", str(out), "--meta", str(meta)]) == 0
    names = ["weights_by_turn", "dominant_by_emotion", "reward_by_variant", "criteria_heatmap"]
    for name in names:
        _assert_png(out / f"{name}.png")
    index = (out / "index.md").read_text()
    assert all(f"![{name}]({name}.png)" in index for name in names)
    assert "Criteria of dialogue `d2`" in index  # the dialogue with the most turns
    assert "index" in capsys.readouterr().out


def test_care_plot_says_which_figures_it_could_not_draw(
    scored_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    with scored_file.open("a") as handle:
        handle.write("{cut off\n")
    out = tmp_path / "figs"
    assert main(["plot", str(scored_file), "--out", str(out)]) == 1  # a bad line is reported, not hidden
    captured = capsys.readouterr()
    assert "line 13: not valid JSON" in captured.err
    assert "dominant_by_emotion  not drawn: no record with a rubric has an emotion label (use --meta)" in captured.out
    assert not (out / "dominant_by_emotion.png").exists()
    assert "## Not drawn" in (out / "index.md").read_text()
    _assert_png(out / "weights_by_turn.png")


def test_care_plot_reads_benchmark_records(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    records = []
    for i, emotion in enumerate(["anxiety", "anxiety", "sadness"]):
        for variant, scale in (("care", 1.0), ("uniform_weights", 0.8), ("length", 100.0)):
            records.append(
                {
                    "task": "success",
                    "variant": variant,
                    "key": f"k{i}",
                    "id": f"d{i}",
                    "turn": 1,
                    "turn_number": 1 + i,
                    "emotion": emotion,
                    "reward": 0.2 * (i + 1) * scale if variant != "length" else 50.0,
                    "error": None,
                    "rubric": w(0.5, 0.3, 0.2) if variant != "length" else None,
                }
            )
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    out = tmp_path / "figs"
    assert main(["plot", str(path), "--out", str(out), "--task", "success"]) == 0
    for name in ("weights_by_turn", "dominant_by_emotion", "reward_by_variant"):
        _assert_png(out / f"{name}.png")
    assert "criteria heatmap: no record has an evaluation" in (out / "index.md").read_text()
    assert main(["plot", str(path), "--out", str(out), "--task", "nope"]) == 2
