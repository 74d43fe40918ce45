"""Every backend's reward is the method's formula, computed from its own rubric and evaluation.

r = sum_d w_d * mean_{c in d} (s_c - 1) / 4: no backend spec adds anything to it unless the caller
asks for an add-on, except the bundled ``default``, whose documented reward is
fit * (0.5 + 0.5 * r); a result names what produced it (``parts``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from care_sdk import AdaptiveReward, Rubric
from care_sdk.errors import ConfigError
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
from care_sdk.types import DIMENSIONS, Evaluation, RewardResult
from servers import llama_server  # noqa: F401 - the fixture

CONTEXT = [
    {"role": "user", "content": "I got laid off this morning after twelve years."},
    {"role": "assistant", "content": "I'm so sorry. That is a huge shock after so long."},
    {"role": "user", "content": "I don't even know what to tell my kids."},
]
REPLY = "That sounds heavy to carry. What worries you most about telling them?"


def documented_reward(rubric: Rubric, evaluation: Evaluation) -> float:
    """The formula as the docs write it, computed here without the SDK's own helper."""
    total = 0.0
    for dimension in DIMENSIONS:
        scores = [s.score for s in evaluation.scores if s.dimension == dimension]
        assert scores, f"no criterion scored for {dimension}"
        total += rubric.weights[dimension] * sum((s - 1) / 4 for s in scores) / len(scores)
    return total


def assert_method(result: RewardResult) -> None:
    assert result.reward is not None, result.error
    assert result.rubric is not None and result.evaluation is not None
    assert result.reward == pytest.approx(documented_reward(result.rubric, result.evaluation), abs=1e-9)
    assert result.context_fit is None
    assert result.parts == ("care",)


def test_the_reward_is_the_formula_on_a_scripted_backend() -> None:
    backend = ScriptedBackend(
        [rubric_json({"cognitive": 3, "affective": 5, "proactive": 2}), evaluation_json([5, 4, 2, 3, 1, 5])]
    )
    reward = AdaptiveReward.from_backend(backend)
    result = reward.score(CONTEXT, REPLY)
    assert_method(result)
    # 0.3 * (1 + 0.75) / 2 + 0.5 * (0.25 + 0.5) / 2 + 0.2 * (0 + 1) / 2
    assert result.reward == pytest.approx(0.3 * 0.875 + 0.5 * 0.375 + 0.2 * 0.5)


def test_no_factory_turns_an_add_on_on_by_itself() -> None:
    reward = AdaptiveReward.from_backend(ScriptedBackend([]))
    assert reward.context_fit is None and reward.parts == ("care",)
    assert reward.generator is not None
    assert reward.generator.weight_reader is None


@pytest.mark.parametrize("option", ["on", "off", "yes"])
def test_a_context_fit_string_is_refused_with_the_way_to_ask_for_it(option: str) -> None:
    with pytest.raises(ConfigError, match=r"not a ContextFitReader.*add_ons\('context-fit'\)"):
        AdaptiveReward.from_backend(ScriptedBackend([]), context_fit=option)


def test_context_fit_is_off_unless_asked_for_and_a_string_is_refused() -> None:
    reward = AdaptiveReward.from_backend(ScriptedBackend([]))
    assert reward.context_fit is None and reward.parts == ("care",)
    with pytest.raises(ConfigError, match="'auto' is not a ContextFitReader"):
        AdaptiveReward.from_backend(ScriptedBackend([]), context_fit="auto")  # type: ignore[arg-type]


def test_a_variant_names_itself_in_the_parts() -> None:
    backend = ScriptedBackend([rubric_json({"cognitive": 1, "affective": 0, "proactive": 0}), evaluation_json([5] * 6)])
    reward = AdaptiveReward.from_backend(backend, variant="uniform_weights")
    result = reward.score(CONTEXT, REPLY)
    assert result.parts == ("uniform_weights",)
    assert result.rubric is not None and all(math.isclose(w, 1 / 3) for w in result.rubric.weights.values())


# -- real backends: the bundled default, llama.cpp by path, an OpenAI-compatible server, transformers ----------


def _tiny_hf() -> Any:
    pytest.importorskip("trl", reason="the tiny model helper needs the train extra")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from care_lab.training.models import tiny_model_dir
    from care_sdk.backends.hf import HFBackend

    path = tiny_model_dir()
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return HFBackend(model=model, tokenizer=tokenizer, batch_size=2, n_threads=1)


SPECS: dict[str, Callable[[pytest.FixtureRequest], Any]] = {
    "default": lambda request: "default",
    "llamacpp": lambda request: f"llamacpp:{request.getfixturevalue('model_path')}",
    "openai": lambda request: request.getfixturevalue("llama_server").spec,
    "hf": lambda request: _tiny_hf(),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SPECS))
def test_every_spec_gives_the_formula(name: str, request: pytest.FixtureRequest) -> None:
    reward = AdaptiveReward.from_backend(SPECS[name](request))
    assert reward.context_fit is None and reward.parts == ("care",)
    results = reward.score_batch([(CONTEXT, REPLY), (CONTEXT, "Tell me more.")])
    scored = [r for r in results if r.reward is not None]
    assert scored, [r.error for r in results]
    for result in scored:
        assert_method(result)


@pytest.mark.slow
def test_the_context_fit_add_on_pays_the_formula_times_its_fit() -> None:
    """Context fit (opt-in) on the bundled models: fit * (0.5 + 0.5 * the method's formula)."""
    from care_sdk.addons import add_ons

    reward = AdaptiveReward.from_backend("default", add_ons=["context-fit"])
    assert reward.parts == ("care", "context_fit")
    result = reward.score(CONTEXT, REPLY)
    assert result.reward is not None and result.rubric is not None and result.evaluation is not None, result.error
    assert result.parts == ("care", "context_fit") and result.context_fit is not None
    formula = documented_reward(result.rubric, result.evaluation)
    assert result.reward == pytest.approx(result.context_fit * (0.5 + 0.5 * formula), abs=1e-9)
    assert add_ons("context-fit").context_fit is not None
