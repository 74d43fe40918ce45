"""Simulated users and the independent dialogue judge: what policy training and evaluation share.

Both ``care train policy-grpo`` / ``eval-policy`` and ``care eval sim-user`` use these, so neither
the training recipes nor the evals import each other. Importing this package is light (no torch).

- :mod:`care_lab.simulation.profiles`: :class:`UserProfile` (persona, situation, hidden goal,
  opening) from ESConv or the SAGE/RLVER profiles, and :func:`load_profiles`, which reads the
  training or held-out users by their declared data role (:class:`UserSettings`);
- :mod:`care_lab.simulation.simulated_user`: :class:`SimulatedUser` plays a profile on any backend
  and may end the conversation;
- :mod:`care_lab.simulation.episodes`: :func:`run_episodes` rolls out conversations between a
  policy (:class:`BackendPolicy`, or the model being trained) and the simulated user;
- :mod:`care_lab.simulation.judge`: :class:`DialogueJudge`, one holistic verdict per
  conversation from a model that is not the training reward;
- :mod:`care_lab.simulation.adversarial`: adversarial user types (gaslighting, escalation,
  validation, hidden intention) for evaluation, :func:`with_user_types`;
- :mod:`care_lab.simulation.consistency`: :class:`StateReader` and :func:`consistency`, whether the
  policy's replies track the user's emotion, apart from whether they improve it.

Examples:
    >>> from care_sdk.testing import ScriptedBackend
    >>> sim = SimulatedUser(ScriptedBackend(['{"reply": "Thanks, bye.", "end": true, "emotion": 75}']))
    >>> user = UserProfile(id="u", source="demo", persona="A student.", situation="Failed an exam.",
    ...                    goal="Feel less alone.", opening="I failed my exam.")
    >>> [e] = run_episodes([user], BackendPolicy(ScriptedBackend(["That sounds painful."])), sim, max_turns=2)
    >>> e.end_reason, e.policy_turns
    ('user_ended', 1)
"""

from __future__ import annotations

from care_lab.simulation.adversarial import USER_TYPES, with_user_types
from care_lab.simulation.consistency import Consistency, StateReader, StateReading, consistency
from care_lab.simulation.episodes import DEFAULT_SYSTEM_PROMPT, BackendPolicy, Episode, TurnPolicy, run_episodes
from care_lab.simulation.judge import DialogueJudge, JudgeVerdict
from care_lab.simulation.profiles import (
    UserProfile,
    UserSettings,
    esconv_profiles,
    load_profiles,
    sage_profiles,
    split_profiles,
)
from care_lab.simulation.simulated_user import SimulatedUser, UserTurn

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "USER_TYPES",
    "BackendPolicy",
    "Consistency",
    "DialogueJudge",
    "Episode",
    "JudgeVerdict",
    "SimulatedUser",
    "StateReader",
    "StateReading",
    "TurnPolicy",
    "UserProfile",
    "UserSettings",
    "UserTurn",
    "consistency",
    "esconv_profiles",
    "load_profiles",
    "run_episodes",
    "sage_profiles",
    "split_profiles",
    "with_user_types",
]
