"""The bundled evaluator adapter: what it records, who may use it, and that it orders replies."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator
from care_sdk.adapters import bundled_adapter
from care_sdk.backends.llamacpp import LlamaCppBackend
from care_sdk.data import default_strategy_map, load_esconv
from care_sdk.errors import ConfigError
from care_sdk.prompts import EVALUATOR_PROMPT_VERSION
from care_sdk.training.rubric_targets import TemplateTargets

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shipped() -> RubricEvaluator:
    assert bundled_adapter("evaluator") is not None, "the package ships no evaluator adapter"
    return RubricEvaluator("default")


def test_the_default_evaluator_is_the_shipped_adapter(shipped: RubricEvaluator) -> None:
    adapter = shipped.backend.adapter  # type: ignore[attr-defined]
    assert adapter.role == "evaluator" and adapter.prompt_version == EVALUATOR_PROMPT_VERSION
    assert adapter.max_context_messages == 4 and shipped.max_context_messages == 4
    assert adapter.training["records"] and adapter.training["steps"]
    assert RubricEvaluator("base").backend.adapter is None  # type: ignore[attr-defined]
    assert RubricEvaluator("base").max_context_messages is None


def test_the_default_reward_gets_both_adapters() -> None:
    reward = AdaptiveReward.from_backend("default")
    assert reward.generator is not None
    assert reward.generator.backend.adapter.role == "generator"  # type: ignore[attr-defined]
    assert reward.evaluator.backend.adapter.role == "evaluator"  # type: ignore[attr-defined]


def test_the_evaluator_adapter_cannot_serve_as_the_generator(model_path: Path) -> None:
    path = bundled_adapter("evaluator")
    assert path is not None
    backend = LlamaCppBackend(model_path, adapter=path, n_ctx=512)
    with pytest.raises(ConfigError, match="an evaluator adapter cannot serve as the generator"):
        RubricGenerator(backend)
    backend.close()


def test_held_out_references_score_above_replies_from_other_conversations(
    shipped: RubricEvaluator, data_dir: Path
) -> None:
    """ESConv test contexts (never trained on) under their template rubric: the reference reply against
    a supporter reply from another test dialogue, over several fixed examples."""
    mapping = default_strategy_map()
    train = load_esconv(data_dir / "esconv" / "train.jsonl", strategy_map=mapping).records[:200]
    test = load_esconv(data_dir / "esconv" / "test.jsonl", strategy_map=mapping).records
    targets = TemplateTargets(train, mapping, max_context_messages=4)
    rng = random.Random(7)
    cases = []
    for dialogue in test[:40]:
        turns = [t for t in dialogue.supporter_turns(mapping) if t.labelled and len(t.context) >= 3]
        if turns and any(turns[0].counts.values()):
            cases.append((dialogue, rng.choice(turns)))
    cases = cases[:8]
    wins = 0.0
    for i, (dialogue, turn) in enumerate(cases):
        rubric = targets.rubric(turn, dialogue)
        other = cases[(i + 3) % len(cases)][1].reply
        good, bad = shipped.evaluate_batch(
            [(turn.context_messages(), rubric, turn.reply), (turn.context_messages(), rubric, other)]
        )
        assert not isinstance(good, Exception) and not isinstance(bad, Exception)
        a, b = good.dimension_scores(), bad.dimension_scores()
        wins += 1.0 if sum(a.values()) > sum(b.values()) else 0.5 if sum(a.values()) == sum(b.values()) else 0.0
    assert wins >= 0.75 * len(cases), (wins, len(cases))
