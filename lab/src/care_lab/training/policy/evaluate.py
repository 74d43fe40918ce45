"""``care train eval-policy``: a policy against the simulated user on held-out profiles, judged independently.

By default (``judge.kind: independent``) every episode gets one verdict from an independent judge
(:class:`~care_lab.simulation.judge.DialogueJudge`: another model, its own prompt, no CARE rubric),
because the reward the policy was trained with cannot see the policy gaming it. With
``judge.kind: training_reward`` the CARE reward of the ``reward`` section scores every turn
instead, and the summary says that it is the training reward.

With ``user_types`` every profile is played once per simulated-user type (cooperative and the
adversarial types of :mod:`care_lab.simulation.adversarial`; episode ids carry ``@<type>``), and
with a ``reader`` every policy reply is read alone for the state it acknowledges: the summary's
``by_user_type`` holds, per type, the final emotions and each episode's consistency score
(:mod:`care_lab.simulation.consistency`).

Writes, under ``output_dir``:

- ``dialogues.jsonl``: one episode a line, ``{"id", "messages", "end_reason", "emotions", ...}``
  plus the judge's ``judge_score`` and ``verdict`` (independent), or ``reward`` and
  ``turn_rewards`` (training reward); ``care score dialogues.jsonl`` re-scores it with any reward;
- ``turns.jsonl`` (training reward only): one scored policy turn a line, in ``care score``'s
  output format plus ``turn_number``, ``variant`` (the run's ``label``) and ``emotion``;
- ``summary.json``: the summary (see :class:`EvalSummary`).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from care_lab.simulation.adversarial import with_user_types
from care_lab.simulation.consistency import StateReader
from care_lab.simulation.episodes import BackendPolicy, Episode, run_episodes
from care_lab.simulation.profiles import load_profiles
from care_lab.training._common import check_dir
from care_lab.training.policy.components import build_reward, build_simulator
from care_lab.training.policy.config import EvalPolicyConfig
from care_lab.training.policy.rewards import EpisodeRecorder
from care_sdk.backends import BackendPool
from care_sdk.errors import CareError
from care_sdk.trajectory import TrajectoryReward
from care_sdk.types import DIMENSIONS

if TYPE_CHECKING:
    from care_lab.simulation.judge import JudgeVerdict

__all__ = ["TRAINING_REWARD_LABEL", "EvalSummary", "evaluate_policy"]

TRAINING_REWARD_LABEL = "training reward (CARE, the reward the policy was trained with; blind to reward hacking)"
"""How summaries name the judge when ``judge.kind`` is ``training_reward``."""


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
    judge_kind: str = "training_reward"
    """``independent`` or ``training_reward`` (see :class:`~care_lab.training.policy.config.JudgeSettings`)."""
    judge: str = TRAINING_REWARD_LABEL
    """The judge: the independent judge's identity, or :data:`TRAINING_REWARD_LABEL`."""
    by_user_type: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """Per simulated-user type: ``final_emotions`` and, with a reader, ``tracking`` and ``direction``
    (each episode's consistency score and direction agreement, :mod:`care_lab.simulation.consistency`)
    and ``unread`` (one 1.0 per reply whose reading failed)."""
    judge_scores: list[int] = field(default_factory=list)
    """The independent judge's score (1-10) of every episode it judged."""
    failed_judgements: int = 0
    """Episodes whose verdict could not be had (left out of the mean, never counted as 0)."""

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
        data["mean_judge_score"] = _mean([float(x) for x in self.judge_scores])
        data["mean_by_user_type"] = {
            t: {k: _mean(v) if k != "unread" else len(v) for k, v in row.items()}
            for t, row in self.by_user_type.items()
        }
        return data

    def table(self) -> str:
        """A plain-text summary table."""

        def fmt(value: float | None) -> str:
            return "-" if value is None else f"{value:.3f}"

        rows = [("policy", self.label), ("judge", self.judge)]
        if self.judge_kind == "independent":
            rows += [
                ("episodes (unjudged)", f"{self.dialogues} ({self.failed_judgements})"),
                ("mean judge score (1-10)", fmt(_mean([float(x) for x in self.judge_scores]))),
            ]
        else:
            rows += [
                ("episodes (failed)", f"{self.dialogues} ({self.failed_episodes})"),
                (f"mean training reward ({self.trajectory})", fmt(self.mean_episode_reward)),
            ]
            for number, values in sorted(self.turn_rewards_by_number.items()):
                rows.append((f"mean training reward, turn {number} (n={len(values)})", fmt(_mean(values))))
            rows.append(("unscored turns", str(self.failed_turns)))
            for dim, values in self.dimension_scores.items():
                rows.append((f"mean score {dim}", fmt(_mean(values))))
        for reason, count in sorted(self.end_reasons.items()):
            rows.append((f"ended: {reason}", str(count)))
        rows.append(("mean final emotion", fmt(_mean([float(e) for e in self.final_emotions]))))
        names = {"final_emotions": "final emotion", "tracking": "consistency (tracking)", "direction": "direction"}
        if len(self.by_user_type) > 1 or any("unread" in row for row in self.by_user_type.values()):
            for user_type, row in self.by_user_type.items():
                for key, values in row.items():
                    if key in names:
                        rows.append((f"{user_type}: mean {names[key]} (n={len(values)})", fmt(_mean(values))))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def evaluate_policy(
    config: EvalPolicyConfig, *, pool: BackendPool | None = None, log: Callable[[str], None] = print
) -> EvalSummary:
    """Roll out the policy against the simulated user, judge every episode, and write the results.

    The judge is independent of the training reward unless ``config.judge.kind`` is
    ``training_reward`` (see the module docstring).

    Args:
        config: the evaluation's settings.
        pool: backends to use by spec (built from the config when omitted).
        log: where progress lines go.

    Raises:
        InputError: the profile data is missing or the split is empty.
        ConfigError: a backend spec is invalid.
    """
    from care_lab.simulation.judge import DialogueJudge

    pool = pool if pool is not None else BackendPool()
    out = check_dir(config.output_dir, "output_dir")
    profiles = with_user_types(load_profiles(config.users, config.split, config.data_dir), config.user_types)
    independent = config.judge.kind == "independent"
    judge = trajectory = None
    if independent:
        judge = DialogueJudge(
            pool.get(config.judge.backend, config.judge.options),
            max_tokens=config.judge.max_tokens,
            seed=config.judge.seed,
            max_attempts=config.judge.max_attempts,
        )
    else:
        care = build_reward(config.reward, pool)
        trajectory = TrajectoryReward(care, how=config.episode.trajectory, gamma=config.episode.gamma)
    simulator = build_simulator(config.simulator, pool, seed=config.seed)
    reader = None
    if config.reader is not None:
        reader = StateReader(
            pool.get(config.reader.backend, config.reader.options),
            max_tokens=config.reader.max_tokens,
            seed=config.seed,
            max_attempts=config.reader.max_attempts,
        )
    policy = BackendPolicy(
        pool.get(config.policy, config.policy_options),
        max_tokens=config.policy_max_tokens,
        temperature=config.policy_temperature,
        seed=config.seed,
    )
    for name in ("dialogues.jsonl", "turns.jsonl"):
        (out / name).unlink(missing_ok=True)
    recorder = EpisodeRecorder(out, variant=config.label, emotions={p.id: p.emotion for p in profiles})
    summary = EvalSummary(
        label=config.label,
        trajectory=config.episode.trajectory,
        judge_kind=config.judge.kind,
        judge=f"independent: {judge.identity}" if judge is not None else TRAINING_REWARD_LABEL,
    )
    jobs = [(p, r) for p in profiles for r in range(config.episodes_per_profile)]
    log(f"eval-policy: {len(jobs)} episodes on {len(profiles)} {config.split} {config.users.source} profiles")
    log(f"eval-policy: judged by {summary.judge}")
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
        for episode, (profile, _) in zip(episodes, batch, strict=True):
            summary.dialogues += 1
            summary.end_reasons[episode.end_reason] = summary.end_reasons.get(episode.end_reason, 0) + 1
            rated = [e for e in episode.emotions if e is not None]
            row = summary.by_user_type.setdefault(profile.user_type, {"final_emotions": []})
            if rated:
                summary.final_emotions.append(rated[-1])
                row["final_emotions"].append(float(rated[-1]))
        if reader is not None:
            _read(reader, episodes, [p.user_type for p, _ in batch], summary)
        if judge is not None:
            verdicts = judge.judge_batch([list(e.messages) for e in episodes])
            _write_verdicts(recorder, config.label, episodes, verdicts, summary)
        else:
            assert trajectory is not None
            _score_with_training_reward(recorder, episodes, trajectory, summary)
        log(f"eval-policy: {summary.dialogues}/{len(jobs)} episodes")
    (out / "summary.json").write_text(json.dumps(summary.to_json(), indent=2), encoding="utf-8")
    return summary


def _read(reader: StateReader, episodes: Sequence[Episode], types: Sequence[str], summary: EvalSummary) -> None:
    """Read every policy reply (one batch) and add each episode's consistency to its user type's row."""
    replies = [[m.content for m in e.messages if m.role == "assistant"] for e in episodes]
    # reply k answers user message k, whose emotion the simulator rated (None for the opening)
    states = [list(e.emotions[: len(r)]) for e, r in zip(episodes, replies, strict=True)]
    for user_type, (score, _) in zip(types, reader.score_episodes(replies, states), strict=True):
        row = summary.by_user_type[user_type]
        for key, value in (("tracking", score.tracking), ("direction", score.direction)):
            if value is not None:
                row.setdefault(key, []).append(value)
        row.setdefault("unread", []).extend([1.0] * score.unread)


def _write_verdicts(
    recorder: EpisodeRecorder,
    label: str,
    episodes: Sequence[Episode],
    verdicts: Sequence[JudgeVerdict | CareError],
    summary: EvalSummary,
) -> None:
    with recorder.dialogues_path.open("a", encoding="utf-8") as fh:
        for episode, verdict in zip(episodes, verdicts, strict=True):
            score: int | None = None
            saved: dict[str, Any] | None = None
            if isinstance(verdict, CareError):
                summary.failed_judgements += 1
            else:
                score, saved = verdict.score, verdict.model_dump()
                summary.judge_scores.append(verdict.score)
            line = {
                "id": episode.id,
                "messages": [m.model_dump() for m in episode.messages],
                "variant": label,
                "judge": summary.judge,
                "judge_score": score,
                "verdict": saved,
                "error": str(verdict) if isinstance(verdict, CareError) else None,
                "profile_id": episode.profile_id,
                "end_reason": episode.end_reason,
                "end_error": episode.error,
                "emotions": list(episode.emotions),
            }
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")


def _score_with_training_reward(
    recorder: EpisodeRecorder, episodes: Sequence[Episode], trajectory: TrajectoryReward, summary: EvalSummary
) -> None:
    results = trajectory.score_batch([e.to_dialogue() for e in episodes])
    for episode, result in zip(episodes, results, strict=True):
        recorder.write_episode(episode, result)
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
