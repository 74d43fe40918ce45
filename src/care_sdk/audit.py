"""Watching a reward while a policy trains on it: a reference judge on sampled rollouts, canaries, alarms.

:class:`Audit` is handed every batch a reward scored (``AdaptiveReward(..., audit=Audit(...))`` does
this on each trainer call). From each batch it:

- samples whole groups (replies to the same context) until ``fraction`` of the batch is covered and
  sends them to a **reference judge**, in a background thread: by default the fixed rubric (uniform
  weights, fixed criteria) on the backend you name, so it does not share the generator's blind spots;
- scores a few **canaries** (:mod:`care_sdk.canaries`, known-bad replies) in one sampled group's
  context with the training reward itself, in the same thread;
- computes, on the spot and over the whole batch, the reward's correlation with reply length and with
  each dimension's share of the reward (``w_d * s_d / sum_e w_e * s_e``), the mean spread of rewards
  within groups and the share of groups whose rewards all tie.

The trainer's step waits for the background work at most ``max_wait_s`` (0 by default: never); what
finished is folded in, in batch order, and logged: through the trainer's ``log_metric`` hook as
``<prefix>/audit/<key>`` (see :data:`AUDIT_KEYS`), and as one JSONL line per batch in ``log_path``
(``care report --audit`` draws it). When a trend over the last ``window`` folded batches crosses a
threshold you set, the audit raises an alarm: a warning log line, the ``audit/alarm`` metric, the
``alarms`` field of the JSONL line, and ``on_alarm(alarm)`` when given.

Examples:
    >>> from care_sdk import AdaptiveReward, Rubric, RubricEvaluator
    >>> from care_sdk.testing import ScriptedBackend, candidate_reply, evaluation_json
    >>> pays_length = ScriptedBackend(lambda r: evaluation_json([min(5, 1 + len(candidate_reply(r)) // 10)] * 6))
    >>> audit = Audit(lambda items: [0.25] * len(items), fraction=1.0, max_wait_s=5, gap_threshold=0.2)
    >>> reward = AdaptiveReward(evaluator=RubricEvaluator(pays_length), rubric=Rubric.uniform_fixed(), audit=audit)
    >>> logged = {}
    >>> reward(["I failed my exam."] * 3, ["Oh.", "That sounds hard, I'm sorry.", "x" * 60],
    ...        log_metric=lambda k, v: logged.__setitem__(k, v))
    [0.0, 0.5, 1.0]
    >>> round(logged["care/audit/gap"], 3), round(logged["care/audit/length_corr"], 2)
    (0.25, 1.0)
    >>> audit.close()  # after training: fold in what is still with the reference
    []
"""

from __future__ import annotations

import json
import logging
import math
import random
import statistics
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from care_sdk._audit_stats import (
    _finite,
    _groups,
    _rank_agreement,
    _slope,
    context_key,
    length_correlation,
    share_correlations,
)
from care_sdk.advantages import zero_spread_share
from care_sdk.canaries import DEFAULT_CANARIES, Canary, as_canaries
from care_sdk.errors import ConfigError
from care_sdk.types import DIMENSIONS, Messages, RewardResult

if TYPE_CHECKING:
    from care_sdk.backends import Backend
    from care_sdk.reward import AdaptiveReward

__all__ = ["AUDIT_KEYS", "Audit", "AuditAlarm", "context_key", "length_correlation", "share_correlations"]

logger = logging.getLogger(__name__)

Item = tuple[Messages, str]
"""One scored reply: its context (chat messages) and its text."""
Reference = Callable[[list[Item]], Sequence[float | None]]
"""A reference judge as a function: one score in [0, 1] (or ``None``) per ``(context, reply)``."""

AUDIT_KEYS: tuple[str, ...] = (
    "sampled",
    "proxy",
    "reference",
    "gap",
    "gap_trend",
    "rank_agreement",
    "reference_failed",
    "length_corr",
    *(f"share_corr/{d.value}" for d in DIMENSIONS),
    "group_std",
    "zero_std_groups",
    "canary_rate",
    "alarm",
    "pending",
    "wait_s",
)
"""Every metric the audit logs, as ``<prefix>/audit/<key>``: ``sampled`` (replies the reference judged),
``proxy`` and ``reference`` (their mean training and reference rewards), ``gap`` (proxy minus
reference), ``gap_trend`` (the gap's least-squares slope per step over the window), ``rank_agreement``
(share of reply pairs within a group, ordered by both judges, that both order the same way),
``reference_failed`` (share of sampled replies the reference could not score), ``length_corr`` (Pearson
correlation of reward and reply length over the batch), ``share_corr/<dimension>`` (of reward and that
dimension's share of it), ``group_std`` (mean standard deviation of rewards within a group),
``zero_std_groups`` (share of groups whose rewards all tie), ``canary_rate`` (share of canaries scored
at or above their group's median), ``alarm`` (1 while an alarm holds), ``pending`` (batches still
with the reference) and ``wait_s`` (seconds the step waited for it)."""

ALARM_KINDS = ("gap", "gap_trend", "length_corr", "share_corr", "canary_rate")


@dataclass(frozen=True)
class AuditAlarm:
    """A trend that crossed its threshold.

    Examples:
        >>> AuditAlarm("gap_trend", step=7, value=0.031, threshold=0.02).message
        'audit alarm at step 7: gap_trend 0.031 >= 0.02'
    """

    kind: str
    """What crossed: ``gap``, ``gap_trend``, ``length_corr``, ``share_corr/<dimension>`` or ``canary_rate``."""
    step: int
    """The step of the batch whose folding raised it."""
    value: float
    """The trend's value (a window mean, or the gap's slope per step)."""
    threshold: float
    """The threshold it reached."""

    @property
    def message(self) -> str:
        """The log line."""
        return f"audit alarm at step {self.step}: {self.kind} {self.value:.3g} >= {self.threshold:g}"


@dataclass
class _Pending:
    step: int
    batch: int
    record: dict[str, Any]
    sample: list[int]
    sample_groups: list[list[int]]
    """The sample's positions, grouped by context."""
    future: Future[tuple[list[float | None], list[float | None], float]] | None
    group_rewards: list[float]


@dataclass
class _State:
    executor: ThreadPoolExecutor | None = None
    pending: list[_Pending] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    active: set[str] = field(default_factory=set)
    batches: int = 0
    wrote_header: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class Audit:
    """A reference judge on sampled rollouts, canaries and alarms, off the training path.

    Args:
        reference: the reference judge. A backend spec or :class:`~care_sdk.Backend`: the fixed
            rubric on it (``reference_variant``); an :class:`~care_sdk.AdaptiveReward`: that reward;
            a function ``[(context, reply)] -> [score | None]``: used as it is; ``None``: no
            reference (length, share and canary checks only).
        fraction: the share of each batch's replies sent to the reference, sampled as whole groups
            (at least one group), so that rank agreement within a group can be measured.
        max_wait_s: the longest a step waits for the reference (0: never; what is not ready is
            folded in at a later step, or by :meth:`close`).
        window: how many folded batches a trend spans.
        gap_threshold: alarm when the mean gap (proxy minus reference) over the window reaches it.
        gap_trend_threshold: alarm when the gap's slope per step over the window reaches it.
        length_threshold: alarm when the mean correlation of reward and reply length reaches it.
        share_threshold: alarm when a dimension's mean share correlation reaches it.
        canaries: ``None`` (off), ``True`` (:data:`~care_sdk.canaries.DEFAULT_CANARIES`), or your
            texts / :class:`~care_sdk.canaries.Canary` objects.
        canaries_per_step: how many canaries (drawn in turn from the list) each batch scores.
        canary_threshold: alarm when the mean canary rate over the window reaches it.
        log_path: a JSONL file: one line per folded batch (and a first ``config`` line).
        on_alarm: called with each :class:`AuditAlarm` when it is raised (once, until it clears).
        seed: the sampling seed.
        max_pending: batches that may wait for the reference at once; past it a batch is not
            sampled (the step never queues work without bound).
        reference_variant: the variant built on a backend ``reference`` (``fixed_rubric`` by default).

    Raises:
        ConfigError: a value out of range (named).

    Examples:
        >>> audit = Audit(None, canaries=True)
        >>> audit.fraction, len(audit.canaries) > 10
        (0.05, True)
    """

    def __init__(
        self,
        reference: str | Backend | AdaptiveReward | Reference | None = None,
        *,
        fraction: float = 0.05,
        max_wait_s: float = 0.0,
        window: int = 5,
        gap_threshold: float | None = None,
        gap_trend_threshold: float | None = None,
        length_threshold: float | None = None,
        share_threshold: float | None = None,
        canaries: bool | Sequence[str | Canary] | None = None,
        canaries_per_step: int = 4,
        canary_threshold: float | None = None,
        log_path: str | Path | None = None,
        on_alarm: Callable[[AuditAlarm], None] | None = None,
        seed: int = 0,
        max_pending: int = 4,
        reference_variant: str = "fixed_rubric",
    ) -> None:
        if not 0.0 < fraction <= 1.0:
            raise ConfigError(f"Audit.fraction: {fraction} is not in (0, 1]")
        if max_wait_s < 0 or window < 2 or canaries_per_step < 1 or max_pending < 1:
            raise ConfigError("Audit: max_wait_s must be >= 0, window >= 2, canaries_per_step and max_pending >= 1")
        self.reference = self._reference(reference, reference_variant)
        self.fraction = fraction
        self.max_wait_s = max_wait_s
        self.window = window
        self.thresholds: dict[str, float | None] = {
            "gap": gap_threshold,
            "gap_trend": gap_trend_threshold,
            "length_corr": length_threshold,
            "share_corr": share_threshold,
            "canary_rate": canary_threshold,
        }
        """The alarm thresholds by kind (``None``: that alarm is off)."""
        self.canaries: tuple[Canary, ...] = (
            ()
            if canaries is None or canaries is False
            else DEFAULT_CANARIES
            if canaries is True
            else as_canaries(canaries)
        )
        self.canaries_per_step = canaries_per_step
        self.log_path = Path(log_path) if log_path is not None else None
        self.on_alarm = on_alarm
        self.seed = seed
        self.max_pending = max_pending
        self.alarms: list[AuditAlarm] = []
        """Every alarm raised so far, in order."""
        self._rng = random.Random(seed)
        self._state = _State()

    @staticmethod
    def _reference(reference: Any, variant: str) -> Reference | None:
        if reference is None:
            return None
        if callable(reference) and not hasattr(reference, "score_batch"):
            return cast("Reference", reference)
        from care_sdk.reward import AdaptiveReward

        judge = reference if isinstance(reference, AdaptiveReward) else None
        if judge is None:
            judge = AdaptiveReward.from_backend(reference, variant=variant, name="care_reference")
        return _RewardReference(judge)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_state"] = None  # threads, queues and history stay in the process that ran them
        state["alarms"] = []
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._state = _State()

    @property
    def history(self) -> list[dict[str, Any]]:
        """The folded records so far, one per batch, as written to ``log_path``."""
        return list(self._state.history)

    # -- the hook -------------------------------------------------------------------------------

    def observe(
        self,
        items: Sequence[Item],
        results: Sequence[RewardResult],
        *,
        reward: AdaptiveReward | None = None,
        step: int | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        prefix: str = "care",
    ) -> list[dict[str, Any]]:
        """Take one scored batch: sample it, start its reference and canary scoring, fold in what is ready.

        Args:
            items: the batch's ``(context, reply)`` pairs, contexts as chat messages.
            results: the reward's results, one per item.
            reward: the training reward (scores the canaries; none without it).
            step: the trainer's step (default: the number of batches seen).
            log_metric: the trainer's metric hook (TRL's ``log_metric``).
            prefix: metrics are logged as ``<prefix>/audit/<key>``.

        Returns:
            The records folded in during this call (possibly of earlier batches).
        """
        started = time.perf_counter()
        state = self._state
        state.batches += 1
        step = state.batches if step is None else step
        replies = [reply for _, reply in items]
        keys = [context_key(context) for context, _ in items]
        groups = _groups(keys)
        record: dict[str, Any] = {
            "kind": "step",
            "step": step,
            "batch": state.batches,
            "replies": len(items),
            "groups": len(groups),
            **self._batch_stats(replies, results, keys),
        }
        with state.lock:
            busy = len(state.pending) >= self.max_pending
        chosen: list[list[int]] = []
        if not busy and (self.reference is not None or (self.canaries and reward is not None)):
            chosen = self._sample(groups, len(items))
        sample = [i for members in chosen for i in members]
        positions, start = [], 0
        for members in chosen:
            positions.append(list(range(start, start + len(members))))
            start += len(members)
        record["sampled"] = len(sample) if self.reference is not None else 0
        record["skipped"] = busy
        first_group = chosen[0] if chosen else []
        group_rewards = [r for r in (results[i].reward for i in first_group) if r is not None]
        future = None
        if sample:
            if state.executor is None:
                state.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="care-audit")
            canaries = self._next_canaries() if reward is not None and group_rewards else []
            context = items[sample[0]][0]
            future = state.executor.submit(self._judge, [items[i] for i in sample], reward, context, canaries)
            record["canaries"] = [c.family for c in canaries]
        proxy = [results[i].reward for i in sample]
        record["proxy_scores"] = proxy
        with state.lock:
            state.pending.append(_Pending(step, state.batches, record, sample, positions, future, group_rewards))
        folded = self._fold(deadline=started + self.max_wait_s)
        wait_s = time.perf_counter() - started
        if log_metric is not None:
            for rec in folded:
                self._log(rec, log_metric, prefix)
            log_metric(f"{prefix}/audit/pending", float(len(state.pending)))
            log_metric(f"{prefix}/audit/wait_s", wait_s)
        return folded

    def close(self, timeout: float | None = 60.0) -> list[dict[str, Any]]:
        """Wait (at most ``timeout`` seconds) for the batches still with the reference, fold them in and stop.

        Call it after training (``trainer.train()``); the audit can be used again afterwards.

        Returns:
            The records folded in by this call.
        """
        state = self._state
        deadline = None if timeout is None else time.perf_counter() + timeout
        folded = self._fold(deadline=deadline)
        if state.executor is not None:
            state.executor.shutdown(wait=False, cancel_futures=True)
            state.executor = None
        return folded

    def __enter__(self) -> Audit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- parts -----------------------------------------------------------------------------------

    def _batch_stats(
        self, replies: Sequence[str], results: Sequence[RewardResult], keys: Sequence[str]
    ) -> dict[str, Any]:
        rewards = [r.reward for r in results]
        stds = []
        for members in _groups(keys).values():
            scored = [v for v in (rewards[i] for i in members) if v is not None]
            if len(scored) >= 2:
                stds.append(statistics.pstdev(scored))
        return {
            "length_corr": length_correlation(replies, results),
            "share_corr": share_correlations(results),
            "group_std": statistics.fmean(stds) if stds else None,
            "zero_std_groups": zero_spread_share(rewards, keys),
        }

    def _sample(self, groups: Mapping[Hashable, list[int]], n: int) -> list[list[int]]:
        """Whole groups, in a seeded random order, until ``fraction`` of the ``n`` replies is covered."""
        order = list(groups.values())
        self._rng.shuffle(order)
        want = max(1, math.ceil(self.fraction * n))
        out: list[list[int]] = []
        for members in order:
            out.append(members)
            if sum(len(m) for m in out) >= want:
                break
        return out

    def _next_canaries(self) -> list[Canary]:
        start = (self._state.batches - 1) * self.canaries_per_step
        return [
            self.canaries[(start + k) % len(self.canaries)]
            for k in range(min(self.canaries_per_step, len(self.canaries)))
        ]

    def _judge(
        self, sample: list[Item], reward: AdaptiveReward | None, context: Messages, canaries: list[Canary]
    ) -> tuple[list[float | None], list[float | None], float]:
        started = time.perf_counter()
        ref: list[float | None] = []
        if self.reference is not None:
            ref = [_finite(v) for v in self.reference(sample)]
            if len(ref) != len(sample):
                raise ConfigError(f"Audit reference returned {len(ref)} scores for {len(sample)} replies")
        canary_scores: list[float | None] = []
        if canaries and reward is not None:
            canary_scores = [r.reward for r in reward.score_batch([(context, c.text) for c in canaries])]
        return ref, canary_scores, time.perf_counter() - started

    def _fold(self, *, deadline: float | None) -> list[dict[str, Any]]:
        state = self._state
        folded: list[dict[str, Any]] = []
        while True:
            with state.lock:
                if not state.pending:
                    break
                head = state.pending[0]
            if head.future is not None and not head.future.done():
                remaining = None if deadline is None else deadline - time.perf_counter()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    head.future.exception(timeout=remaining)
                except TimeoutError:
                    break
            with state.lock:
                state.pending.pop(0)
            folded.append(self._finish(head))
        return folded

    def _finish(self, pending: _Pending) -> dict[str, Any]:
        record = pending.record
        ref: list[float | None] = []
        canary_scores: list[float | None] = []
        if pending.future is not None and pending.future.cancelled():
            record["error"] = "cancelled: the audit was closed before the reference finished"
        elif pending.future is not None:
            error = pending.future.exception()
            if error is not None:
                logger.warning("audit: the reference judge failed on step %s: %s", pending.step, error)
                record["error"] = f"{type(error).__name__}: {error}"
            else:
                ref, canary_scores, seconds = pending.future.result()
                record["audit_seconds"] = seconds
        proxy = record.pop("proxy_scores")
        if ref:
            pairs = [(p, r) for p, r in zip(proxy, ref, strict=True) if p is not None and r is not None]
            record["reference_scores"] = ref
            record["reference_failed"] = sum(r is None for r in ref) / len(ref)
            if pairs:
                record["proxy"] = statistics.fmean(p for p, _ in pairs)
                record["reference"] = statistics.fmean(r for _, r in pairs)
                record["gap"] = record["proxy"] - record["reference"]
            record["rank_agreement"] = _rank_agreement(pending.sample_groups, proxy, ref)
        if canary_scores:
            median = statistics.median(pending.group_rewards)
            judged = [s for s in canary_scores if s is not None]
            record["canary_scores"] = canary_scores
            record["canary_median"] = median
            record["canary_rate"] = sum(s >= median for s in judged) / len(judged) if judged else None
        self._state.history.append(record)
        record["gap_trend"] = _slope([(h["step"], h["gap"]) for h in self._window("gap")])
        record["alarms"] = self._alarms(record)
        record["alarm"] = float(bool(self._state.active))
        self._write(record)
        return record

    def _window(self, key: str) -> list[dict[str, Any]]:
        return [h for h in self._state.history if h.get(key) is not None][-self.window :]

    def _trend(self, kind: str, record: Mapping[str, Any]) -> dict[str, float]:
        """The value of each trend of ``kind`` over the window (none before ``min(3, window)`` points)."""
        need = min(3, self.window)
        if kind == "gap_trend":
            points = self._window("gap")
            value = record.get("gap_trend")
            return {kind: value} if len(points) >= need and value is not None else {}
        if kind == "share_corr":
            out = {}
            for d in DIMENSIONS:
                values = [h["share_corr"][d.value] for h in self._state.history if d.value in h.get("share_corr", {})]
                if len(values) >= need:
                    out[f"share_corr/{d.value}"] = statistics.fmean(values[-self.window :])
            return out
        values = [h[kind] for h in self._window(kind)]
        return {kind: statistics.fmean(values)} if len(values) >= need else {}

    def _alarms(self, record: Mapping[str, Any]) -> list[str]:
        state = self._state
        holding: list[str] = []
        for kind, threshold in self.thresholds.items():
            if threshold is None:
                continue
            for name, value in self._trend(kind, record).items():
                if value < threshold:
                    state.active.discard(name)
                    continue
                holding.append(name)
                if name in state.active:
                    continue
                state.active.add(name)
                alarm = AuditAlarm(name, step=int(record["step"]), value=value, threshold=threshold)
                self.alarms.append(alarm)
                logger.warning(alarm.message)
                if self.on_alarm is not None:
                    self.on_alarm(alarm)
        return holding

    def _write(self, record: Mapping[str, Any]) -> None:
        if self.log_path is None:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a", encoding="utf-8") as fh:
            if not self._state.wrote_header:
                self._state.wrote_header = True
                config = {"fraction": self.fraction, "window": self.window, "max_wait_s": self.max_wait_s}
                fh.write(json.dumps({"kind": "config", **config, "thresholds": self.thresholds}) + "\n")
            fh.write(json.dumps(record, allow_nan=False) + "\n")

    @staticmethod
    def _log(record: Mapping[str, Any], log_metric: Callable[[str, float], None], prefix: str) -> None:
        for key in ("sampled", "proxy", "reference", "gap", "gap_trend", "rank_agreement", "reference_failed"):
            if record.get(key) is not None:
                log_metric(f"{prefix}/audit/{key}", float(record[key]))
        for key in ("length_corr", "group_std", "zero_std_groups", "canary_rate", "alarm"):
            if record.get(key) is not None:
                log_metric(f"{prefix}/audit/{key}", float(record[key]))
        for dim, value in record.get("share_corr", {}).items():
            log_metric(f"{prefix}/audit/share_corr/{dim}", float(value))

    def __repr__(self) -> str:
        on = {k: v for k, v in self.thresholds.items() if v is not None}
        return (
            f"Audit(reference={self.reference!r}, fraction={self.fraction}, max_wait_s={self.max_wait_s}, "
            f"canaries={len(self.canaries)}, thresholds={on})"
        )


class _RewardReference:
    """A reward used as the reference judge: its rewards of the sampled replies."""

    def __init__(self, reward: AdaptiveReward) -> None:
        self.reward = reward

    def __call__(self, items: list[Item]) -> list[float | None]:
        return [r.reward for r in self.reward.score_batch(items)]

    def __repr__(self) -> str:
        return f"reference({self.reward.variant} on {self.reward.evaluator.backend!r})"
