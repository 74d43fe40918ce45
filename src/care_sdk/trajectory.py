"""Episode rewards for multi-turn dialogues: one reward per assistant turn, folded into one number.

RLVER-style training rolls out a whole conversation with a simulated user and needs one reward
for the episode. :class:`TrajectoryReward` scores every assistant turn against the context before
it (each turn gets its own rubric) and aggregates the turn rewards:

- ``"mean"``: the mean over all assistant turns (every turn counts equally);
- ``"last"``: the reward of the final assistant turn (where the conversation ended up);
- ``"discounted"``: a weighted mean in which the last turn has weight 1 and each earlier turn
  ``gamma`` times the weight of the turn after it: ``sum_t gamma^(T-1-t) r_t / sum_t gamma^(T-1-t)``.
  ``gamma=1`` is the mean, ``gamma=0`` is the last turn; the result stays in [0, 1].

A turn that could not be scored makes the episode reward ``None`` (with the turn's error) when
that turn carries weight: an episode is never scored on the turns that happened to succeed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from care_sdk.errors import ConfigError
from care_sdk.profiles import ProfileLike, UserProfile, as_profiles
from care_sdk.reward import AdaptiveReward
from care_sdk.types import Dialogue, Message, Messages, RewardResult, as_messages

__all__ = ["Aggregation", "TrajectoryResult", "TrajectoryReward", "aggregate_turn_rewards"]

Aggregation = Literal["mean", "last", "discounted"]
"""How turn rewards become an episode reward: ``"mean"``, ``"last"`` or ``"discounted"``."""

DialogueLike = Dialogue | Sequence[Message | Mapping[str, Any]]


def _turn_weights(n: int, how: Aggregation, gamma: float) -> list[float]:
    if how == "mean":
        return [1.0] * n
    if how == "last":
        return [0.0] * (n - 1) + [1.0]
    if how == "discounted":
        return [gamma ** (n - 1 - t) for t in range(n)]
    raise ConfigError(f"how must be 'mean', 'last' or 'discounted', got {how!r}")


def aggregate_turn_rewards(
    rewards: Sequence[float | None], how: Aggregation = "mean", *, gamma: float = 0.9
) -> float | None:
    """Fold per-turn rewards (in turn order) into one episode reward; ``None`` if a weighted turn is ``None``.

    Raises:
        ValueError: no turns, an unknown ``how``, or ``gamma`` outside [0, 1].

    Examples:
        >>> aggregate_turn_rewards([0.2, 0.4, 0.9], "mean")
        0.5
        >>> aggregate_turn_rewards([0.2, 0.4, 0.9], "last")
        0.9
        >>> round(aggregate_turn_rewards([0.0, 1.0], "discounted", gamma=0.5), 4)  # (0.5*0 + 1*1) / 1.5
        0.6667
        >>> aggregate_turn_rewards([None, 0.4], "last"), aggregate_turn_rewards([None, 0.4], "mean")
        (0.4, None)
    """
    if not rewards:
        raise ValueError("no turn rewards to aggregate")
    if not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"gamma must be in [0, 1], got {gamma}")
    weights = _turn_weights(len(rewards), how, gamma)
    total = 0.0
    for r, w in zip(rewards, weights, strict=True):
        if w == 0.0:
            continue
        if r is None:
            return None
        total += w * r
    return total / sum(weights)


class TrajectoryResult(BaseModel):
    """An episode reward with the turn results that explain it; serialisable to JSON.

    Examples:
        >>> r = TrajectoryResult(reward=None, how="mean", error="turn 1: evaluation failed")
        >>> TrajectoryResult.model_validate_json(r.model_dump_json()) == r
        True
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reward: float | None
    """The episode reward in [0, 1]; ``None`` exactly when ``error`` is set."""
    how: Aggregation
    """The aggregation used."""
    gamma: float | None = None
    """The discount, for ``how="discounted"``."""
    turn_indices: tuple[int, ...] = ()
    """Position in the dialogue's messages of each scored assistant turn."""
    turns: tuple[RewardResult, ...] = Field(default=())
    """One result per assistant turn, in order."""
    error: str | None = None
    """Why there is no episode reward."""

    @model_validator(mode="after")
    def _consistent(self) -> TrajectoryResult:
        if (self.reward is None) == (self.error is None):
            raise ValueError("exactly one of reward and error must be set")
        return self


class TrajectoryReward:
    """Scores whole dialogues: every assistant turn with its own rubric, then one episode reward.

    All turns of all dialogues in a batch go to the backend together; each turn is judged
    against the rubric of its own context.

    Args:
        reward: the per-turn reward.
        how: ``"mean"``, ``"last"`` or ``"discounted"`` (see the module docs).
        gamma: discount for ``"discounted"``, in [0, 1].

    Examples:
        >>> from care_sdk import RubricEvaluator, Rubric
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json
        >>> per_turn = AdaptiveReward(evaluator=RubricEvaluator(ScriptedBackend(
        ...     [evaluation_json([2] * 6), evaluation_json([5] * 6)])), rubric=Rubric.uniform_fixed())
        >>> episode = TrajectoryReward(per_turn, how="discounted", gamma=0.5)
        >>> result = episode.score([
        ...     {"role": "user", "content": "I can't sleep."}, {"role": "assistant", "content": "Since when?"},
        ...     {"role": "user", "content": "Since the layoff."}, {"role": "assistant", "content": "That is a lot."}])
        >>> [t.reward for t in result.turns], result.reward
        ([0.25, 1.0], 0.75)
    """

    def __init__(self, reward: AdaptiveReward, *, how: Aggregation = "mean", gamma: float = 0.9) -> None:
        _turn_weights(1, how, gamma)  # validates how
        if not 0.0 <= gamma <= 1.0:
            raise ConfigError(f"gamma must be in [0, 1], got {gamma}")
        self.reward = reward
        self.how: Aggregation = how
        self.gamma = gamma

    @staticmethod
    def _dialogue(value: DialogueLike) -> Dialogue:
        """A dialogue as given, normalised once where it enters (its turns' contexts are then messages)."""
        return value if isinstance(value, Dialogue) else Dialogue(messages=as_messages(value))

    def _fold(self, turns: list[RewardResult], indices: list[int]) -> TrajectoryResult:
        gamma = self.gamma if self.how == "discounted" else None
        if not turns:
            return TrajectoryResult(
                reward=None, how=self.how, gamma=gamma, error="the dialogue has no assistant turn after a message"
            )
        value = aggregate_turn_rewards([t.reward for t in turns], self.how, gamma=self.gamma)
        error = None
        if value is None:
            failed = next(
                (i, t)
                for i, t, w in zip(indices, turns, _turn_weights(len(turns), self.how, self.gamma), strict=True)
                if w and t.reward is None
            )
            error = f"turn at message {failed[0]}: {failed[1].error}"
        return TrajectoryResult(
            reward=value, how=self.how, gamma=gamma, turn_indices=tuple(indices), turns=tuple(turns), error=error
        )

    def _split(
        self, dialogues: Sequence[DialogueLike], profiles: Sequence[ProfileLike] | None
    ) -> tuple[list[list[int]], list[tuple[Messages, str]], list[UserProfile | None]]:
        parsed = [self._dialogue(d) for d in dialogues]
        per_dialogue = as_profiles(profiles, len(parsed))
        indices = [[t.index for t in d.turns()] for d in parsed]
        items = [(t.context, t.reply) for d in parsed for t in d.turns()]
        turn_profiles = [p for p, idx in zip(per_dialogue, indices, strict=True) for _ in idx]
        return indices, items, turn_profiles

    def _join(self, indices: list[list[int]], results: list[RewardResult]) -> list[TrajectoryResult]:
        out, start = [], 0
        for idx in indices:
            out.append(self._fold(results[start : start + len(idx)], idx))
            start += len(idx)
        return out

    def score_batch(
        self, dialogues: Sequence[DialogueLike], profiles: Sequence[ProfileLike] | None = None
    ) -> list[TrajectoryResult]:
        """Score many dialogues, each with its user's profile when ``profiles`` is given (one per dialogue,
        used for every turn of it; see :meth:`AdaptiveReward.score_batch`); a failed episode has
        ``reward=None`` and ``error``, never an exception.

        Raises:
            InputError: ``profiles`` has another length than ``dialogues``, or an entry is not a profile.
        """
        indices, items, turn_profiles = self._split(dialogues, profiles)
        return self._join(indices, self.reward.score_batch(items, turn_profiles))

    async def ascore_batch(
        self, dialogues: Sequence[DialogueLike], profiles: Sequence[ProfileLike] | None = None
    ) -> list[TrajectoryResult]:
        """Async form of :meth:`score_batch`."""
        indices, items, turn_profiles = self._split(dialogues, profiles)
        return self._join(indices, await self.reward.ascore_batch(items, turn_profiles))

    def score(self, dialogue: DialogueLike, profile: ProfileLike = None) -> TrajectoryResult:
        """Score one dialogue, said to the user ``profile`` describes when given (see :meth:`score_batch`).

        Examples:
            >>> from care_sdk import RubricEvaluator, Rubric
            >>> from care_sdk.testing import ScriptedBackend, evaluation_json
            >>> backend = ScriptedBackend([evaluation_json([4] * 6)])
            >>> per_turn = AdaptiveReward(evaluator=RubricEvaluator(backend), rubric=Rubric.uniform_fixed())
            >>> TrajectoryReward(per_turn).score([{"role": "user", "content": "I failed."},
            ...     {"role": "assistant", "content": "Oh no."}], profile={"traits": ["proud"]}).reward
            0.75
            >>> backend.requests[0].messages[1].content.count("Traits: proud")
            1
        """
        return self.score_batch([dialogue], None if profile is None else [profile])[0]

    def __repr__(self) -> str:
        return f"TrajectoryReward({self.reward!r}, how={self.how!r}, gamma={self.gamma})"
