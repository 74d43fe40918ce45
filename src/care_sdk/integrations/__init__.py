"""Adapters that plug :class:`~care_sdk.AdaptiveReward` into training frameworks.

- :mod:`care_sdk.integrations.trl`: what ``AdaptiveReward`` does inside TRL's ``GRPOTrainer``
  (dataset columns, logging hooks, the async form).
- :mod:`care_sdk.integrations.verl`: a module-level ``compute_score`` for verl's reward managers.
- :mod:`care_sdk.integrations.verl_multiturn`: per-turn rewards on each assistant turn's last token
  of verl's multi-turn layout, and a verl reward manager that trains on them.
- :mod:`care_sdk.integrations.verifiers`: a verifiers judge and pluggable reward function (imports
  verifiers: the ``verifiers`` extra).
- :mod:`care_sdk.integrations.slime`: slime's per-sample and group custom reward functions.
- :mod:`care_sdk.integrations.art`: an ART trajectory-group scorer (the ``after_each`` seam RULER uses).
- :mod:`care_sdk.integrations.skyrl`: a SkyRL multi-turn support environment whose ``step`` returns CARE's
  turn reward (imports skyrl-gym: the ``skyrl`` extra).

The TRL, verl (both), slime and ART modules do not import their framework: they only speak its calling conventions.
"""

__all__: list[str] = []  # the subpackages are the public surface
