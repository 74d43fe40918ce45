"""Policy training with CARE: GRPO of a dialogue policy, single-turn or multi-turn with a simulated user.

Importing this package is light (no torch): the trainer parts import TRL inside their functions.
The simulated users, the episode loop and the independent judge live in :mod:`care_lab.simulation`
(``care eval`` uses them too).

- :class:`PolicyReward` turns CARE into the policy's TRL reward (per reply, or per episode from
  per-turn rewards);
- :func:`run_policy_grpo` and :func:`evaluate_policy` are ``care train policy-grpo`` and
  ``care train eval-policy``, configured by :class:`PolicyGRPOConfig` and :class:`EvalPolicyConfig`.

Examples:
    >>> config = PolicyGRPOConfig(model="tiny", output_dir="runs/policy", mode="multi_turn")
    >>> config.users.source, config.episode.max_turns, config.reward.variant
    ('esconv', 3, 'care')
"""

from care_lab.training.policy.config import EvalPolicyConfig, PolicyGRPOConfig
from care_lab.training.policy.evaluate import EvalSummary, evaluate_policy
from care_lab.training.policy.rewards import EpisodeRecorder, PolicyReward
from care_lab.training.policy.runner import PolicyGRPOResult, run_policy_grpo

__all__ = [
    "EpisodeRecorder",
    "EvalPolicyConfig",
    "EvalSummary",
    "PolicyGRPOConfig",
    "PolicyGRPOResult",
    "PolicyReward",
    "evaluate_policy",
    "run_policy_grpo",
]
