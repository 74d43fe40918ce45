"""Library code for the generator-training recipes: data construction, reward terms, trainer wiring.

Importing this package is light (no torch); the trainer stages import TRL, PEFT and transformers
inside their functions and raise :class:`~care_sdk.errors.MissingDependencyError` naming
``pip install "care-sdk[train]"`` when they are missing.

- Reward terms (usable in any trainer): :func:`r_align`, :func:`r_pref`, :func:`format_reward`,
  the TRL reward functions :class:`FormatReward`, :class:`PrefReward`, :class:`AlignReward`, and
  :class:`PrefGRPORewards` (the three together: a failed evaluation masks the whole completion).
- Run sizes: :func:`plan_training` and :class:`TrainingPlan`. (Data roles, the test-read ledger and
  results files are the data's: :mod:`care_lab.data.roles`, :mod:`care_lab.data.results`.)
- Stages: :func:`build_data`, :func:`run_sft`, :func:`run_pref_grpo`, :func:`fit_weights_head`, with
  their configs :class:`BuildDataConfig`, :class:`SFTStageConfig`, :class:`PrefGRPOConfig`,
  :class:`WeightsHeadConfig` and :func:`load_config`.
- Models: :func:`tiny_model_dir` (a tiny random SmolLM2-shaped model for tests),
  :func:`load_trained_generator` (a trained generator as a :class:`~care_sdk.RubricGenerator`).

Examples:
    >>> from care_lab.training import r_align
    >>> r_align({"cognitive": 0.2, "affective": 0.6, "proactive": 0.2}, {"affective": 3, "proactive": 1})
    1.0
"""

from care_lab.training.build_data import build_data, count_weights
from care_lab.training.build_report import BuildReport
from care_lab.training.config import (
    BuildDataConfig,
    LoraSettings,
    PrefGRPOConfig,
    SFTStageConfig,
    WeightsHeadConfig,
    load_config,
)
from care_lab.training.models import tiny_model_dir
from care_lab.training.plan import TrainingPlan, plan_training
from care_lab.training.pref_grpo import PrefGRPOResult, run_pref_grpo
from care_lab.training.rewards import (
    AlignReward,
    FormatReward,
    PrefGRPORewards,
    PrefReward,
    align_violations,
    completion_text,
    format_reward,
    r_align,
    r_pref,
)
from care_lab.training.sft import SFTResult, load_trained_generator, run_sft
from care_lab.training.weights_head import fit_weights_head

__all__ = [
    "AlignReward",
    "BuildDataConfig",
    "BuildReport",
    "FormatReward",
    "LoraSettings",
    "PrefGRPOConfig",
    "PrefGRPOResult",
    "PrefGRPORewards",
    "PrefReward",
    "SFTResult",
    "SFTStageConfig",
    "TrainingPlan",
    "WeightsHeadConfig",
    "align_violations",
    "build_data",
    "completion_text",
    "count_weights",
    "fit_weights_head",
    "format_reward",
    "load_config",
    "load_trained_generator",
    "plan_training",
    "r_align",
    "r_pref",
    "run_pref_grpo",
    "run_sft",
    "tiny_model_dir",
]
