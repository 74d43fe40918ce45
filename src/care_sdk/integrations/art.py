"""CARE rewards for ART (OpenPipe's Agent Reinforcement Trainer): a trajectory-group scorer.

ART trains on :class:`art.TrajectoryGroup` objects: the trajectories of one scenario, whose rewards
GRPO compares within the group. Its own relative judge, RULER, scores a group in the callback
``gather_trajectory_groups(..., after_each=...)`` and returns a new group with ``trajectory.reward``
replaced. :class:`CareGroupScorer` plugs into the same seam::

    from care_sdk.integrations.art import CareGroupScorer

    groups = await art.gather_trajectory_groups(
        (art.TrajectoryGroup(rollout(model, scenario) for _ in range(8)) for scenario in scenarios),
        after_each=CareGroupScorer(),  # or CareGroupScorer(AdaptiveReward.from_backend(...), how="discounted")
    )
    await model.train(groups)

The judged dialogue is the trajectory's messages (``messages_and_choices``; system and tool
messages and empty turns left out). Every assistant turn is scored against the dialogue before it,
with a rubric per context, and the turn rewards are folded as in :class:`~care_sdk.TrajectoryReward`
(``how``: ``"mean"``, ``"last"``, ``"discounted"``; ``"last"`` scores only the final reply). A
single-turn trajectory gets the reward of its one reply under every ``how``. The whole group is
scored in one batch, so G trajectories that share their context cost one rubric and G evaluations.

Written per trajectory: ``reward`` (the CARE reward, in [0, 1]), ``metrics["independent_reward"]``
(the reward it had before, as RULER keeps it), ``metrics["care/reward"]``, ``care/<dimension>`` and
``care/weight/<dimension>`` (means over the scored turns), ``care/turns``, ``care/context_fit`` when
the reward read it, ``care/cost/<field>`` (what its turns cost, summed; see
:func:`care_sdk.provenance.cost_metrics`), and one line in ``logs``.

A trajectory CARE could not score never gets a made-up reward. By default (``on_error="exclude"``)
it leaves the group and is recorded in ``group.exceptions`` with the reason, as ART records a
rollout that raised (ART logs it in ``exception_rate``); ``"raise"`` raises
:class:`~care_sdk.errors.CareError` (as RULER does by default), ``"skip_group"`` returns ``None`` so
``gather_trajectory_groups`` drops the group (as RULER's ``swallow_exceptions=True``).

ART itself is not imported here: the returned group is built with the classes of the group given.

Examples:
    >>> import asyncio
    >>> import art
    >>> from care_sdk import AdaptiveReward
    >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
    >>> backend = ScriptedBackend(lambda req: rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
    ...                           if req.purpose == "rubric" else evaluation_json([5, 5, 5, 5, 1, 1]))
    >>> group = art.TrajectoryGroup(art.Trajectory(messages_and_choices=[
    ...     {"role": "user", "content": "I lost my job."}, {"role": "assistant", "content": f"Reply {i}"}])
    ...     for i in range(8))
    >>> scored = asyncio.run(CareGroupScorer(AdaptiveReward.from_backend(backend))(group))
    >>> [t.reward for t in scored] == [0.75] * 8, scored.trajectories[0].metrics["care/weight/affective"]
    (True, 0.5)
    >>> [r.purpose for r in backend.requests].count("rubric"), len(backend.requests)
    (1, 9)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from care_sdk.errors import CareError, ConfigError
from care_sdk.provenance import cost_metrics
from care_sdk.reward import AdaptiveReward
from care_sdk.trajectory import Aggregation, aggregate_turn_rewards
from care_sdk.types import DIMENSIONS, Dialogue, Message, Messages, RewardResult, dialogue_turns

__all__ = ["CareGroupScorer", "OnError", "care_score_group", "trajectory_dialogue"]

OnError = Literal["exclude", "raise", "skip_group"]
"""What happens to a trajectory CARE could not score: ``"exclude"`` (moved to ``group.exceptions``),
``"raise"`` (a :class:`~care_sdk.errors.CareError`) or ``"skip_group"`` (the group is dropped)."""


def trajectory_dialogue(trajectory: Any) -> Messages:
    """The dialogue CARE judges in an ART trajectory: its user and assistant turns with text, normalised here
    (:func:`~care_sdk.types.dialogue_turns`).

    Reads ``trajectory.messages()`` (ART's view of ``messages_and_choices``, where a sampled
    ``Choice`` is an assistant message); system and tool messages and empty turns are left out.
    ``additional_histories`` are not judged.

    Examples:
        >>> from types import SimpleNamespace
        >>> t = SimpleNamespace(messages=lambda: [{"role": "system", "content": "Be kind."},
        ...     {"role": "user", "content": "I can't sleep."}, {"role": "assistant", "content": "Since when?"}])
        >>> [(m.role, m.content) for m in trajectory_dialogue(t)]
        [('user', "I can't sleep."), ('assistant', 'Since when?')]
    """

    def read(message: Any, name: str) -> Any:
        return message.get(name) if isinstance(message, Mapping) else getattr(message, name, None)

    # a tool-calling assistant message has no text content: it is not a turn
    texts = [{"role": read(m, "role"), "content": read(m, "content")} for m in trajectory.messages()]
    return dialogue_turns([m for m in texts if isinstance(m["content"], str)])


class CareGroupScorer:
    """Scores an ART trajectory group with CARE; an ``after_each`` callback for ``gather_trajectory_groups``.

    Args:
        reward: the per-turn reward (default: the process's reward from ``$CARE_BACKEND``,
            ``$CARE_RUBRIC_CACHE`` and ``$CARE_ADD_ONS``, as :func:`care_sdk.integrations.verl.get_reward`).
        how: how a multi-turn trajectory's turn rewards become its reward: ``"mean"``, ``"last"``
            (only the final reply is scored) or ``"discounted"`` (see :mod:`care_sdk.trajectory`).
        gamma: the discount for ``"discounted"``, in [0, 1].
        on_error: ``"exclude"``, ``"raise"`` or ``"skip_group"`` (see the module docs).
        name: the metric prefix.

    Raises:
        ConfigError: an unknown ``how`` or ``on_error``, or ``gamma`` outside [0, 1].

    Examples:
        >>> from care_sdk import Rubric
        >>> from care_sdk.testing import ScriptedBackend
        >>> scorer = CareGroupScorer(AdaptiveReward.from_backend(ScriptedBackend([]), rubric=Rubric.uniform_fixed()),
        ...                          how="discounted", gamma=0.5)
        >>> scorer.how, scorer.on_error
        ('discounted', 'exclude')
    """

    def __init__(
        self,
        reward: AdaptiveReward | None = None,
        *,
        how: Aggregation = "mean",
        gamma: float = 0.9,
        on_error: OnError = "exclude",
        name: str = "care",
    ) -> None:
        if how not in ("mean", "last", "discounted"):
            raise ConfigError(f"how must be 'mean', 'last' or 'discounted', got {how!r}")
        if not 0.0 <= gamma <= 1.0:
            raise ConfigError(f"gamma must be in [0, 1], got {gamma}")
        if on_error not in ("exclude", "raise", "skip_group"):
            raise ConfigError(f"on_error must be 'exclude', 'raise' or 'skip_group', got {on_error!r}")
        self._reward = reward
        self.how: Aggregation = how
        self.gamma = gamma
        self.on_error: OnError = on_error
        self.name = name

    @property
    def reward(self) -> AdaptiveReward:
        """The per-turn reward, built from the environment on first use when none was given."""
        if self._reward is None:
            from care_sdk.integrations.verl import get_reward

            self._reward = get_reward()
        return self._reward

    def _turns(self, trajectory: Any) -> list[tuple[tuple[Message, ...], str]]:
        messages = trajectory_dialogue(trajectory)
        turns = list(Dialogue(messages=messages).turns()) if messages else []
        if self.how == "last":
            turns = turns[-1:]
        return [(t.context, t.reply) for t in turns]

    async def __call__(self, group: Any) -> Any:
        """Score ``group``; return a new group of the same class with CARE rewards (see the module docs).

        Raises:
            CareError: a trajectory could not be scored and ``on_error="raise"``.
        """
        trajectories = list(group.trajectories)
        per_trajectory = [self._turns(t) for t in trajectories]
        items = [item for turns in per_trajectory for item in turns]
        results = await self.reward.ascore_batch(items) if items else []
        scored: list[Any] = []
        failures: list[BaseException] = []
        start = 0
        for position, (trajectory, turns) in enumerate(zip(trajectories, per_trajectory, strict=True)):
            mine = results[start : start + len(turns)]
            start += len(turns)
            value, error = self._fold(mine)
            if value is None:
                failure = CareError(f"CARE could not score trajectory {position} of the group: {error}")
                if self.on_error == "raise":
                    raise failure
                if self.on_error == "skip_group":
                    return None
                failures.append(failure)
                continue
            scored.append(self._written(trajectory, value, mine))
        new = type(group)(
            scored,
            exceptions=failures,
            metadata=dict(group.metadata),
            metrics=dict(group.metrics),
            logs=list(group.logs),
        )
        new.exceptions = [*group.exceptions, *new.exceptions]
        if failures:
            new.log(f"CARE: {len(failures)} of {len(trajectories)} trajectories could not be scored")
        return new

    def _fold(self, turns: Sequence[RewardResult]) -> tuple[float | None, str | None]:
        if not turns:
            return None, "the trajectory has no assistant reply after a user or assistant message"
        value = aggregate_turn_rewards([t.reward for t in turns], self.how, gamma=self.gamma)
        if value is not None:
            return value, None
        return None, next(t.error for t in turns if t.reward is None)

    def _written(self, trajectory: Any, value: float, turns: Sequence[RewardResult]) -> Any:
        metrics = dict(trajectory.metrics)
        metrics["independent_reward"] = trajectory.reward
        metrics[f"{self.name}/reward"] = value
        metrics[f"{self.name}/turns"] = len(turns)
        for dim in DIMENSIONS:
            scores = [t.dimension_scores[dim] for t in turns if t.dimension_scores and dim in t.dimension_scores]
            weights = [t.rubric.weights[dim] for t in turns if t.rubric is not None]
            if scores:
                metrics[f"{self.name}/{dim.value}"] = math.fsum(scores) / len(scores)
            if weights:
                metrics[f"{self.name}/weight/{dim.value}"] = math.fsum(weights) / len(weights)
        fits = [t.context_fit for t in turns if t.context_fit is not None]
        if fits:
            metrics[f"{self.name}/context_fit"] = math.fsum(fits) / len(fits)
        if any(t.provenance is not None for t in turns):
            metrics.update(cost_metrics(turns, f"{self.name}/cost/", total=True))
        rewards = ", ".join(f"{t.reward:.3f}" for t in turns if t.reward is not None)
        logs = [*trajectory.logs, f"CARE reward {value:.3f} ({self.how} of turn rewards [{rewards}])"]
        return trajectory.model_copy(update={"reward": value, "metrics": metrics, "logs": logs})

    def __repr__(self) -> str:
        return f"CareGroupScorer(how={self.how!r}, gamma={self.gamma}, on_error={self.on_error!r})"


async def care_score_group(
    group: Any,
    reward: AdaptiveReward | None = None,
    *,
    how: Aggregation = "mean",
    gamma: float = 0.9,
    on_error: OnError = "exclude",
) -> Any:
    """Score one ART trajectory group with CARE, as ``ruler_score_group`` does with RULER.

    Options as in :class:`CareGroupScorer`; returns a new group (``None`` when
    ``on_error="skip_group"`` and a trajectory failed).

    Examples:
        >>> import inspect
        >>> inspect.iscoroutinefunction(care_score_group)
        True
    """
    return await CareGroupScorer(reward, how=how, gamma=gamma, on_error=on_error)(group)
