"""How :class:`~care_sdk.AdaptiveReward` talks to TRL's ``GRPOTrainer``.

TRL calls a reward function as ``f(prompts=..., completions=..., completion_ids=..., **columns,
trainer_state=..., log_extra=..., log_metric=...)`` where ``columns`` are the dataset's other
columns, repeated once per generation. :func:`trl_items` turns such a call into ``(context,
reply)`` pairs, :func:`trl_profiles` reads each reply's user profile from a ``profile`` column,
and :func:`report_to_trainer` reports each batch's explanation through the two logging hooks.
:func:`per_dimension` turns a reward into per-dimension advantages (:mod:`care_sdk.advantages`).
TRL itself is not imported.

Examples:
    >>> items = trl_items(["I failed."], [[{"role": "assistant", "content": "Oh no."}]], {})
    >>> items[0][1]
    'Oh no.'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from care_sdk._audit_stats import context_key
from care_sdk._calls import METRIC_PREFIX, completion_text, report_to_trainer, trl_items, trl_profiles
from care_sdk.advantages import per_dimension_advantages, zero_spread_share

if TYPE_CHECKING:
    from care_sdk.reward import AdaptiveReward

__all__ = ["METRIC_PREFIX", "completion_text", "per_dimension", "report_to_trainer", "trl_items", "trl_profiles"]


def per_dimension(reward: AdaptiveReward) -> Callable[..., list[float | None]]:
    """``reward`` as a TRL reward function that returns per-dimension advantages instead of the weighted reward.

    Each reply's value is ``sum_d w_d * (s_d - mean_g s_d) / std_g s_d`` over the replies to the
    same context in the call (TRL passes a prompt's ``num_generations`` completions in one call;
    see :func:`~care_sdk.advantages.per_dimension_advantages`). TRL then normalises the values
    within the group as it does any reward (``scale_rewards``). Everything else is the reward's
    own call: its metrics, its ``last_results`` (the weighted rewards), its audit. Besides them
    it logs ``<prefix>/per_dimension/zero_std`` (share of groups whose values all tie) and
    ``<prefix>/weighted/zero_std`` (the same for the weighted reward).

    Examples:
        >>> from care_sdk import AdaptiveReward, Rubric, RubricEvaluator
        >>> from care_sdk.testing import ScriptedBackend, candidate_reply, evaluation_json
        >>> judge = ScriptedBackend(lambda r: evaluation_json([5, 5, 3, 3, 3, 3] if "?" in candidate_reply(r)
        ...                                                   else [1, 1, 4, 4, 3, 3]))
        >>> reward = AdaptiveReward(evaluator=RubricEvaluator(judge), rubric=Rubric.uniform_fixed())
        >>> fn = per_dimension(reward)
        >>> [round(r, 3) for r in reward(["I'm sad."] * 2, ["Why?", "I'm sorry."])]   # cognitive spread wins
        [0.667, 0.417]
        >>> fn.__name__, fn(["I'm sad."] * 2, ["Why?", "I'm sorry."])   # each dimension counts by its own spread
        ('care_reward', [0.0, 0.0])
    """

    def care_per_dimension(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        weighted = reward(prompts, completions, **kwargs)
        contexts = [c for c, _ in trl_items(prompts, completions, kwargs, reward.context_column)]
        keys = [context_key(c) for c in contexts]
        values = per_dimension_advantages(reward.last_results, keys)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            for name, scores in (("per_dimension", values), ("weighted", weighted)):
                share = zero_spread_share(scores, keys)
                if share is not None:
                    log_metric(f"{reward.metric_prefix}/{name}/zero_std", share)
        return values

    care_per_dimension.__name__ = care_per_dimension.__qualname__ = reward.__name__
    return care_per_dimension
