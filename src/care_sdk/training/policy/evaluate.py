"""``care train eval-policy``: a policy against the simulated user on held-out profiles, judged by CARE.

Writes, under ``output_dir``:

- ``dialogues.jsonl``: one episode a line, ``{"id", "messages", "reward", "turn_rewards",
  "end_reason", ...}``; ``care score dialogues.jsonl`` re-scores it with any other reward;
- ``turns.jsonl``: one scored policy turn a line, in ``care score``'s output format plus
  ``turn_number``, ``variant`` (the run's ``label``) and ``emotion``; ``care plot`` reads it;
- ``summary.json``: the trajectory summary (see :class:`EvalSummary`).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from care_sdk.training._common import check_dir
from care_sdk.training.policy.components import BackendPool, build_reward, build_simulator, load_profiles
from care_sdk.training.policy.config import EvalPolicyConfig
from care_sdk.training.policy.rewards import EpisodeRecorder
from care_sdk.training.policy.rollout import BackendPolicy, run_episodes
from care_sdk.trajectory import TrajectoryReward
from care_sdk.types import DIMENSIONS

__all__ = ["EvalSummary", "evaluate_policy"]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass
class EvalSummary:
    """Per-dialogue and per-turn CARE rewards of an evaluation, summarised.

    Examples:
        >>> s = EvalSummary(label="p", dialogues=2, episode_rewards=[0.5, 0.7])
        >>> round(s.mean_episode_reward, 2)
        0.6
    """

    label: str
    """The evaluated policy's label."""
    dialogues: int = 0
    """Episodes rolled out."""
    episode_rewards: list[float] = field(default_factory=list)
    """Episode reward of every episode that got one."""
    failed_episodes: int = 0
    """Episodes without a reward (a weighted turn could not be scored)."""
    turn_rewards_by_number: dict[int, list[float]] = field(default_factory=dict)
    """Per policy-turn number (1, 2, ...): the turn rewards."""
    failed_turns: int = 0
    """Policy turns that could not be scored."""
    dimension_scores: dict[str, list[float]] = field(default_factory=lambda: {d.value: [] for d in DIMENSIONS})
    """Per dimension: the normalised score of every scored turn."""
    weights: dict[str, list[float]] = field(default_factory=lambda: {d.value: [] for d in DIMENSIONS})
    """Per dimension: the rubric weight of every scored turn."""
    end_reasons: dict[str, int] = field(default_factory=dict)
    """How many episodes ended each way."""
    final_emotions: list[int] = field(default_factory=list)
    """The simulated user's last emotion (0-100) of each episode where it rated one."""
    trajectory: str = "mean"
    """How turn rewards became episode rewards."""

    @property
    def mean_episode_reward(self) -> float | None:
        """Mean episode reward."""
        return _mean(self.episode_rewards)

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON-ready data (means, plus the raw lists)."""
        data = asdict(self)
        data["mean_episode_reward"] = self.mean_episode_reward
        data["median_episode_reward"] = statistics.median(self.episode_rewards) if self.episode_rewards else None
        data["mean_turn_reward_by_number"] = {n: _mean(v) for n, v in sorted(self.turn_rewards_by_number.items())}
        data["mean_dimension_scores"] = {d: _mean(v) for d, v in self.dimension_scores.items()}
        data["mean_weights"] = {d: _mean(v) for d, v in self.weights.items()}
        data["mean_final_emotion"] = _mean([float(e) for e in self.final_emotions])
        return data

    def table(self) -> str:
        """A plain-text summary table."""

        def fmt(value: float | None) -> str:
            return "-" if value is None else f"{value:.3f}"

        rows = [
            ("policy", self.label),
            ("episodes (failed)", f"{self.dialogues} ({self.failed_episodes})"),
            (f"mean episode reward ({self.trajectory})", fmt(self.mean_episode_reward)),
        ]
        for number, values in sorted(self.turn_rewards_by_number.items()):
            rows.append((f"mean reward, turn {number} (n={len(values)})", fmt(_mean(values))))
        rows.append(("unscored turns", str(self.failed_turns)))
        for dim, values in self.dimension_scores.items():
            rows.append((f"mean score {dim}", fmt(_mean(values))))
        for reason, count in sorted(self.end_reasons.items()):
            rows.append((f"ended: {reason}", str(count)))
        rows.append(("mean final emotion", fmt(_mean([float(e) for e in self.final_emotions]))))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def evaluate_policy(
    config: EvalPolicyConfig, *, pool: BackendPool | None = None, log: Callable[[str], None] = print
) -> EvalSummary:
    """Roll out the policy against the simulated user, score every turn with CARE, and write the results.

    Args:
        config: the evaluation's settings.
        pool: backends to use by spec (built from the config when omitted).
        log: where progress lines go.

    Raises:
        InputError: the profile data is missing or the split is empty.
        ConfigError: a backend spec is invalid.
    """
    pool = pool if pool is not None else BackendPool()
    out = check_dir(config.output_dir, "output_dir")
    profiles = load_profiles(config.users, config.split, config.data_dir)
    care = build_reward(config.reward, pool)
    trajectory = TrajectoryReward(care, how=config.episode.trajectory, gamma=config.episode.gamma)
    simulator = build_simulator(config.simulator, pool, seed=config.seed)
    policy = BackendPolicy(
        pool.get(config.policy, config.policy_options),
        max_tokens=config.policy_max_tokens,
        temperature=config.policy_temperature,
        seed=config.seed,
    )
    for name in ("dialogues.jsonl", "turns.jsonl"):
        (out / name).unlink(missing_ok=True)
    recorder = EpisodeRecorder(out, variant=config.label, emotions={p.id: p.emotion for p in profiles})
    summary = EvalSummary(label=config.label, trajectory=config.episode.trajectory)
    jobs = [(p, r) for p in profiles for r in range(config.episodes_per_profile)]
    log(f"eval-policy: {len(jobs)} episodes on {len(profiles)} {config.split} {config.users.source} profiles")
    for start in range(0, len(jobs), config.batch_size):
        batch = jobs[start : start + config.batch_size]
        episodes = run_episodes(
            [p for p, _ in batch],
            policy,
            simulator,
            max_turns=config.episode.max_turns,
            system_prompt=config.system_prompt,
            ids=[f"{p.id}#{r}" for p, r in batch],
        )
        results = trajectory.score_batch([e.to_dialogue() for e in episodes])
        for episode, result in zip(episodes, results, strict=True):
            recorder.write_episode(episode, result)
            summary.dialogues += 1
            summary.end_reasons[episode.end_reason] = summary.end_reasons.get(episode.end_reason, 0) + 1
            rated = [e for e in episode.emotions if e is not None]
            if rated:
                summary.final_emotions.append(rated[-1])
            if result.reward is None:
                summary.failed_episodes += 1
            else:
                summary.episode_rewards.append(result.reward)
            for number, turn in enumerate(result.turns, start=1):
                if turn.reward is None:
                    summary.failed_turns += 1
                    continue
                summary.turn_rewards_by_number.setdefault(number, []).append(turn.reward)
                for dim, value in (turn.dimension_scores or {}).items():
                    summary.dimension_scores[dim.value].append(value)
                if turn.rubric is not None:
                    for dim, weight in turn.rubric.weights.items():
                        summary.weights[dim.value].append(weight)
        log(f"eval-policy: {summary.dialogues}/{len(jobs)} episodes")
    (out / "summary.json").write_text(json.dumps(summary.to_json(), indent=2), encoding="utf-8")
    return summary
