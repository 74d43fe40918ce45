"""Logprob-expected criterion scores: continuous rewards from the score tokens' probabilities."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from care_sdk import AdaptiveReward, Backend, Rubric, RubricEvaluator
from care_sdk.backends.base import Completion, TokenLogprob
from care_sdk.testing import ScriptedBackend, score_logprobs

CONTEXT = [
    {"role": "user", "content": "I moved to a new city for work and I don't know anyone."},
    {"role": "assistant", "content": "Starting over somewhere new can feel isolating. How long has it been?"},
    {"role": "user", "content": "Three months. Weekends are the worst."},
]
REPLIES = [
    "Three months of quiet weekends sounds lonely. What did you used to do on weekends back home?",
    "ok",
]
NEAR_TIE = 0.02
"""How far below the most likely digit's probability the greedy digit's may be (float noise between passes)."""


def scripted_completion(distributions: list[dict[int, float]]) -> Completion:
    """An evaluator reply whose score tokens carry the given probabilities (sampled digit = the most likely)."""
    tokens: list[TokenLogprob] = [TokenLogprob(token='{"scores": {', logprob=0.0)]
    for i, dist in enumerate(distributions):
        prefix = ", " if i else ""
        tokens.append(TokenLogprob(token=f'{prefix}"c{i + 1}": ', logprob=0.0))
        tokens.append(score_logprobs(dist))
    tokens.append(TokenLogprob(token="}}", logprob=0.0))
    return Completion(text="".join(t.token for t in tokens), logprobs=tuple(tokens))


def test_expected_scores_break_ties_between_sampled_scores() -> None:
    sharp, leaning_up = [{4: 0.9, 3: 0.1}] * 6, [{4: 0.6, 5: 0.4}] * 6
    rubric = Rubric.uniform_fixed()

    def evaluator(use_logprobs: bool) -> RubricEvaluator:
        script = [scripted_completion(sharp), scripted_completion(leaning_up)]
        return RubricEvaluator(ScriptedBackend(script), use_logprobs=use_logprobs)

    sampled, expected = evaluator(False), evaluator(True)
    plain = [sampled.evaluate(CONTEXT, rubric, r) for r in "ab"]
    cont = [expected.evaluate(CONTEXT, rubric, r) for r in "ab"]
    assert [e.scores[0].score for e in plain] == [4.0, 4.0]  # a tie: zero advantage for this pair in GRPO
    assert [e.scores[0].score for e in cont] == pytest.approx([3.9, 4.4])  # broken by the probabilities
    assert cont[1].scores[0].distribution == pytest.approx((0.0, 0.0, 0.0, 0.6, 0.4))
    rewards = [AdaptiveReward(evaluator=evaluator(flag), rubric=rubric)([CONTEXT] * 2, ["a", "b"]) for flag in (0, 1)]
    assert rewards[0][0] == rewards[0][1] and rewards[1][0] < rewards[1][1]


@pytest.fixture(scope="module")
def logprob_backend(model_path: Path) -> Iterator[Backend]:
    from care_sdk.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(model_path, n_ctx=2048, logprobs=True)
    yield backend
    backend.close()


@pytest.mark.slow
def test_real_model_gives_distributions_consistent_with_its_samples(logprob_backend: Backend) -> None:
    rubric = Rubric.uniform_fixed()
    # One attempt each: a retry samples at a raised temperature, and this compares greedy replies.
    # Decoded: the logprobs come with the decoded tokens (forced scoring is tested in test_forced_scoring).
    sampled = RubricEvaluator(logprob_backend, max_attempts=1, mode="decoded")
    expected = RubricEvaluator(logprob_backend, use_logprobs=True, max_attempts=1, mode="decoded")
    for reply in REPLIES:
        plain = sampled.evaluate(CONTEXT, rubric, reply)
        cont = expected.evaluate(CONTEXT, rubric, reply)
        assert cont == expected.evaluate(CONTEXT, rubric, reply)  # deterministic
        located = [s for s in cont.scores if s.distribution is not None]
        assert len(located) >= len(rubric.criteria) - 1, "score tokens were not located in the logprobs"
        for p, c in zip(plain.scores, cont.scores, strict=True):
            if c.distribution is None:
                assert c.score == p.score
                continue
            assert sum(c.distribution) == pytest.approx(1.0)
            assert 1.0 <= c.score <= 5.0
            # Greedy decoding picks the most likely allowed digit. The two requests run separate forward
            # passes (with and without logits kept) whose logits differ in the last float bits, so two
            # near-equal digits may swap; from there on the replies differ and are not compared.
            chosen, best = c.distribution[int(p.score) - 1], max(c.distribution)
            assert chosen >= best - NEAR_TIE, (p.score, c.distribution)
            if chosen != best:
                break


@pytest.mark.slow
def test_a_backend_without_logits_reports_instead_of_guessing(llama_backend: Any) -> None:
    evaluator = RubricEvaluator(llama_backend, use_logprobs=True, mode="decoded")
    result = AdaptiveReward(evaluator=evaluator, rubric=Rubric.uniform_fixed()).score_batch([(CONTEXT, REPLIES[0])])[0]
    assert result.reward is None
    assert result.error is not None and "logprobs were requested" in result.error


@pytest.mark.slow
def test_forced_scoring_needs_no_kept_logits_for_expected_scores(llama_backend: Any) -> None:
    evaluator = RubricEvaluator(llama_backend, use_logprobs=True)  # forced: the last position's logits suffice
    result = AdaptiveReward(evaluator=evaluator, rubric=Rubric.uniform_fixed()).score_batch([(CONTEXT, REPLIES[0])])[0]
    assert result.error is None and result.evaluation is not None
    assert all(s.distribution is not None for s in result.evaluation.scores)
