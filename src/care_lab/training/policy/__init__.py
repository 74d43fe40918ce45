"""Policy training with CARE: GRPO of a dialogue policy, single-turn or multi-turn with a simulated user.

Importing this package is light (no torch): the trainer parts import TRL inside their functions.

- :class:`SimulatedUser` plays a :class:`UserProfile` (persona, situation, hidden goal, opening)
  on any backend and may end the conversation;
- :func:`run_episodes` rolls out conversations between a policy and the simulated user;
- :class:`PolicyReward` turns CARE into the policy's TRL reward (per reply, or per episode from
  per-turn rewards);
- :func:`run_policy_grpo` and :func:`evaluate_policy` are ``care train policy-grpo`` and
  ``care train eval-policy``.

Examples:
    >>> from care_sdk.testing import ScriptedBackend
    >>> sim = SimulatedUser(ScriptedBackend(['{"reply": "Thanks, bye.", "end": true, "emotion": 75}']))
    >>> user = UserProfile(id="u", source="demo", persona="A student.", situation="Failed an exam.",
    ...                    goal="Feel less alone.", opening="I failed my exam.")
    >>> [e] = run_episodes([user], BackendPolicy(ScriptedBackend(["That sounds painful."])), sim, max_turns=2)
    >>> e.end_reason, e.policy_turns
    ('user_ended', 1)
"""

from care_lab.training.policy.config import EvalPolicyConfig, PolicyGRPOConfig
from care_lab.training.policy.evaluate import EvalSummary, evaluate_policy
from care_lab.training.policy.profiles import UserProfile, esconv_profiles, sage_profiles, split_profiles
from care_lab.training.policy.rewards import EpisodeRecorder, PolicyReward, build_adaptive_reward
from care_lab.training.policy.rollout import BackendPolicy, Episode, run_episodes
from care_lab.training.policy.runner import PolicyGRPOResult, run_policy_grpo
from care_lab.training.policy.simulator import SimulatedUser, UserTurn

__all__ = [
    "BackendPolicy",
    "Episode",
    "EpisodeRecorder",
    "EvalPolicyConfig",
    "EvalSummary",
    "PolicyGRPOConfig",
    "PolicyGRPOResult",
    "PolicyReward",
    "SimulatedUser",
    "UserProfile",
    "UserTurn",
    "build_adaptive_reward",
    "esconv_profiles",
    "evaluate_policy",
    "run_episodes",
    "run_policy_grpo",
    "sage_profiles",
    "split_profiles",
]
