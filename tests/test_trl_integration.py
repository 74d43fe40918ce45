"""AdaptiveReward as a TRL reward function: call shape, logging hooks, async detection, real GRPO steps."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from care_sdk import (
    AdaptiveReward,
    Backend,
    GenerationRequest,
    Message,
    Rubric,
    RubricEvaluator,
    RubricGenerator,
)
from care_sdk.backends import RUBRIC
from care_sdk.errors import InputError
from care_sdk.prompts import parse_rubric
from care_sdk.testing import RecordingBackend, ScriptedBackend, evaluation_json, rubric_json

DIMS = ("cognitive", "affective", "proactive")
CONTEXTS = [
    [{"role": "user", "content": "My best friend moved abroad and I feel so alone."}],
    [
        {"role": "user", "content": "I got passed over for a promotion again."},
        {"role": "assistant", "content": "That must be discouraging. How are you taking it?"},
        {"role": "user", "content": "I'm starting to think I'm just not good enough."},
    ],
]
POLICY_SYSTEM = {"role": "system", "content": "You are a warm, concise supporter."}


def script(request: GenerationRequest) -> str:
    if request.purpose == RUBRIC:
        return rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
    candidate = request.messages[-1].content.rsplit("Candidate reply:", 1)[1]
    if "BROKEN" in candidate:
        return "not json"
    return evaluation_json([5, 5, 5, 5, 1, 1] if "sorry" in candidate else [3] * 6)


class Hooks:
    """Stands in for the trainer's log_metric / log_extra hooks and records what they receive."""

    def __init__(self) -> None:
        self.metrics: dict[str, list[float]] = {}
        self.extra: dict[str, list[Any]] = {}

    def kwargs(self) -> dict[str, Any]:
        return {
            "log_metric": lambda name, value: self.metrics.setdefault(name, []).append(value),
            "log_extra": lambda column, values: self.extra.setdefault(column, []).extend(values),
        }


def scripted_reward() -> tuple[AdaptiveReward, ScriptedBackend]:
    backend = ScriptedBackend(script)
    return AdaptiveReward(RubricGenerator(backend), RubricEvaluator(backend)), backend


def test_conversational_call_with_trl_kwargs_logs_every_dimension() -> None:
    reward, _ = scripted_reward()
    hooks = Hooks()
    prompts = [CONTEXTS[0]] * 2
    completions = [
        [{"role": "assistant", "content": "I'm sorry, that is lonely."}],
        [{"role": "assistant", "content": "ok"}],
    ]
    rewards = reward(prompts, completions, completion_ids=[[1], [2]], trainer_state=object(), **hooks.kwargs())
    assert rewards == pytest.approx([0.75, 0.5])
    assert hooks.metrics["care/failed"] == [0.0]
    assert hooks.metrics["care/weight/affective"] == pytest.approx([0.5])
    assert hooks.metrics["care/score/proactive"] == pytest.approx([0.25])  # mean of 0.0 and 0.5
    assert hooks.extra["care/weights"][0] == "cog=0.25 aff=0.50 pro=0.25"
    assert hooks.extra["care/error"] == [None, None]
    assert [r.reward for r in reward.last_results] == rewards
    assert reward.last_results[0].model_dump_json()  # every reward is explained and serialisable


def test_cost_and_rubric_provenance_are_logged_per_reply() -> None:
    reward, backend = scripted_reward()
    hooks = Hooks()
    reward([CONTEXTS[0]] * 2 + [CONTEXTS[1]], ["sorry", "ok", "sorry"], **hooks.kwargs())
    # 2 rubrics + 3 evaluations for 3 replies; the scripted backend counts a token per character
    assert hooks.metrics["care/cost/calls"] == pytest.approx([5 / 3])
    prompt_chars = sum(len(m.content) for r in backend.requests for m in r.messages)
    assert hooks.metrics["care/cost/prompt_tokens"] == pytest.approx([prompt_chars / 3])
    assert hooks.metrics["care/cost/completion_tokens"][0] > 0 and hooks.metrics["care/cost/seconds"][0] >= 0
    assert hooks.metrics["care/rubric/cached"] == [0.0]
    hashes = [text.split()[0] for text in hooks.extra["care/rubric"]]
    assert hashes == [r.rubric.content_hash for r in reward.last_results if r.rubric is not None]
    assert hooks.extra["care/rubric"][0].endswith(" generated")
    assert hooks.extra["care/cost"][0].startswith("calls=1.50 tokens=")
    reward([CONTEXTS[0]], ["sorry"], **hooks.kwargs())  # its rubric is cached now
    assert hooks.metrics["care/rubric/cached"][-1] == 1.0 and hooks.metrics["care/cost/calls"][-1] == 1.0
    assert hooks.extra["care/rubric"][-1] == f"{hashes[0]} cached"


def rubric_prompts(backend: ScriptedBackend) -> list[str]:
    return [r.messages[-1].content for r in backend.requests if r.purpose == RUBRIC]


def test_context_column_replaces_the_policy_prompt() -> None:
    reward, backend = scripted_reward()
    prompts = [[POLICY_SYSTEM, *CONTEXTS[1]]] * 2
    reward(prompts, ["sorry", "hm"], context=[CONTEXTS[1]] * 2)
    assert len(rubric_prompts(backend)) == 1 and POLICY_SYSTEM["content"] not in rubric_prompts(backend)[0]
    reward.context_column = None
    reward(prompts, ["sorry", "hm"], context=[CONTEXTS[1]] * 2)
    assert len(rubric_prompts(backend)) == 2 and POLICY_SYSTEM["content"] in rubric_prompts(backend)[1]
    with pytest.raises(InputError, match="'ctx' has 1 values for 2 completions"):
        reward.context_column = "ctx"
        reward(prompts, ["a", "b"], ctx=[CONTEXTS[1]])


def test_failed_items_are_none_and_logged_with_their_error() -> None:
    reward, _ = scripted_reward()
    hooks = Hooks()
    rewards = reward([CONTEXTS[0]] * 2, ["BROKEN", "sorry"], **hooks.kwargs())
    assert rewards[0] is None and rewards[1] == pytest.approx(0.75)
    assert hooks.metrics["care/failed"] == [0.5]
    assert hooks.extra["care/error"][0].startswith("evaluation failed") and hooks.extra["care/error"][1] is None


async def test_async_form_is_a_coroutine_function_named_like_the_reward() -> None:
    reward, _ = scripted_reward()
    fn = reward.as_async()
    assert inspect.iscoroutinefunction(fn) and fn.__name__ == "care_reward"
    hooks = Hooks()
    assert await fn([CONTEXTS[0]], ["sorry"], **hooks.kwargs()) == pytest.approx([0.75])
    assert hooks.metrics["care/weight/affective"] == pytest.approx([0.5])


def test_trl_detects_the_async_form_and_names_both_forms() -> None:
    utils = pytest.importorskip("trl.trainer.utils")
    reward, _ = scripted_reward()
    assert not utils.is_async_callable(reward)
    assert utils.is_async_callable(reward.as_async())
    assert utils.get_callable_name(reward) == utils.get_callable_name(reward.as_async()) == "care_reward"


def test_fixed_rubric_and_ablations_work_through_the_trl_signature() -> None:
    reward = AdaptiveReward(evaluator=RubricEvaluator(ScriptedBackend(script)), rubric=Rubric.uniform_fixed())
    assert reward([CONTEXTS[0]], ["sorry"]) == pytest.approx([2 / 3])


# -- real GRPO steps ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def logprob_backend(model_path: Path) -> Iterator[Backend]:
    pytest.importorskip("trl")
    from care_sdk.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(model_path, n_ctx=2048, logprobs=True)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def care(model_path: Path, logprob_backend: Backend) -> Iterator[tuple[AdaptiveReward, RecordingBackend]]:
    """AdaptiveReward on the bundled SmolLM2 via llama.cpp: rubrics from the shipped generator adapter, and
    logprob-expected (continuous) scores."""
    pytest.importorskip("trl")
    from care_sdk.backends.llamacpp import LlamaCppBackend
    from care_sdk.bundled.adapters import bundled_adapter

    with LlamaCppBackend(model_path, n_ctx=2048, adapter=bundled_adapter("generator")) as tuned:
        generator_backend = RecordingBackend(tuned)
        evaluator = RubricEvaluator(logprob_backend, use_logprobs=True)
        yield AdaptiveReward(RubricGenerator(generator_backend), evaluator), generator_backend


def run_grpo(tmp_path: Path, reward_func: Any, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
    """Two GRPO steps (one prompt x two generations each) on a tiny random SmolLM2-shaped policy,
    with one reward function or a list of them.

    Returns the log history and the largest change of any weight.
    """
    pytest.importorskip("trl")
    from transformers import AutoModelForCausalLM

    from care_lab.training.models import tiny_grpo_trainer, tiny_model_dir

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = tiny_grpo_trainer(
        reward_func, rows, tmp_path / "out", batch=2, generations=2, completion_tokens=12, model=model
    )
    trainer.train()
    change = max((p.detach() - before[n]).abs().max().item() for n, p in trainer.model.named_parameters())
    return trainer.state.log_history, change


def check_logs(history: list[dict[str, Any]]) -> None:
    steps = [h for h in history if "rewards/care_reward/mean" in h]
    assert len(steps) == 2
    for h in steps:
        assert math.isfinite(h["rewards/care_reward/mean"]) and 0.0 <= h["rewards/care_reward/mean"] <= 1.0
        assert h["care/failed"] == 0.0
        assert sum(h[f"care/weight/{d}"] for d in DIMS) == pytest.approx(1.0)
        for d in DIMS:
            assert 0.0 <= h[f"care/score/{d}"] <= 1.0
        # an evaluated reply costs its evaluation and a share of its context's rubric (none when cached); one
        # the guards settled (the tiny random policy writes some) costs nothing
        assert h["care/cost/calls"] >= 1.0 - h["care/flagged"] and h["care/cost/seconds"] >= 0.0
        if h["care/flagged"] < 1.0:
            assert h["care/cost/seconds"] > 0.0  # and llama.cpp reports the tokens:
            assert h["care/cost/prompt_tokens"] > 0 and h["care/cost/completion_tokens"] > 0
            assert 0.0 <= h["care/rubric/cached"] <= 1.0


@pytest.mark.slow
def test_grpo_trainer_runs_with_care_rewards(tmp_path: Path, care: tuple[AdaptiveReward, RecordingBackend]) -> None:
    reward, generator_backend = care
    rows = [{"prompt": context} for context in CONTEXTS]
    history, change = run_grpo(tmp_path, reward, rows)
    check_logs(history)
    assert change > 0.0, "no weight changed: every group's rewards tied"
    assert_one_rubric_per_context(generator_backend)


def assert_one_rubric_per_context(generator_backend: RecordingBackend) -> None:
    """One rubric per context, not per completion: a context is asked again only after a reply that did not parse
    (the generator's retry)."""
    last_parsed: dict[tuple[Message, ...], bool] = {}
    pairs = zip(generator_backend.requests, generator_backend.results, strict=True)
    for request, result in [(q, r) for q, r in pairs if isinstance(q, GenerationRequest)]:  # not the weight reads
        assert not last_parsed.get(request.messages, False), "a context that already had its rubric was asked again"
        try:
            parse_rubric(result.text)
            last_parsed[request.messages] = True
        except ValueError:
            last_parsed[request.messages] = False
    assert len(last_parsed) == len(CONTEXTS) and all(last_parsed.values())


@pytest.mark.slow
def test_async_variant_with_a_context_column_reuses_every_rubric(
    tmp_path: Path, care: tuple[AdaptiveReward, RecordingBackend]
) -> None:
    reward, generator_backend = care
    reward([CONTEXTS[0], CONTEXTS[1]], ["warm-up", "warm-up"])  # rubrics now cached (as after a first epoch)
    generated = generator_backend.count()
    rows = [{"prompt": [POLICY_SYSTEM, *context], "context": context} for context in CONTEXTS]
    history, change = run_grpo(tmp_path, reward.as_async(), rows)
    check_logs(history)
    assert change > 0.0, "no weight changed: every group's rewards tied"
    assert generator_backend.count() == generated  # the second epoch made zero generator calls
    assert all(h["care/rubric/cached"] == 1.0 for h in history if "care/rubric/cached" in h)


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "trl_grpo.py"
EXAMPLE_RUN = """
import runpy, sys, types
sys.modules["care_lab"] = None  # the example needs only the SDK and the trainer: importing the lab fails
from care_sdk.backends import register_spec_scheme
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json

def evaluation(request):  # replies of odd length score higher, so a group's rewards differ
    return evaluation_json([5, 5, 5, 5, 1, 1] if len(request.messages[-1].content) % 2 else [3] * 6)

def open_judge(rest, role, options):
    if role == "generator":
        return ScriptedBackend(lambda request: rubric_json({"cognitive": 1, "affective": 2, "proactive": 1}))
    return ScriptedBackend(evaluation)

judge = types.ModuleType("example_judge")
judge.open_judge = open_judge
sys.modules["example_judge"] = judge
register_spec_scheme("examplejudge", "example_judge:open_judge", bare=True, per_role=True)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
def test_the_trl_example_trains_with_the_sdk_and_the_trainer_alone(tmp_path: Path) -> None:
    """``examples/trl_grpo.py`` on its dialogues file, a tiny policy and a scripted judge (``$CARE_BACKEND``),
    with ``care_lab`` made unimportable."""
    pytest.importorskip("trl")
    import os
    import subprocess
    import sys

    from care_lab.training.models import tiny_model_dir

    dialogues = EXAMPLE.with_name("dialogues.jsonl")
    command = [sys.executable, "-c", EXAMPLE_RUN, str(EXAMPLE), str(dialogues), str(tiny_model_dir()), "1"]
    env = {**os.environ, "CARE_BACKEND": "examplejudge"}
    out = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "'rewards/care_reward/mean'" in out.stdout + out.stderr
    assert "rubric cache: CacheStats(hits=0, misses=1)" in out.stdout  # 8 replies to one context: one rubric
