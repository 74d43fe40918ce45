"""The training audit: sampling, the reference off the training path, trends and alarms, canaries, the log,
per-dimension advantages in the TRL and verl integrations, and every logged key in a real TRL GRPO step."""

from __future__ import annotations

import json
import logging
import math
import pickle
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from care_sdk import AdaptiveReward, Rubric, RubricEvaluator, RubricGenerator
from care_sdk.advantages import per_dimension_advantages, zero_spread_share
from care_sdk.audit import AUDIT_KEYS, Audit, AuditAlarm
from care_sdk.canaries import DEFAULT_CANARIES, Canary
from care_sdk.errors import ConfigError
from care_sdk.integrations.trl import per_dimension
from care_sdk.report import build_report
from care_sdk.report.audit import read_audit
from care_sdk.testing import ScriptedBackend, candidate_reply, evaluation_json, rubric_json
from care_sdk.types import RewardResult
from care_sdk.types import fixed_criteria as fixed_criteria_list

CONTEXTS = ["I failed my driving test again.", "My cat died last week.", "I can't sleep before exams."]


def pays_length(request: Any) -> str:
    """A judge that pays for length only: the gameable reward."""
    return evaluation_json([min(5, 1 + len(candidate_reply(request)) // 20)] * 6)


TEXT = (
    "That sounds really hard and I am sorry it happened again after all the practice you put in before "
    "the day itself came around so quickly this time. What part of the test felt the worst for you, the "
    "moment it went wrong or the waiting afterwards? Maybe we could think about what you would want to "
    "try differently next time, and who could sit with you in the car for a few extra lessons beforehand."
)
PARAGRAPH = TEXT.split()


def batch(n_groups: int = 3, size: int = 4, grow: int = 0) -> tuple[list[str], list[str]]:
    """Groups of ``size`` replies to one context each, reply k of a group ``2 + 6k + grow`` words long."""
    prompts = [CONTEXTS[g % len(CONTEXTS)] for g in range(n_groups) for _ in range(size)]
    replies = [" ".join(PARAGRAPH[: 2 + 6 * k + grow]) for _ in range(n_groups) for k in range(size)]
    return prompts, replies


def length_reward(audit: Audit | None = None) -> AdaptiveReward:
    return AdaptiveReward(
        evaluator=RubricEvaluator(ScriptedBackend(pays_length)), rubric=Rubric.uniform_fixed(), audit=audit
    )


class Hooks:
    def __init__(self) -> None:
        self.metrics: dict[str, list[float]] = {}

    def log_metric(self, name: str, value: float) -> None:
        self.metrics.setdefault(name, []).append(value)


def test_a_fraction_of_each_batch_goes_to_the_reference_as_whole_groups() -> None:
    seen: list[list[tuple[Any, str]]] = []

    def reference(items: list[tuple[Any, str]]) -> list[float]:
        seen.append(items)
        return [0.25] * len(items)

    audit = Audit(reference, fraction=0.3, max_wait_s=10)
    reward = length_reward(audit)
    hooks = Hooks()
    prompts, replies = batch()
    reward(prompts, replies, log_metric=hooks.log_metric)
    assert len(seen) == 1 and len(seen[0]) == 4  # 30% of 12 = 4 replies: one whole group of 4
    assert len({tuple(m.content for m in context) for context, _ in seen[0]}) == 1
    record = audit.history[0]
    assert record["sampled"] == 4 and record["groups"] == 3 and record["replies"] == 12
    assert record["gap"] == pytest.approx(record["proxy"] - 0.25)
    assert record["rank_agreement"] is None  # the reference ties every pair
    assert hooks.metrics["care/audit/gap"] == [pytest.approx(record["gap"])]
    assert hooks.metrics["care/audit/length_corr"][0] > 0.9


def test_the_step_never_waits_past_the_bound_and_late_results_fold_in_later() -> None:
    release = threading.Event()

    def slow_reference(items: list[tuple[Any, str]]) -> list[float]:
        release.wait(5)
        return [0.5] * len(items)

    audit = Audit(slow_reference, fraction=1.0, max_wait_s=0.2)
    reward = length_reward(audit)
    hooks = Hooks()
    prompts, replies = batch(n_groups=1)
    started = time.perf_counter()
    reward(prompts, replies, log_metric=hooks.log_metric)
    assert time.perf_counter() - started < 2.0
    assert hooks.metrics["care/audit/wait_s"][0] == pytest.approx(0.2, abs=0.15)
    assert hooks.metrics["care/audit/pending"] == [1.0] and "care/audit/gap" not in hooks.metrics
    release.set()
    folded = audit.close(timeout=5)
    assert [r["step"] for r in folded] == [1] and folded[0]["reference"] == 0.5


def test_a_full_queue_skips_sampling_instead_of_queueing() -> None:
    release = threading.Event()
    audit = Audit(lambda items: (release.wait(5), [0.5] * len(items))[1], fraction=1.0, max_pending=1)
    reward = length_reward(audit)
    prompts, replies = batch(n_groups=1)
    reward(prompts, replies)
    reward(prompts, replies)
    release.set()
    records = audit.close(timeout=5)
    assert [r["skipped"] for r in records] == [False, True] and records[1]["sampled"] == 0


def test_rank_agreement_counts_pairs_both_judges_order() -> None:
    # the reference reverses the proxy's order in one group: agreement 0
    audit = Audit(lambda items: [1.0 - len(reply) / 100 for _, reply in items], fraction=1.0, max_wait_s=5)
    reward = length_reward(audit)
    prompts, replies = batch(n_groups=1)
    reward(prompts, replies)
    assert audit.history[0]["rank_agreement"] == 0.0
    audit2 = Audit(lambda items: [len(reply) / 100 for _, reply in items], fraction=1.0, max_wait_s=5)
    length_reward(audit2)(prompts, replies)
    assert audit2.history[0]["rank_agreement"] == 1.0


def test_a_rising_gap_raises_one_alarm_with_log_line_metric_callback_and_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raised: list[AuditAlarm] = []
    log = tmp_path / "audit.jsonl"
    audit = Audit(
        lambda items: [0.2] * len(items),
        fraction=1.0,
        max_wait_s=5,
        window=3,
        gap_trend_threshold=0.02,
        on_alarm=raised.append,
        log_path=log,
    )
    reward = length_reward(audit)
    hooks = Hooks()

    class State:
        global_step = 0

    with caplog.at_level(logging.WARNING, logger="care_sdk.audit"):
        for step in range(1, 7):
            State.global_step = step
            prompts, replies = batch(n_groups=1, grow=4 * step)  # replies grow: the length-paying proxy rises
            reward(prompts, replies, log_metric=hooks.log_metric, trainer_state=State)
    assert [a.kind for a in raised] == ["gap_trend"]  # raised once, not again while it holds
    assert raised[0].step == 3  # the first step with three gaps in the window
    assert audit.alarms == raised
    assert any("audit alarm at step 3: gap_trend" in r.message for r in caplog.records)
    assert hooks.metrics["care/audit/alarm"][:3] == [0.0, 0.0, 1.0]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines[0]["kind"] == "config" and lines[0]["thresholds"]["gap_trend"] == 0.02
    assert [line["step"] for line in lines[1:]] == [1, 2, 3, 4, 5, 6]
    assert lines[3]["alarms"] == ["gap_trend"] and lines[1]["alarms"] == []


def test_the_plain_length_blind_reward_raises_no_alarm() -> None:
    judge = ScriptedBackend(lambda r: evaluation_json([3] * 6))
    audit = Audit(
        lambda items: [0.5] * len(items),
        fraction=1.0,
        max_wait_s=5,
        window=3,
        gap_threshold=0.2,
        gap_trend_threshold=0.02,
        length_threshold=0.5,
    )
    reward = AdaptiveReward(evaluator=RubricEvaluator(judge), rubric=Rubric.uniform_fixed(), audit=audit)
    for step in range(6):
        reward(*batch(n_groups=2, grow=4 * step))
    assert audit.alarms == [] and audit.history[-1]["gap"] == 0.0
    assert audit.history[-1]["length_corr"] is None  # a constant reward has no correlation
    assert audit.history[-1]["zero_std_groups"] == 1.0


def test_length_and_share_alarms() -> None:
    audit = Audit(None, window=2, length_threshold=0.8, share_threshold=0.99)
    reward = length_reward(audit)
    for _ in range(3):
        reward(*batch(n_groups=2))
    assert [a.kind for a in audit.alarms] == ["length_corr"]  # uniform shares: no share correlation


def test_canaries_are_scored_beside_a_group_with_the_training_reward() -> None:
    judge = ScriptedBackend(pays_length)
    canaries = [Canary("long", " ".join(PARAGRAPH)), Canary("short", "no")]
    audit = Audit(None, canaries=canaries, canaries_per_step=2, window=2, canary_threshold=0.5, max_wait_s=5)
    reward = AdaptiveReward(evaluator=RubricEvaluator(judge), rubric=Rubric.uniform_fixed(), audit=audit)
    hooks = Hooks()
    for _ in range(2):
        reward(*batch(n_groups=1), log_metric=hooks.log_metric)
    record = audit.history[-1]
    assert record["canaries"] == ["long", "short"]
    assert record["canary_scores"][0] == 1.0 and record["canary_rate"] == 0.5  # the long one beats the median
    assert hooks.metrics["care/audit/canary_rate"] == [0.5, 0.5]
    assert [a.kind for a in audit.alarms] == ["canary_rate"]
    texts = [candidate_reply(r) for r in judge.requests]
    assert "no" in texts and " ".join(PARAGRAPH) in texts


def test_default_canaries_cover_the_families_and_judge_directed_ones_are_guarded() -> None:
    assert {c.family for c in DEFAULT_CANARIES} >= {"dismissive", "empty", "judge_directed", "platitude", "one_word"}
    judge = ScriptedBackend(lambda r: evaluation_json([5] * 6))  # a judge that pays everything
    reward = AdaptiveReward(evaluator=RubricEvaluator(judge), rubric=Rubric.uniform_fixed())
    directed = [c.text for c in DEFAULT_CANARIES if c.family == "judge_directed"]
    assert [r.reward for r in reward.score_batch([("I'm sad.", t) for t in directed])] == [0.0] * len(directed)


def test_a_backend_reference_judges_with_the_fixed_rubric() -> None:
    reference = ScriptedBackend(lambda r: evaluation_json([2] * 6))
    audit = Audit(reference, fraction=1.0, max_wait_s=5)
    gen = ScriptedBackend(lambda r: rubric_json({"cognitive": 3, "affective": 1, "proactive": 1}))
    reward = AdaptiveReward(RubricGenerator(gen), RubricEvaluator(ScriptedBackend(pays_length)), audit=audit)
    reward(*batch(n_groups=1))
    assert audit.history[0]["reference"] == 0.25
    asked = reference.requests[0].messages[-1].content
    assert all(c.text in asked for c in fixed_criteria_list())  # the fixed criteria, not the generated ones
    assert not any(r.purpose == "rubric" for r in reference.requests)


def test_a_failing_reference_is_logged_and_training_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def broken(items: list[tuple[Any, str]]) -> list[float]:
        raise RuntimeError("judge down")

    audit = Audit(broken, fraction=1.0, max_wait_s=5)
    reward = length_reward(audit)
    with caplog.at_level(logging.WARNING, logger="care_sdk.audit"):
        assert len(reward(*batch(n_groups=1))) == 4
    assert audit.history[0]["error"] == "RuntimeError: judge down" and "gap" not in audit.history[0]
    assert "judge down" in caplog.text


def hashed_scores(request: Any, salt: str) -> str:
    """A judge whose criterion scores follow a hash of the reply: deterministic, and rarely tied between replies."""
    reply = candidate_reply(request)
    return evaluation_json([1 + zlib.crc32(f"{salt}{i}{reply}".encode()) % 5 for i in range(6)])


def judges_three(request: Any) -> str:
    return evaluation_json([3] * 6)


def test_a_reward_with_an_audit_pickles_by_configuration() -> None:
    audit = Audit(ScriptedBackend(judges_three), fraction=1.0, max_wait_s=5)
    reward = length_reward(audit)
    reward(*batch(n_groups=1))
    copy = pickle.loads(pickle.dumps(reward))
    assert copy.audit is not None and copy.audit.history == [] and copy.audit.fraction == 1.0
    copy(*batch(n_groups=1))
    assert copy.audit.history[0]["reference"] == 0.5


@pytest.mark.parametrize(
    ("options", "field"),
    [({"fraction": 0.0}, "fraction"), ({"fraction": 1.5}, "fraction"), ({"window": 1}, "window")],
)
def test_bad_settings_are_refused(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        Audit(None, **options)


def test_canary_texts_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"canaries\[0\]"):
        Audit(None, canaries=[""])


# -- per-dimension advantages -----------------------------------------------------------------------


def dims_result(c: float, a: float, p: float, weights: dict[str, float] | None = None) -> RewardResult:
    rubric = Rubric.uniform_fixed().with_weights(weights or {"cognitive": 1, "affective": 1, "proactive": 1})
    scores = {"cognitive": c, "affective": a, "proactive": p}
    return RewardResult(
        reward=sum(rubric.weights[d] * scores[d.value] for d in rubric.weights), rubric=rubric, dimension_scores=scores
    )


def test_per_dimension_advantages_standardise_each_dimension_within_its_group() -> None:
    weights = {"cognitive": 2, "affective": 1, "proactive": 1}
    group = [dims_result(1.0, 0.1, 0.5, weights), dims_result(0.0, 0.2, 0.5, weights)]
    other = [dims_result(0.3, 0.3, 0.3), dims_result(0.3, 0.3, 0.3)]
    values = per_dimension_advantages([*group, *other], ["a", "a", "b", "b"])
    # cognitive z = +-1 weighted 0.5, affective z = -+1 weighted 0.25, proactive ties
    assert values == [0.25, -0.25, 0.0, 0.0]
    assert zero_spread_share([r.reward for r in [*group, *other]], ["a", "a", "b", "b"]) == 0.5


def test_trl_per_dimension_option_logs_both_zero_std_shares() -> None:
    # the weighted rewards tie (2/3 each); per dimension the second reply leads on two of three
    judge = ScriptedBackend(
        lambda r: evaluation_json([5, 5, 3, 3, 3, 3] if "?" in candidate_reply(r) else [1, 1, 5, 5, 5, 5])
    )
    reward = AdaptiveReward(evaluator=RubricEvaluator(judge), rubric=Rubric.uniform_fixed())
    hooks = Hooks()
    values = per_dimension(reward)(["I'm sad."] * 2, ["Why?", "Sorry."], log_metric=hooks.log_metric)
    assert [r.reward for r in reward.last_results] == pytest.approx([2 / 3, 2 / 3])
    assert values == [-0.333333, 0.333333]
    assert hooks.metrics["care/weighted/zero_std"] == [1.0]
    assert hooks.metrics["care/per_dimension/zero_std"] == [0.0]
    assert hooks.metrics["care/failed"] == [0.0]  # the reward's own metrics still flow


def test_verl_per_dimension_and_audit_options() -> None:
    from care_sdk.integrations.verl import compute_score, compute_score_batch, make_row

    gen = ScriptedBackend(lambda r: rubric_json({"cognitive": 1, "affective": 1, "proactive": 1}))

    def backend_script(request: Any) -> str:
        return gen.generate([request])[0].text if request.purpose == "rubric" else pays_length(request)

    backend = ScriptedBackend(backend_script)
    rows = [make_row(CONTEXTS[0], index=i) for i in range(3)] + [make_row(CONTEXTS[1], index=3)]
    replies = ["short", "a much longer reply than that one", "mid length one", "alone"]
    reference = ScriptedBackend(lambda r: evaluation_json([3] * 6))
    out = compute_score_batch(
        [r["data_source"] for r in rows],
        replies,
        None,
        [r["extra_info"] for r in rows],
        backend=backend,
        advantages="per_dimension",
        audit=reference,
        audit_options={"fraction": 1.0, "max_wait_s": 5},
    )
    assert out[3]["score"] == 0.0  # a group of one
    assert out[1]["score"] > 0 > out[0]["score"]
    assert out[0]["care_reward"] < out[1]["care_reward"]
    assert all(set(o) == set(out[0]) for o in out)
    assert out[0]["care_audit_reference"] == 0.5 and out[0]["care_audit_sampled"] == 4
    assert {k for k in out[0] if k.startswith("care_audit_")} == {
        "care_audit_" + k.replace("/", "_") for k in AUDIT_KEYS
    }
    assert math.isnan(out[0]["care_audit_canary_rate"])
    with pytest.raises(ConfigError, match="compute_score_batch"):
        compute_score(
            rows[0]["data_source"], "x", None, rows[0]["extra_info"], backend=backend, advantages="per_dimension"
        )
    with pytest.raises(ConfigError, match="advantages"):
        compute_score_batch(["x"], ["y"], None, [rows[0]["extra_info"]], backend=backend, advantages="gdpo")


# -- the report ----------------------------------------------------------------------------------------


def test_the_report_draws_the_audit_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "audit.jsonl"
    audit = Audit(
        lambda items: [0.2] * len(items),
        fraction=1.0,
        max_wait_s=5,
        window=3,
        gap_threshold=0.1,
        canaries=True,
        log_path=log,
    )
    reward = length_reward(audit)
    for step in range(4):
        reward(*batch(n_groups=2, grow=step))
    page, data = build_report([], audit=log)
    assert data["audit"]["steps"] == 4 and data["audit"]["first_alarms"] == {"gap": 3}
    assert page.count("<svg") >= 6 and "Training audit (audit.jsonl)" in page and "gap at step 3" in page
    assert read_audit(log).steps[0]["canaries"]

    from care_sdk.cli import main

    out = tmp_path / "r.html"
    assert main(["report", "--audit", str(log), "--out", str(out)]) == 0
    assert "Training audit" in out.read_text()
    assert main(["report", "--out", str(out)]) == 2


# -- a real TRL GRPO step ------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_audit_key_is_logged_in_a_real_grpo_step(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    from care_lab.training.models import tiny_grpo_trainer

    log = tmp_path / "audit.jsonl"
    audit = Audit(
        ScriptedBackend(lambda r: hashed_scores(r, "reference")),
        fraction=1.0,
        max_wait_s=30,
        window=2,
        canaries=True,
        gap_threshold=-1.0,  # holds once two batches are in: the alarm key is logged as 1
        log_path=log,
    )
    gen = ScriptedBackend(lambda r: rubric_json({"cognitive": 2, "affective": 1, "proactive": 1}))
    proxy = ScriptedBackend(lambda r: hashed_scores(r, "proxy"))
    reward = AdaptiveReward(RubricGenerator(gen), RubricEvaluator(proxy), audit=audit)
    rows = [{"prompt": [{"role": "user", "content": c}]} for c in CONTEXTS]
    trainer = tiny_grpo_trainer(reward, rows, tmp_path / "out")
    trainer.train()
    audit.close()
    steps = [h for h in trainer.state.log_history if "care/audit/wait_s" in h]
    assert len(steps) == 2
    for key in AUDIT_KEYS:
        assert any(f"care/audit/{key}" in h for h in steps), key
        for h in steps:
            if f"care/audit/{key}" in h:
                assert math.isfinite(h[f"care/audit/{key}"]), key
    assert steps[0]["care/audit/alarm"] == 0.0 and steps[-1]["care/audit/alarm"] == 1.0
    assert steps[0]["care/audit/sampled"] == 4.0 and 0.0 <= steps[0]["care/audit/reference"] <= 1.0
    records = read_audit(log).steps
    assert [r["step"] for r in records] == [0, 1]  # TRL's global_step while it scores a batch
    assert [a.kind for a in audit.alarms] == ["gap"] and audit.alarms[0].step == 1


def test_closing_early_cancels_what_has_not_started_and_folds_it_with_the_reason() -> None:
    release = threading.Event()
    audit = Audit(lambda items: (release.wait(5), [0.5] * len(items))[1], fraction=1.0)
    reward = length_reward(audit)
    prompts, replies = batch(n_groups=1)
    reward(prompts, replies)
    reward(prompts, replies)
    assert audit.close(timeout=0.1) == []  # the first is still running
    release.set()
    records = audit.close(timeout=5)
    assert records[0]["reference"] == 0.5
    assert records[1]["error"].startswith("cancelled") and "gap" not in records[1]
