"""Offline scoring on Ray Data: a real local Ray cluster (two CPUs, two actors) on this machine."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from care_lab.bench.variants import Item, VariantScorer
from care_sdk import Message, Rubric, RubricEvaluator, RubricGenerator
from care_sdk.cli import build_parser, main
from care_sdk.errors import MissingDependencyError
from care_sdk.reward import AdaptiveReward
from care_sdk.score_files import score_file
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
from scored import records_without_provenance

REPO = Path(__file__).resolve().parent.parent


def test_importing_the_package_does_not_import_ray() -> None:
    code = "import sys, care_sdk, care_sdk.ray_scoring, care_sdk.cli; print('ray' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "False"


def test_a_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from care_sdk import ray_scoring

    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed
    with pytest.raises(MissingDependencyError, match=r'pip install "care-sdk\[ray\]"'):
        ray_scoring.score_file(REPO / "examples" / "dialogues.jsonl", tmp_path / "out.jsonl", address=None)


def test_the_ray_options() -> None:
    args = build_parser().parse_args(["score", "in.jsonl", "--ray", "auto", "--ray-workers", "3"])
    assert (args.ray, args.ray_workers) == ("auto", 3)
    quality = build_parser().parse_args(["bench", "quality", "--ray", "10.0.0.1:6379"])
    assert (quality.ray, quality.ray_workers) == ("10.0.0.1:6379", 2)


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors cannot import this file
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def scripted_reward() -> AdaptiveReward:
    # Built inside each actor (this file travels by value, see the cluster fixture).
    backend = ScriptedBackend(
        lambda request: evaluation_json([len(request.messages[-1].content) % 5 + 1, 3, 4, 2, 5, 1])
    )
    return AdaptiveReward(evaluator=RubricEvaluator(backend), rubric=Rubric.uniform_fixed())


def lines_by_turn(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Each record by its turn, without its provenance (the run's seconds differ between runs)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for record in records_without_provenance(path):
        key = (record["id"], record["turn"])
        assert key not in out, f"{key} written twice"
        out[key] = record
    return out


@pytest.mark.slow
def test_scripted_records_and_bad_lines_match_care_score(cluster: None, tmp_path: Path) -> None:
    from care_sdk import ray_scoring

    dialogues = tmp_path / "d.jsonl"
    lines = (REPO / "examples" / "dialogues.jsonl").read_text(encoding="utf-8").splitlines()
    dialogues.write_text("\n".join([lines[0], '{"id": "x", "messages": []}', *lines[1:], "not json"]) + "\n")
    bad: list[str] = []
    reference = score_file(dialogues, scripted_reward(), out=tmp_path / "ref.jsonl")
    summary = ray_scoring.score_file(
        dialogues, tmp_path / "ray.jsonl", reward=scripted_reward, workers=2, batch_size=3,
        on_input_error=lambda e: bad.append(str(e)),
    )  # fmt: skip
    assert bad == [f"{dialogues}:line 2: messages: empty dialogue: 'messages' must be a non-empty list",
                   f"{dialogues}:line 7: not valid JSON: Expecting value at column 1"]  # fmt: skip
    assert (summary.turns, summary.scored, len(summary.input_errors)) == (reference.turns, reference.scored, 2)
    assert records_without_provenance(tmp_path / "ray.jsonl") == records_without_provenance(tmp_path / "ref.jsonl")


@pytest.mark.slow
def test_bundled_model_on_two_workers_matches_one_process_and_resumes(cluster: None, tmp_path: Path) -> None:
    lines = (REPO / "examples" / "dialogues.jsonl").read_text(encoding="utf-8").splitlines()
    short = json.loads(lines[1])
    short["messages"] = short["messages"][:4]  # two turns
    dialogues = tmp_path / "d.jsonl"
    dialogues.write_text(json.dumps(short) + "\n" + lines[3] + "\n")  # and three more
    options = ["--backend", "default", "--variant", "fixed_rubric", "--quiet"]
    assert main(["score", str(dialogues), "--out", str(tmp_path / "ref.jsonl"), *options]) == 0
    reference = lines_by_turn(tmp_path / "ref.jsonl")
    ray_options = ["--ray", "local", "--ray-workers", "2", *options]
    assert main(["score", str(dialogues), "--out", str(tmp_path / "ray.jsonl"), *ray_options]) == 0
    scored = lines_by_turn(tmp_path / "ray.jsonl")
    assert scored == reference  # record for record

    # Interrupted: two records written, a third cut off mid-line; the re-run scores only what is missing.
    kept = (tmp_path / "ref.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    resumed = tmp_path / "resumed.jsonl"
    resumed.write_text(kept[0] + kept[3] + kept[1][:40])
    assert main(["score", str(dialogues), "--out", str(resumed), *ray_options]) == 0
    assert lines_by_turn(resumed) == reference


def scripted_scorer() -> VariantScorer:
    def script(request: Any) -> str:
        if request.purpose == "evaluation":
            return evaluation_json([5, 4, 3, 3, 2, 1])
        return rubric_json({"cognitive": 2, "affective": 1, "proactive": 1})

    backend = ScriptedBackend(script)
    return VariantScorer(RubricGenerator(backend), RubricEvaluator(backend), ["care", "fixed_rubric", "length"])


@pytest.mark.slow
def test_quality_items_scored_by_actors_equal_those_scored_here(cluster: None) -> None:
    from care_lab.bench.ray_items import ray_item_batches

    items = [
        Item(key=f"k{i}", context=(Message(role="user", content=f"Story number {i}."),), reply="Oh." * (i + 1))
        for i in range(7)
    ]
    here = {i: r for batch in scripted_scorer().score_batches(items) for i, r in batch}
    there: dict[int, Any] = {}
    for batch in ray_item_batches(scripted_scorer, workers=2, batch_size=2)(items):
        for index, records in batch:
            assert index not in there
            there[index] = records
    assert there == here
