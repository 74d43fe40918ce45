"""Context fit: the gate, the order of reads, and the reward it scales (pure logic, no model).

The model-backed checks (llama.cpp against transformers, the bundled model ordering held-out
replies) are in ``test_context_fit_model.py``.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Sequence
from typing import Any

import pytest

from care_sdk import AdaptiveReward, Rubric, RubricEvaluator
from care_sdk.addons import AddOns
from care_sdk.backends import Backend
from care_sdk.bundled.context_fit import BUNDLED_GATE, NEUTRAL, ContextFit, Gate
from care_sdk.errors import BackendError, ConfigError, ContextOverflowError
from care_sdk.testing import ScriptedBackend, evaluation_json
from care_sdk.types import Message


class OverlapModel(Backend):
    """A stand-in language model: a reply token is likelier (log p = -1) when the prompt holds the
    same word, else log p = -3. Records every read."""

    provider = "overlap"

    def __init__(self, fail_on: str | None = None, max_words: int = 1000) -> None:
        self.reads: list[tuple[tuple[str, ...], str]] = []
        self.fail_on = fail_on
        self.max_words = max_words

    def reply_logprobs(self, messages: Sequence[Message], reply: str) -> list[float]:
        self.reads.append((tuple(m.content for m in messages), reply))
        if self.fail_on is not None and self.fail_on in reply:
            raise BackendError("the prompt does not fit", provider=self.provider)
        words = sum(len(m.content.split()) for m in messages) + len(reply.split())
        if words > self.max_words:
            raise ContextOverflowError(words, self.max_words, provider=self.provider)
        seen = {w for m in messages for w in m.content.lower().split()}
        return [-1.0 if w in seen else -3.0 for w in reply.lower().split()]


def test_the_gate_is_a_logistic_curve_and_fit_recovers_one() -> None:
    gate = Gate(slope=3.0, intercept=-0.6)
    assert gate(0.2) == pytest.approx(0.5)
    assert 0.0 < gate(-10.0) < gate(0.0) < gate(1.0) < gate(10.0) < 1.0
    assert gate(-1000.0) == 0.0 and gate(1000.0) == 1.0  # no overflow at the extremes
    rng = random.Random(0)
    xs = [rng.uniform(-1.5, 2.0) for _ in range(4000)]
    labels = [rng.random() < gate(x) for x in xs]
    fitted = Gate.fit(
        [x for x, y in zip(xs, labels, strict=True) if y], [x for x, y in zip(xs, labels, strict=True) if not y]
    )
    assert fitted.slope == pytest.approx(3.0, abs=0.4) and fitted.intercept == pytest.approx(-0.6, abs=0.2)
    with pytest.raises(ValueError, match="both kinds"):
        Gate.fit([0.1], [])
    with pytest.raises(ValueError, match="do not vary"):
        Gate.fit([0.0, 0.0], [0.0])


def test_pmi_sums_the_evidence_over_the_reply_against_the_neutral_context() -> None:
    model = OverlapModel()
    fit = ContextFit(model, gate=Gate(slope=1.0, intercept=0.0))
    context = "my dog died yesterday"
    # "dog" and "died" appear in the context, not in the neutral "Hi.": (-1 - -3) nats each
    assert fit.pmi(context, "dog died") == pytest.approx(4.0)
    assert fit.pmi(context, "exams stress") == pytest.approx(0.0)
    assert fit.pmi(context, "dog exams") == pytest.approx(2.0)
    assert fit.pmi(context, "dog died dog died") == pytest.approx(8.0)  # a longer on-topic reply earns more
    assert fit.score(context, "dog died") == pytest.approx(1 / (1 + math.exp(-4.0)))
    assert fit.pmi(context, "") == 0.0 and fit.pmi([], "dog died") == 0.0  # nothing read, no evidence


def test_the_reply_is_compared_with_its_likelihood_after_hi_through_the_bundled_gate() -> None:
    model = OverlapModel()
    fit = ContextFit(model)
    assert fit.gate == BUNDLED_GATE and [(m.role, m.content) for m in fit.baseline] == [("user", NEUTRAL)]
    assert fit.pmi("my dog", "my dog") == pytest.approx(4.0)  # -1 -1 after "my dog", -3 -3 after "Hi."
    assert [p for p, _ in model.reads] == [("my dog",), ("Hi.",)]
    assert "baselines=" not in fit.identity and "shift-check" not in fit.identity


def test_words_repeated_from_the_context_are_not_read_as_evidence() -> None:
    context = "my dog died yesterday and the flat is so quiet"
    echo = "your dog died yesterday and the flat is so quiet"  # the user's words turned around
    model = OverlapModel()
    fit = ContextFit(model, gate=Gate(slope=1.0, intercept=0.0))
    assert fit.pmi(context, echo) == 0.0 and model.reads == []  # nothing left to read
    assert fit.pmi(context, f"{echo}. walks help") == pytest.approx(0.0)  # only the added words count
    assert model.reads[0][1] == "walks help"
    assert fit.pmi(context, "so quiet without the dog") == pytest.approx(8.0)  # no four-word run: read whole
    unstripped = ContextFit(OverlapModel(), gate=Gate(slope=1.0, intercept=0.0), strip_copies=False)
    assert unstripped.pmi(context, echo) == pytest.approx(18.0)  # 9 of its 10 words are in the context
    assert "copies discounted" in fit.identity and "copies discounted" not in unstripped.identity
    # the fit is scaled by the reply's own share: appending the user's words halves a reply's fit
    own = "walks in the park might help the evenings feel less empty"
    assert fit.own_share(context, own) == 1.0 and fit.own_share(context, echo) == 0.0
    assert fit.own_share(context, f"{own} {echo}") == pytest.approx(1 - 7 / 18)
    assert fit.score(context, f"{own} {echo}") == pytest.approx(fit.score(context, own) * (1 - 7 / 18))
    assert unstripped.own_share(context, echo) == 1.0


def test_a_context_is_read_once_per_group_and_every_baseline_read_comes_after() -> None:
    model = OverlapModel()
    fit = ContextFit(model, window=2, gate=Gate(1.0, 0.0))
    long_context = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "second"},
        {"role": "user", "content": "third"},
    ]
    items = [("a b", "x"), (long_context, "y"), ("a b", "z"), (long_context, "w")]
    fit.pmi_batch(items)
    prompts = [p for p, _ in model.reads]
    assert prompts[:4] == [("a b",), ("a b",), ("second", "third"), ("second", "third")]  # grouped, window of 2
    assert prompts[4:] == [("Hi.",)] * 4  # then every reply after "Hi."
    assert [r for _, r in model.reads[:4]] == ["x", "z", "y", "w"]
    model.reads.clear()
    fit.pmi_batch([("c d", "x"), ("e f", "x"), ("e f", "v")])  # "x" is read once after "Hi."
    assert [r for p, r in model.reads if p == ("Hi.",)] == ["x", "v"]


def test_a_reply_met_again_in_the_same_context_is_not_read_again() -> None:
    model = OverlapModel()
    fit = ContextFit(model, gate=Gate(slope=1.0, intercept=0.0))
    first = fit.pmi_batch([("my dog died", "dog"), ("my dog died", "cat")])
    reads = len(model.reads)
    again = fit.pmi_batch([("my dog died", "cat"), ("my dog died", "dog"), ("my cat died", "dog")])
    assert again[:2] == first[::-1] and again[2] == pytest.approx(0.0)
    assert len(model.reads) == reads + 2  # only the new context's pair of reads
    failing = ContextFit(OverlapModel(fail_on="boom"))
    failing.pmi_batch([("a", "boom")])
    assert isinstance(failing.pmi_batch([("a", "boom")])[0], BackendError)  # an error is never kept


def test_a_window_that_does_not_fit_the_model_is_read_from_its_last_messages_that_do() -> None:
    model = OverlapModel(max_words=8)  # a context window of 8 words
    fit = ContextFit(model, gate=Gate(slope=1.0, intercept=0.0))
    context = [
        {"role": "user", "content": "my dog died last week"},
        {"role": "assistant", "content": "I am so sorry"},
        {"role": "user", "content": "the flat is quiet"},
    ]
    assert fit.pmi(context, "quiet dog") == pytest.approx(2.0)  # "dog" is no longer in what was read
    assert [p for p, _ in model.reads[:3]] == [
        ("my dog died last week", "I am so sorry", "the flat is quiet"),
        ("I am so sorry", "the flat is quiet"),
        ("the flat is quiet",),
    ]
    with pytest.raises(ContextOverflowError, match="context window"):
        fit.pmi(context, "one two three four five six seven eight nine")  # not even after the last message
    model.reads.clear()
    model.fail_on = "boom"
    with pytest.raises(BackendError, match="does not fit"):
        fit.pmi(context, "boom")
    assert len(model.reads) == 1  # an error that is not the context window is not tried again


def test_a_failed_read_is_that_items_error_only() -> None:
    fit = ContextFit(OverlapModel(fail_on="boom"))
    values = fit.pmi_batch([("a", "a"), ("a", "boom"), ("a", "b")])
    assert values[0] == pytest.approx(2.0) and values[2] == pytest.approx(0.0)  # one token each
    assert isinstance(values[1], BackendError) and "does not fit" in str(values[1])
    with pytest.raises(BackendError):
        fit.score("a", "boom")


def test_a_backend_that_cannot_read_given_replies_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="scripted cannot"):
        ContextFit(ScriptedBackend([]))
    with pytest.raises(ConfigError, match="window"):
        ContextFit(OverlapModel(), window=0)
    with pytest.raises(ConfigError, match="floor"):
        ContextFit(OverlapModel(), floor=1.5)


def _reward(fit: ContextFit | None, evaluations: int) -> AdaptiveReward:
    evaluator = RubricEvaluator(ScriptedBackend([evaluation_json([5, 5, 5, 5, 3, 3])] * evaluations))
    return AdaptiveReward(evaluator=evaluator, rubric=Rubric.uniform_fixed(), context_fit=fit)


def test_the_reward_is_the_fit_times_a_floor_plus_the_rest_of_the_rubric_reward() -> None:
    gate = Gate(slope=1.0, intercept=0.0)
    context = "my dog died yesterday"
    items = [(context, "dog died"), (context, "exams stress")]
    plain = _reward(None, 2).score_batch(items)
    fitted = _reward(ContextFit(OverlapModel(), gate=gate), 2).score_batch(items)
    product = _reward(ContextFit(OverlapModel(), gate=gate, floor=0.0), 2).score_batch(items)
    assert [r.context_fit for r in plain] == [None, None]
    assert plain[0].reward == plain[1].reward == pytest.approx(5 / 6)
    assert fitted[0].context_fit == pytest.approx(gate(4.0)) and fitted[1].context_fit == pytest.approx(0.5)
    half = 0.5 + 0.5 * 5 / 6  # the default floor: half the fit whatever the rubric says, half by it
    assert fitted[0].reward == pytest.approx(half * gate(4.0)) and fitted[1].reward == pytest.approx(half * 0.5)
    assert product[0].reward == pytest.approx(5 / 6 * gate(4.0)) and product[1].reward == pytest.approx(5 / 12)
    assert fitted[0].evaluation == plain[0].evaluation  # the rubric scores themselves are unchanged
    assert fitted[0].rubric_reward == plain[0].rubric_reward == pytest.approx(5 / 6)


def test_a_reply_the_rubric_scores_zero_keeps_the_floor_share_of_its_fit() -> None:
    items = [("my dog died", "dog died"), ("my dog died", "exams")]
    for floor in (0.0, 0.5):
        evaluator = RubricEvaluator(ScriptedBackend([evaluation_json([1, 1, 1, 1, 1, 1])] * 2))
        fit = ContextFit(OverlapModel(), gate=Gate(slope=1.0, intercept=0.0), floor=floor)
        results = AdaptiveReward(evaluator=evaluator, rubric=Rubric.uniform_fixed(), context_fit=fit).score_batch(items)
        assert [r.rubric_reward for r in results] == [0.0, 0.0]
        rewards = [r.reward for r in results]
        # a plain product cannot tell the on-topic reply from the other once the rubric gives 0
        assert rewards == ([0.0, 0.0] if floor == 0.0 else [0.5 * Gate(1.0, 0.0)(4.0), 0.5 * 0.5]), rewards


def test_replies_the_guards_settle_are_not_read_and_a_failed_read_fails_that_reply() -> None:
    model = OverlapModel(fail_on="boom")
    results = _reward(ContextFit(model), 2).score_batch([("a", "   "), ("a", "boom"), ("a", "a")])
    assert results[0].reward == 0.0 and results[0].context_fit is None  # empty: settled without a model
    assert results[1].reward is None and results[1].error is not None
    assert results[1].error.startswith("context fit failed") and results[1].failure is not None
    assert results[1].failure.stage == "context_fit"
    assert results[2].reward is not None and results[2].context_fit is not None
    assert all(reply != "   " for _, reply in model.reads)


def test_the_async_path_gives_the_same_rewards() -> None:
    items = [("my dog died", "dog"), ("my dog died", "exams")]
    sync = _reward(ContextFit(OverlapModel()), 2).score_batch(items)
    async_ = asyncio.run(_reward(ContextFit(OverlapModel()), 2).ascore_batch(items))
    assert [r.reward for r in sync] == [r.reward for r in async_]


def test_trl_calls_log_the_mean_context_fit() -> None:
    logged: dict[str, float] = {}
    reward = _reward(ContextFit(OverlapModel(), gate=Gate(slope=1.0, intercept=0.0)), 2)
    prompts = [[{"role": "user", "content": "my dog died"}]] * 2
    rewards = reward(prompts, ["dog", "exams"], log_metric=lambda name, value: logged.__setitem__(name, value))
    assert logged["care/context_fit"] == pytest.approx((Gate(1.0, 0.0)(2.0) + 0.5) / 2)
    half = 0.5 + 0.5 * 5 / 6
    assert rewards == [pytest.approx(half * Gate(1.0, 0.0)(2.0)), pytest.approx(half * 0.5)]


def test_context_fit_is_on_only_when_asked_for() -> None:
    from care_sdk.bundled.context_fit import context_fit_for

    fit = ContextFit(OverlapModel())
    assert context_fit_for(fit) is fit  # an object is used as given
    assert context_fit_for("off") is None and context_fit_for(None) is None
    with pytest.raises(ConfigError, match="'auto' is gone"):
        context_fit_for("auto")
    assert AdaptiveReward.from_backend(ScriptedBackend([])).context_fit is None
    assert AdaptiveReward.from_backend(ScriptedBackend([]), context_fit=fit).context_fit is fit
    assert AdaptiveReward.from_backend(ScriptedBackend([]), add_ons=AddOns(context_fit=fit)).context_fit is fit
    with pytest.raises(ConfigError, match="context-fit is asked for twice"):
        AdaptiveReward.from_backend(ScriptedBackend([]), add_ons=AddOns(context_fit=fit), context_fit=fit)


def test_the_quality_variants_share_one_read_of_each_reply() -> None:
    from care_lab.bench.variants import Item, VariantScorer
    from care_sdk import RubricGenerator
    from care_sdk.testing import rubric_json

    def script(req: Any) -> str:
        if "scores" in req.json_schema["properties"]:
            return evaluation_json([5, 5, 3, 3, 1, 1])
        return rubric_json({"cognitive": 2, "affective": 1, "proactive": 1})

    model = OverlapModel()
    backend = ScriptedBackend(script)
    fit = ContextFit(model, gate=Gate(slope=1.0, intercept=0.0))
    variants = ["care", "fixed_rubric"]
    scorer = VariantScorer(RubricGenerator(backend), RubricEvaluator(backend), variants, context_fit=fit)
    context = (Message(role="user", content="my dog died"),)
    records = scorer.score([Item(key="k", context=context, reply="dog died")])[0]
    gate = Gate(1.0, 0.0)(4.0)
    assert records["care"]["context_fit"] == records["fixed_rubric"]["context_fit"] == pytest.approx(gate)
    assert records["fixed_rubric"]["reward"] == pytest.approx(gate * (0.5 + 0.5 * 0.5))
    assert len(model.reads) == 2  # one conditional and one baseline read for both variants
