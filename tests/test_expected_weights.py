"""Expected rubric weights: the generator's weights read from its distributions at the weight slots."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from care_sdk import RubricGenerator
from care_sdk.backends.base import ForcedRequest, GenerationResult
from care_sdk.backends.lora import AdapterInfo
from care_sdk.bundled.addons import ExpectedWeightsReader
from care_sdk.errors import BackendError, ConfigError, OutputError
from care_sdk.prompts import GENERATOR_PROMPT_VERSION
from care_sdk.testing import ScriptedBackend, rubric_json
from care_sdk.types import DIMENSIONS, Rubric

CONTEXT = [{"role": "user", "content": "I failed my exam and my parents will be furious."}]


def slot_probabilities(text: str) -> dict[str, float]:
    """A model of the weight slots: cognitive 2 (0.6) or 8 (0.4); then affective 5 after 2 and 1
    after 8; then proactive the rest of 10. Inside a number (after its first digit) it ends it."""
    if not text.endswith('": '):
        return {}
    picks = [int(p) for p in re.findall(r'": (\d+)', text)]
    if not picks:
        return {"2": 0.6, "8": 0.4}
    if len(picks) == 1:
        return {"5": 1.0} if picks[0] == 2 else {"1": 1.0}
    return {str(10 - sum(picks)): 1.0}


class WeightModel(ScriptedBackend):
    """Decodes a rubric with weights 2/5/3 and reads the weight slots from :func:`slot_probabilities`;
    a context containing "boom" fails its forced reads."""

    def __init__(self) -> None:
        super().__init__(
            lambda request: rubric_json({"cognitive": 2, "affective": 5, "proactive": 3}), forced=self.read
        )
        self.forced_requests = 0

    def _forced_replies(self, requests: Sequence[ForcedRequest]) -> list[GenerationResult]:
        self.forced_requests += len(requests)
        failing = [any("boom" in m.content for m in r.messages) for r in requests]
        fine = super()._forced_replies([r for r, fail in zip(requests, failing, strict=True) if not fail])
        return [
            GenerationResult(error=BackendError("engine failed", provider="test")) if fail else fine.pop(0)
            for fail in failing
        ]

    @staticmethod
    def read(text: str, chars: Sequence[str]) -> list[float]:
        table = slot_probabilities(text)
        return [math.log(table.get(c, 1e-9)) for c in chars]


def test_expected_weights_are_the_slot_expectations_and_the_criteria_stay() -> None:
    model = WeightModel()
    rubric = RubricGenerator(model, weight_reader=ExpectedWeightsReader()).generate(CONTEXT)
    # cognitive 0.6*2 + 0.4*8 = 4.4; affective 0.6*5 + 0.4*1 = 3.4; proactive 0.6*3 + 0.4*1 = 2.2
    assert [rubric.weights[d] for d in DIMENSIONS] == pytest.approx([0.44, 0.34, 0.22], abs=1e-6)
    assert model.forced_requests == 1 + 3 + 9  # the first two slots followed on their 3 likeliest values
    decoded = RubricGenerator(WeightModel()).generate(CONTEXT)
    assert [decoded.weights[d] for d in DIMENSIONS] == pytest.approx([0.2, 0.5, 0.3])
    assert rubric.criteria == decoded.criteria
    assert rubric.top_dimension != decoded.top_dimension  # greedy follows the likelier first digit only


def test_a_failed_read_fails_its_item_only() -> None:
    results = RubricGenerator(WeightModel(), weight_reader=ExpectedWeightsReader()).generate_batch(
        [CONTEXT, [{"role": "user", "content": "boom"}]]
    )
    assert isinstance(results[0], Rubric)
    assert isinstance(results[1], BackendError) and "engine failed" in str(results[1])


def test_a_reply_without_a_distribution_is_an_output_error() -> None:
    class NoDistribution(WeightModel):
        def _forced_replies(self, requests: Sequence[ForcedRequest]) -> list[GenerationResult]:
            out = super()._forced_replies(requests)
            return [GenerationResult(completions=(type(r.completions[0])(text="2"),)) for r in out]

    result = RubricGenerator(NoDistribution(), weight_reader=ExpectedWeightsReader()).generate_batch([CONTEXT])[0]
    assert isinstance(result, OutputError) and "no distribution" in str(result)


def test_expected_weights_are_read_only_when_asked_for(tmp_path: Path) -> None:
    plain = RubricGenerator(WeightModel())
    assert plain.weight_reader is None and "weights=" not in plain.identity
    trained = WeightModel()
    trained.adapter = AdapterInfo(  # type: ignore[attr-defined]
        path=tmp_path / "g.gguf", role="generator", prompt_version=GENERATOR_PROMPT_VERSION, max_context_messages=4
    )
    assert RubricGenerator(trained).weight_reader is None  # a trained adapter keeps the weights it wrote
    generator = RubricGenerator(trained, weight_reader=ExpectedWeightsReader())
    assert generator.identity.endswith("|weights=expected")
    assert [generator.generate(CONTEXT).weights[d] for d in DIMENSIONS] == pytest.approx([0.44, 0.34, 0.22])


def test_expected_weights_need_forced_replies() -> None:
    scripted = ScriptedBackend([rubric_json({"cognitive": 1, "affective": 1, "proactive": 1})])
    with pytest.raises(ConfigError, match="builds forced replies"):
        RubricGenerator(scripted, weight_reader=ExpectedWeightsReader())
    assert RubricGenerator(scripted).weight_reader is None  # the default: decoded where it cannot force
