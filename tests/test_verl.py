"""The verl adapter, called the way verl's reward managers call a custom reward function.

verl is not installed here: the module is loaded from its file path under the name verl uses
(``custom_module``), options are merged in as ``custom_reward_function.reward_kwargs`` are, and
rows have verl's dataset layout.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import care_sdk.integrations.verl as verl_module
from care_sdk import CareError, ConfigError, GenerationRequest, InputError
from care_sdk.backends import RUBRIC
from care_sdk.integrations.verl import make_row
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json

CONTEXT = [
    {"role": "user", "content": "My sister stopped talking to me after the wedding."},
    {"role": "assistant", "content": "That sounds painful. What happened at the wedding?"},
    {"role": "user", "content": "I forgot to mention her in my speech."},
]
KEYS = (
    {"score", "care_failed"}
    | {f"care_{d}" for d in ("cognitive", "affective", "proactive")}
    | {f"care_weight_{d}" for d in ("cognitive", "affective", "proactive")}
    | {"care_context_fit"}
    | {f"care_cost_{k}" for k in ("calls", "seconds", "prompt_tokens", "completion_tokens")}
    | {"care_rubric_cached"}
)


def load_like_verl(name: str, reward_kwargs: dict[str, Any]) -> Callable[..., Any]:
    """What verl's get_custom_reward_fn does: import by path as `custom_module`, merge reward_kwargs."""
    path = verl_module.__file__
    assert path is not None
    spec = importlib.util.spec_from_file_location("custom_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    raw_fn = getattr(module, name)

    def wrapped_fn(*args: Any, **kwargs: Any) -> Any:
        return raw_fn(*args, **{**kwargs, **reward_kwargs})

    return wrapped_fn


def script(request: GenerationRequest) -> str:
    if request.purpose == RUBRIC:
        return rubric_json({"cognitive": 2, "affective": 1, "proactive": 1})
    candidate = request.messages[-1].content.rsplit("Candidate reply:", 1)[1]
    if "BROKEN" in candidate:
        return "not json"
    return evaluation_json([5, 5, 3, 3, 1, 1] if "sorry" in candidate else [1] * 6)


def naive_manager_call(fn: Callable[..., Any], row: dict[str, Any], response: str) -> Any:
    """The keyword call of verl's NaiveRewardManager for one row."""
    return fn(
        data_source=row["data_source"],
        solution_str=response,
        ground_truth=row["reward_model"]["ground_truth"],
        extra_info=row.get("extra_info"),
    )


def test_naive_manager_form_returns_score_and_extra_info() -> None:
    backend = ScriptedBackend(script)
    fn = load_like_verl("compute_score", {"backend": backend})
    row = make_row(CONTEXT, data_source="esconv", index=3)
    out = naive_manager_call(fn, row, "I'm sorry, that must sting. Have you told her how you feel?")
    assert set(out) == KEYS
    assert out["score"] == pytest.approx(0.5 * 1.0 + 0.25 * 0.5 + 0.25 * 0.0)
    assert out["care_weight_cognitive"] == pytest.approx(0.5)
    assert out["care_failed"] == 0.0
    low = naive_manager_call(fn, row, "ok")
    assert low["score"] == 0.0 and low["care_failed"] == 0.0
    assert sum(r.purpose == RUBRIC for r in backend.requests) == 1


def test_batch_manager_form_shares_one_rubric_per_context() -> None:
    backend = ScriptedBackend(script)
    fn = load_like_verl("compute_score_batch", {"backend": backend})
    rows = [make_row(CONTEXT, index=i) for i in range(4)] + [make_row("I can't sleep.", index=9)]
    responses = ["I'm sorry.", "ok", "I'm sorry to hear it.", "hm", "I'm sorry you can't sleep."]
    out = fn(
        data_sources=[r["data_source"] for r in rows],
        solution_strs=responses,
        ground_truths=[r["reward_model"]["ground_truth"] for r in rows],
        extra_infos=[r["extra_info"] for r in rows],
    )
    assert [o["score"] > 0 for o in out] == [True, False, True, False, True]
    assert all(set(o) == KEYS for o in out)
    rubric_requests = [r for r in backend.requests if r.purpose == RUBRIC]
    assert len(rubric_requests) == 2
    # the first context's rubric is shared by its four replies, the second's is its reply's alone
    assert [o["care_cost_calls"] for o in out] == [1.25, 1.25, 1.25, 1.25, 2.0]
    assert sum(o["care_cost_calls"] for o in out) == len(backend.requests)
    assert sum(o["care_cost_prompt_tokens"] for o in out) == pytest.approx(
        sum(len(m.content) for r in backend.requests for m in r.messages)  # the scripted backend: 1 token a char
    )
    assert [o["care_rubric_cached"] for o in out] == [0.0] * 5
    again = fn(data_sources=["care"], solution_strs=["hm"], extra_infos=[rows[0]["extra_info"]])
    assert again[0]["care_rubric_cached"] == 1.0 and again[0]["care_cost_calls"] == 1.0


def test_rows_after_a_parquet_round_trip() -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    np = pytest.importorskip("numpy")
    import io

    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([make_row(CONTEXT, index=0)]), buffer)
    buffer.seek(0)
    rows = pq.read_table(buffer).to_pylist()
    extra_infos = np.array([r["extra_info"] for r in rows], dtype=object)  # verl's non_tensor_batch
    fn = load_like_verl("compute_score_batch", {"backend": ScriptedBackend(script)})
    out = fn(
        data_sources=np.array([r["data_source"] for r in rows], dtype=object),
        solution_strs=["I'm sorry."],
        ground_truths=[""],
        extra_infos=extra_infos,
    )
    assert out[0]["care_failed"] == 0.0


def test_context_may_arrive_as_json_text() -> None:
    row = make_row(CONTEXT)
    row["extra_info"]["messages"] = json.dumps(CONTEXT)
    fn = load_like_verl("compute_score", {"backend": ScriptedBackend(script)})
    assert naive_manager_call(fn, row, "I'm sorry.")["care_failed"] == 0.0


def test_missing_context_names_the_row() -> None:
    fn = load_like_verl("compute_score", {"backend": ScriptedBackend(script)})
    row = make_row(CONTEXT, data_source="esconv", index=12)
    del row["extra_info"]["messages"]
    with pytest.raises(InputError, match=r"data_source='esconv', index=12.*extra_info\['messages'\] is missing"):
        naive_manager_call(fn, row, "hello")
    row["extra_info"] = None
    with pytest.raises(InputError, match="extra_info must be a dict"):
        naive_manager_call(fn, row, "hello")


def test_failures_raise_by_default_or_score_as_told() -> None:
    row = make_row(CONTEXT, index=5)
    raising = load_like_verl("compute_score", {"backend": ScriptedBackend(script)})
    with pytest.raises(CareError, match=r"index=5.*evaluation failed"):
        naive_manager_call(raising, row, "BROKEN reply")
    tolerant = load_like_verl("compute_score", {"backend": ScriptedBackend(script), "on_error": 0.0})
    out = naive_manager_call(tolerant, row, "BROKEN reply")
    assert out["score"] == 0.0 and out["care_failed"] == 1.0
    assert math.isnan(out["care_cognitive"]) and out["care_weight_cognitive"] == pytest.approx(0.5)
    with pytest.raises(InputError, match="on_error"):
        naive_manager_call(
            load_like_verl("compute_score", {"backend": ScriptedBackend(script), "on_error": "x"}), row, ""
        )


def test_ablation_options_pass_through_reward_kwargs() -> None:
    fn = load_like_verl("compute_score", {"backend": ScriptedBackend(script), "variant": "uniform_weights"})
    out = naive_manager_call(fn, make_row(CONTEXT), "I'm sorry.")
    assert out["care_weight_cognitive"] == pytest.approx(1 / 3)
    old = load_like_verl("compute_score", {"backend": ScriptedBackend(script), "weights": "uniform"})
    with pytest.raises(ConfigError, match="ablations are named by variant="):  # never silently CARE
        naive_manager_call(old, make_row(CONTEXT), "I'm sorry.")


@pytest.mark.slow
def test_real_model_scores_an_esconv_row(llama_backend: Any, data_dir: Path, tmp_path: Path) -> None:
    dialogue = json.loads((data_dir / "esconv" / "test.jsonl").read_text(encoding="utf-8").splitlines()[0])["dialog"]
    context = [{"role": "user" if t["speaker"] == "usr" else "assistant", "content": t["text"]} for t in dialogue[:3]]
    if context[-1]["role"] != "user":
        context.append({"role": "user", "content": "I don't know what to do."})
    fn = load_like_verl("compute_score_batch", {"backend": llama_backend, "cache": str(tmp_path / "r.sqlite")})
    rows = [make_row(context, data_source="esconv", index=i) for i in range(2)]
    out = fn(
        data_sources=["esconv"] * 2,
        solution_strs=["That sounds really hard. What worries you most?", "ok"],
        ground_truths=["", ""],
        extra_infos=[r["extra_info"] for r in rows],
    )
    for o in out:
        assert set(o) == KEYS
        assert 0.0 <= o["score"] <= 1.0 and o["care_failed"] == 0.0
        assert sum(o[f"care_weight_{d}"] for d in ("cognitive", "affective", "proactive")) == pytest.approx(1.0)
