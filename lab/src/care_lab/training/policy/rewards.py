"""The policy's GRPO reward: CARE per turn, folded per episode, logged per term and written to JSONL.

- Single turn: each completion is one reply to a dialogue context; its reward is the CARE reward
  of that reply (rubric of the context, applied by the evaluator).
- Multi turn: each completion is a whole episode with the simulated user; every policy turn is
  scored against the context at that turn (its own rubric) and the turn rewards are folded into
  the episode reward by :class:`~care_sdk.trajectory.TrajectoryReward` (``mean``, ``last`` or
  ``discounted``).

A sample that cannot be scored gets ``None`` (TRL leaves it out of the group baseline), never 0.
Besides TRL's own ``rewards/care_reward/*``, the reward logs ``care/score/<dimension>``,
``care/weight/<dimension>`` and ``care/failed`` per step, and, for episodes, ``care/episode/turns``
and the share of each end reason.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from care_lab.simulation.episodes import Episode
from care_sdk.integrations.trl import report_to_trainer, trl_items
from care_sdk.reward import AdaptiveReward
from care_sdk.score_files import turn_record
from care_sdk.trajectory import Aggregation, TrajectoryResult, TrajectoryReward
from care_sdk.types import Message, RewardResult, as_messages
from care_sdk.variants import Variant

if TYPE_CHECKING:
    from care_lab.training.policy.curriculum import BoundaryCurriculum

__all__ = ["EpisodeRecorder", "PolicyReward", "Variant"]

END_REASONS = ("user_ended", "max_turns", "simulator_error", "policy_error")


class EpisodeRecorder:
    """Writes what the reward saw: one dialogue a line and one scored turn a line.

    ``dialogues.jsonl`` lines are ``{"id", "messages", ...}`` (``care score`` reads them as
    input); ``turns.jsonl`` lines are ``care score`` output records plus ``turn_number``,
    ``variant`` and ``step`` (the plotting tools read them). With several processes each writes
    its own pair of files (``.rank<N>`` before the suffix).

    Examples:
        >>> import tempfile
        >>> rec = EpisodeRecorder(tempfile.mkdtemp(), variant="full")
        >>> rec.dialogues_path.name
        'dialogues.jsonl'
    """

    def __init__(
        self, directory: str | Path, *, variant: str, emotions: Mapping[str, str | None] | None = None
    ) -> None:
        rank = os.environ.get("RANK", "0")
        suffix = "" if rank == "0" else f".rank{rank}"
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.dialogues_path = self.directory / f"dialogues{suffix}.jsonl"
        self.turns_path = self.directory / f"turns{suffix}.jsonl"
        self.variant = variant
        self.emotions = dict(emotions or {})

    def write(
        self,
        dialogue_id: str,
        messages: Sequence[Message],
        result: TrajectoryResult,
        *,
        step: int | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one dialogue and its scored turns."""
        head: dict[str, Any] = {"id": dialogue_id}
        if step is not None:
            head["step"] = step
        emotion = self.emotions.get(str((extra or {}).get("profile_id")))
        with self.dialogues_path.open("a", encoding="utf-8") as fh:
            line = {
                **head,
                "messages": [m.model_dump() for m in messages],
                "reward": result.reward,
                "turn_rewards": [t.reward for t in result.turns],
                "error": result.error,
                "variant": self.variant,
                **(extra or {}),
            }
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
        with self.turns_path.open("a", encoding="utf-8") as fh:
            for number, (index, turn) in enumerate(zip(result.turn_indices, result.turns, strict=True), start=1):
                record = {**turn_record(dialogue_id, index, turn), "turn_number": number, "variant": self.variant}
                if step is not None:
                    record["step"] = step
                if emotion:
                    record["emotion"] = emotion
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")

    def write_episode(self, episode: Episode, result: TrajectoryResult, *, step: int | None = None) -> None:
        """Append a rolled-out episode and its scored turns, with its profile, end reason and emotions.

        Examples:
            >>> import json, tempfile
            >>> rec = EpisodeRecorder(tempfile.mkdtemp(), variant="full")
            >>> episode = Episode(id="e1", profile_id="p", messages=[{"role": "user", "content": "hi"}],
            ...                   emotions=[None], end_reason="user_ended")
            >>> rec.write_episode(episode, TrajectoryResult(reward=None, how="mean", error="no turns"))
            >>> json.loads(rec.dialogues_path.read_text())["end_reason"]
            'user_ended'
        """
        extra = {
            "profile_id": episode.profile_id,
            "end_reason": episode.end_reason,
            "end_error": episode.error,
            "emotions": list(episode.emotions),
        }
        self.write(episode.id, episode.messages, result, step=step, extra=extra)


class PolicyReward:
    """CARE as the policy's TRL reward function, for single-turn replies or whole episodes.

    Args:
        reward: the per-turn CARE reward (any variant).
        multi_turn: score the ``episode`` field that the multi-turn rollout adds to each sample,
            instead of (context, completion) pairs.
        how: how turn rewards become the episode reward (``mean``, ``last``, ``discounted``).
        gamma: the discount of ``discounted``.
        recorder: where to write scored dialogues and turns (``None``: nowhere).
        curriculum: a :class:`~care_lab.training.policy.curriculum.BoundaryCurriculum` that records
            each scenario's pass rate from these rewards (no extra rollouts) and whose metrics are logged.
        scenario_key: the dataset column that names a sample's scenario for the curriculum.

    Examples:
        >>> from care_sdk import RubricEvaluator, Rubric
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json
        >>> care = AdaptiveReward(evaluator=RubricEvaluator(ScriptedBackend(lambda r: evaluation_json([3] * 6))),
        ...                       rubric=Rubric.uniform_fixed())
        >>> episode = Episode(id="e", profile_id="p", end_reason="max_turns", messages=[
        ...     {"role": "user", "content": "I'm sad."}, {"role": "assistant", "content": "Why?"}])
        >>> PolicyReward(care, multi_turn=True)(["p"], ["c"], episode=[episode.model_dump(mode="json")])
        [0.5]
    """

    def __init__(
        self,
        reward: AdaptiveReward,
        *,
        multi_turn: bool,
        how: Aggregation = "mean",
        gamma: float = 0.9,
        recorder: EpisodeRecorder | None = None,
        curriculum: BoundaryCurriculum | None = None,
        scenario_key: str = "profile_id",
    ) -> None:
        self.reward = reward
        self.curriculum = curriculum
        self.scenario_key = scenario_key
        self.multi_turn = multi_turn
        self.trajectory = TrajectoryReward(reward, how=how, gamma=gamma)
        self.recorder = recorder
        self.__name__ = "care_reward"  # TRL names reward functions (and their metrics) by __name__

    @staticmethod
    def _step(kwargs: Mapping[str, Any]) -> int | None:
        state = kwargs.get("trainer_state")
        return int(state.global_step) if state is not None else None

    def _episodes(self, kwargs: Mapping[str, Any]) -> list[float | None]:
        raw = kwargs.get("episode")
        if raw is None:
            raise ValueError("multi-turn reward needs the 'episode' field that the policy rollout adds")
        episodes = [e if isinstance(e, Episode) else Episode.model_validate(e) for e in raw]
        results = self.trajectory.score_batch([e.to_dialogue() for e in episodes])
        turns = [t for r in results for t in r.turns]
        report_to_trainer(turns, kwargs)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and episodes:
            log_metric("care/episode/turns", sum(e.policy_turns for e in episodes) / len(episodes))
            log_metric("care/episode/failed", sum(r.reward is None for r in results) / len(results))
            for reason in END_REASONS:
                log_metric(f"care/episode/{reason}", sum(e.end_reason == reason for e in episodes) / len(episodes))
        log_extra = kwargs.get("log_extra")
        if callable(log_extra):
            log_extra("care/end_reason", [e.end_reason for e in episodes])
            log_extra("care/turn_rewards", [json.dumps([t.reward for t in r.turns]) for r in results])
        if self.recorder is not None:
            step = self._step(kwargs)
            for episode, result in zip(episodes, results, strict=True):
                self.recorder.write_episode(episode, result, step=step)
        return [r.reward for r in results]

    def _replies(
        self, prompts: Sequence[Any], completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> list[float | None]:
        items = trl_items(prompts, completions, kwargs, "context")
        results = self.reward.score_batch(items)
        report_to_trainer(results, kwargs)
        if self.recorder is not None:
            step = self._step(kwargs)
            ids = kwargs.get("id") or [f"sample-{k}" for k in range(len(items))]
            for k, ((context, reply), result) in enumerate(zip(items, results, strict=True)):
                messages = [*as_messages(context), Message(role="assistant", content=reply)]
                folded = _single(result, len(messages) - 1)
                self.recorder.write(f"{ids[k]}@{step}:{k}", messages, folded, step=step)
        return [r.reward for r in results]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """TRL reward signature: one reward (or ``None``) per completion."""
        rewards = self._episodes(kwargs) if self.multi_turn else self._replies(prompts, completions, kwargs)
        if self.curriculum is not None:
            keys = kwargs.get(self.scenario_key)
            if keys is None:
                raise ValueError(f"the curriculum needs the dataset column {self.scenario_key!r}")
            self.curriculum.observe(keys, rewards, step=self._step(kwargs))
            log_metric = kwargs.get("log_metric")
            if callable(log_metric):
                for name, value in self.curriculum.metrics().items():
                    log_metric(name, value)
        return rewards

    def __repr__(self) -> str:
        return f"PolicyReward({self.reward!r}, multi_turn={self.multi_turn}, how={self.trajectory.how!r})"


def _single(result: RewardResult, index: int) -> TrajectoryResult:
    return TrajectoryResult(
        reward=result.reward,
        how="last",
        turn_indices=(index,),
        turns=(result,),
        error=None if result.reward is not None else f"turn at message {index}: {result.error}",
    )
