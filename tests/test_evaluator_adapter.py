"""The bundled evaluator adapter: what it records, who may use it, and that it orders replies."""

from __future__ import annotations

from pathlib import Path

import pytest

from care_lab.data import LEND_AN_EAR_HELD_OUT, lend_an_ear_split, load_judged_turns, load_lend_an_ear
from care_lab.training.evaluator_pairwise import STAGES
from care_sdk import AdaptiveReward, Rubric, RubricEvaluator, RubricGenerator
from care_sdk.backends.llamacpp import LlamaCppBackend
from care_sdk.bundled.adapters import bundled_adapter
from care_sdk.errors import ConfigError
from care_sdk.prompts import EVALUATOR_PROMPT_VERSION

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shipped() -> RubricEvaluator:
    assert bundled_adapter("evaluator") is not None, "the package ships no evaluator adapter"
    return RubricEvaluator("default")


def test_the_default_evaluator_is_the_shipped_adapter(shipped: RubricEvaluator) -> None:
    adapter = shipped.backend.adapter  # type: ignore[attr-defined]
    assert adapter.role == "evaluator" and adapter.prompt_version == EVALUATOR_PROMPT_VERSION
    assert adapter.max_context_messages == 4 and shipped.max_context_messages == 4
    assert adapter.training["recipe"] == STAGES[-1].name and adapter.training["steps"]  # the last stage
    assert adapter.expected_scores and shipped.use_logprobs  # read as it was trained
    assert not RubricEvaluator("default", use_logprobs=False).use_logprobs  # an explicit choice wins
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


SYSTEMS = ("gold", "baseline1_vanilla_Qwen3-4B", "baseline7_psychocounsel_Qwen3-4B", "ours3_q_dkl_h_Qwen3-4B")


def test_the_shipped_reward_orders_held_out_judged_replies_as_the_judge(data_dir: Path) -> None:
    """Held-out Lend-an-Ear turns (never trained on): the judge's best against its worst reply of four
    systems, under the shipped generator's rubric, over several turns (greedy, so stable)."""
    root = data_dir / "mint_lend_an_ear"
    dialogues = {d.id: d for d in load_lend_an_ear(root).records}
    judged = load_judged_turns(root / "judged_turns" / "judged_turn_responses_gold_and_qwen3-4b_systems.jsonl")
    turns: dict[tuple[str, int], list] = {}
    for r in judged.records:
        if r.system in SYSTEMS and lend_an_ear_split(r.conversation_id) in LEND_AN_EAR_HELD_OUT:
            turns.setdefault((r.conversation_id, r.turn_index), []).append(r)
    cases = []
    for (cid, index), replies in sorted(turns.items()):
        best, worst = max(replies, key=lambda r: r.aggregated_empathy), min(replies, key=lambda r: r.aggregated_empathy)
        if best.aggregated_empathy - worst.aggregated_empathy >= 1:
            cases.append((list(dialogues[cid].messages[:index]), best.response, worst.response))
    cases = cases[:12]
    reward = AdaptiveReward.from_backend("default", guards=None)
    results = reward.score_batch([(c, r) for c, best, worst in cases for r in (best, worst)])
    wins = 0.0
    for k in range(len(cases)):
        good, bad = results[2 * k].reward, results[2 * k + 1].reward
        assert good is not None and bad is not None, (results[2 * k].error, results[2 * k + 1].error)
        wins += 1.0 if good > bad else 0.5 if good == bad else 0.0
    # 9 of these 12 when written; on all 55 such held-out turns 0.80 with the shift check, 0.87 without
    # it (the judge's worst is nearly always the short human reply: see docs/training/bundled_evaluator.md
    # for the length baseline)
    assert wins >= 8, wins


def test_the_default_reward_scores_a_turn_whose_visible_messages_overflow_the_window() -> None:
    """A long message among the visible four (over 4,096 tokens, as in some SAGE conversations): the
    generator and the evaluator drop the oldest visible messages until the prompt fits, instead of failing."""
    story = " ".join(f"On day {i} I went back to the office and my manager ignored me again." for i in range(300))
    context = [
        {"role": "user", "content": "Work has been awful."},
        {"role": "user", "content": story},
        {"role": "assistant", "content": "That sounds exhausting. What happened today?"},
        {"role": "user", "content": "He shouted at me in front of everyone. What do I do?"},
    ]
    reward = AdaptiveReward.from_backend("default")
    backend: LlamaCppBackend = reward.evaluator.backend  # type: ignore[assignment]
    request = reward.evaluator.request(context, Rubric.uniform_fixed(), "x")
    assert len(backend._prompt_ids(request)) > backend.llama.n_ctx()
    result = reward.score(context, "That was humiliating. Could you talk to HR about what happened today?")
    assert result.error is None and result.reward is not None and result.rubric is not None
