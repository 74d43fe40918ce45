"""Configs of ``care train policy-grpo`` and ``care train eval-policy``: frozen pydantic models, loaded
from YAML with :func:`~care_lab.training.config.load_config` (unknown keys are errors naming the key).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from care_lab.simulation.adversarial import check_user_types
from care_lab.simulation.episodes import DEFAULT_SYSTEM_PROMPT
from care_lab.simulation.profiles import UserSettings
from care_lab.training.config import LoraSettings
from care_sdk.addons import parse_add_on
from care_sdk.variants import VariantField

__all__ = [
    "CurriculumSettings",
    "EpisodeSettings",
    "EvalPolicyConfig",
    "JudgeSettings",
    "PolicyGRPOConfig",
    "PromptSettings",
    "ReaderSettings",
    "RewardSettings",
    "SimulatorSettings",
]


class _Config(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class PromptSettings(_Config):
    """Where single-turn prompts come from: dialogue contexts cut before supporter turns.

    Examples:
        >>> PromptSettings(source="jsonl", path="logs.jsonl").turns_per_dialogue
        2
    """

    source: Literal["esconv", "mint", "jsonl"] = "esconv"
    """``esconv`` (ESConv split), ``mint`` (MINT's logged conversations) or ``jsonl`` (your
    ``{"id", "messages"}`` file of OpenAI-format dialogues)."""
    path: str | None = None
    """The file; default ``<data dir>/esconv/train.jsonl`` or
    ``<data dir>/mint_lend_an_ear/training/conversations_322.json``. Required for ``jsonl``."""
    max_dialogues: int | None = Field(default=None, ge=1)
    """Read at most this many dialogues."""
    turns_per_dialogue: int = Field(default=2, ge=1)
    """Contexts taken per dialogue (before its first supporter turns)."""
    max_context_messages: int | None = Field(default=8, ge=1)
    """Keep only the last this many messages of a context."""


class SimulatorSettings(_Config):
    """The simulated user's backend and budget.

    Examples:
        >>> SimulatorSettings().backend
        'default'
    """

    backend: str = "default"
    """Backend spec (``default``, ``llamacpp:PATH``, ``openai:MODEL@URL``, ``vllm:MODEL``, ``hf:PATH``)."""
    options: dict[str, Any] = {}
    """Backend constructor options (e.g. ``timeout`` for ``openai:``, ``n_ctx`` for llama.cpp)."""
    max_tokens: int = Field(default=128, ge=8)
    """Token budget of one user turn."""
    temperature: float = Field(default=0.7, ge=0)
    """Sampling temperature of the user."""
    max_attempts: int = Field(default=2, ge=1)
    """Replies tried per user turn before the episode ends with ``simulator_error``."""
    max_reply_chars: int = Field(default=300, ge=8)
    """Upper bound on a user message (in the JSON schema)."""
    max_profile_chars: int | None = Field(default=1200, ge=16)
    """Persona and situation are cut to this many characters in the simulator's prompt."""


class EpisodeSettings(_Config):
    """Multi-turn episode settings.

    Examples:
        >>> EpisodeSettings().trajectory
        'mean'
    """

    max_turns: int = Field(default=3, ge=1)
    """Policy turns per episode at most."""
    turn_max_tokens: int = Field(default=128, ge=1)
    """Token budget of one policy turn."""
    trajectory: Literal["mean", "last", "discounted"] = "mean"
    """How per-turn CARE rewards become the episode reward."""
    gamma: float = Field(default=0.9, ge=0, le=1)
    """Discount for ``trajectory: discounted``."""


class RewardSettings(_Config):
    """The frozen CARE reward: variant, generator and evaluator.

    Examples:
        >>> RewardSettings(variant="fixed_rubric").generator
        'default'
    """

    variant: VariantField = "care"
    """``care`` (also read as ``full``), ``uniform_weights`` (generated criteria, weights 1/3),
    ``fixed_criteria`` (generated weights over the fixed six criteria) or ``fixed_rubric`` (no generator)."""
    generator: str = "default"
    """Backend spec of the rubric generator, e.g. ``hf:runs/pref_grpo/merged`` for one trained with
    ``care train sft`` / ``pref-grpo``, or ``vllm:PATH`` / ``openai:MODEL@URL`` at scale."""
    generator_options: dict[str, Any] = {}
    """Generator backend constructor options."""
    evaluator: str = "default"
    """Backend spec of the rubric-conditioned evaluator."""
    evaluator_options: dict[str, Any] = {}
    """Evaluator backend constructor options."""
    criteria_per_dimension: int = Field(default=2, ge=1, le=5)
    """Criteria per dimension the generator writes."""
    generator_max_tokens: int = Field(default=400, ge=32)
    """Token budget of one rubric."""
    evaluator_max_tokens: int = Field(default=160, ge=16)
    """Token budget of one evaluation."""
    max_attempts: int = Field(default=2, ge=1)
    """Replies tried per rubric / evaluation before that reward is ``None``."""
    use_logprobs: bool | None = None
    """Score criteria by expected score over the evaluator's logprobs (continuous rewards); ``None``: as the
    evaluator decides (on for an adapter trained to be read that way, the bundled evaluator's)."""
    add_ons: tuple[str, ...] = ()
    """Opt-in add-ons outside the method, ``NAME[=SPEC]`` as ``care score --add-on`` takes them
    (:func:`care_sdk.addons.add_ons`): e.g. ``[context-fit]`` scales each reward by the reply's fit
    to its context, read on the bundled base model (``context-fit=SPEC``: on that backend). None
    by default: the method's reward."""
    seed: int = 0
    """Sampling seed of generator and evaluator."""

    @model_validator(mode="before")
    @classmethod
    def _no_context_fit_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "context_fit" in data:
            raise ValueError(
                "reward.context_fit is now reward.add_ons: write add_ons: [context-fit] (or [context-fit=SPEC]); "
                "leave it out for the method's reward"
            )
        return data

    @field_validator("add_ons")
    @classmethod
    def _known_add_ons(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            parse_add_on(item)  # an unknown name fails at load, before any model is opened
        return value


class JudgeSettings(_Config):
    """Who judges ``eval-policy``'s episodes: an independent judge (the default), or the training reward.

    ``independent``: :class:`~care_lab.simulation.judge.DialogueJudge` on ``backend``, one holistic
    verdict per episode with its own prompt and no CARE rubric, so a policy that learned to please
    the training reward gains nothing from it. ``training_reward``: the CARE reward of the
    ``reward`` section scores every turn, as during training; reports label it "training reward",
    because it cannot see reward hacking.

    Examples:
        >>> JudgeSettings().kind, JudgeSettings().backend
        ('independent', 'base')
    """

    kind: Literal["independent", "training_reward"] = "independent"
    """``independent`` (a separate judge model) or ``training_reward`` (the CARE reward, labelled as such)."""
    backend: str = "base"
    """The independent judge's backend spec; it must differ from ``reward.generator`` and ``reward.evaluator``."""
    options: dict[str, Any] = {}
    """Judge backend constructor options."""
    max_tokens: int = Field(default=160, ge=16)
    """Token budget of one verdict."""
    max_attempts: int = Field(default=2, ge=1)
    """Replies tried per episode before its verdict is missing (never a silent 0)."""
    seed: int = 0
    """Sampling seed of the judge."""


class ReaderSettings(_Config):
    """The state reader of ``eval-policy``: reads each policy reply alone for the state it acknowledges
    (:class:`~care_lab.simulation.consistency.StateReader`), giving the consistency score.

    Examples:
        >>> ReaderSettings().backend
        'base'
    """

    backend: str = "base"
    """The reader's backend spec (not the policy's)."""
    options: dict[str, Any] = {}
    """Reader backend constructor options."""
    max_tokens: int = Field(default=48, ge=16)
    """Token budget of one reading."""
    max_attempts: int = Field(default=2, ge=1)
    """Readings tried per reply before it is counted unread (never a silent 0)."""


class CurriculumSettings(_Config):
    """Competence-boundary sampling of the training scenarios
    (:mod:`care_lab.training.policy.curriculum`): scenarios whose pass rate in the groups already
    rolled out lies near ``target`` are drawn more often, every scenario keeps a rehearsal floor.

    Examples:
        >>> CurriculumSettings().target, CurriculumSettings().rehearsal
        (0.5, 0.2)
    """

    target: float = Field(default=0.5, gt=0, lt=1)
    """The pass rate at the policy's competence boundary (drawn most often)."""
    pass_threshold: float = Field(default=0.5, ge=0, le=1)
    """A rollout passes when its reward is at least this (CARE rewards lie in [0, 1])."""
    rehearsal: float = Field(default=0.2, gt=0, le=1)
    """The share of the sampling probability spread uniformly: every scenario keeps at least
    ``rehearsal / N`` (1: uniform sampling)."""
    sharpness: float = Field(default=1.0, gt=0)
    """Exponent on the boundary score: above 1 concentrates the draws nearer the target."""


class PolicyGRPOConfig(_Config):
    """Settings of ``care train policy-grpo``.

    Examples:
        >>> PolicyGRPOConfig(model="tiny", output_dir="runs/policy", mode="multi_turn").episode.max_turns
        3
    """

    model: str
    """The policy to train: a transformers directory, ``tiny`` or ``bundled``."""
    output_dir: str
    """Where to write the policy (``adapter/``, ``merged/``), ``rewards.jsonl``, ``metrics.json`` and
    the scored ``dialogues.jsonl`` / ``turns.jsonl``."""
    mode: Literal["single_turn", "multi_turn"] = "single_turn"
    """``single_turn``: one reply per logged context. ``multi_turn``: episodes with a simulated user."""
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT
    """The policy's system prompt (``null``: none)."""
    prompts: PromptSettings = PromptSettings()
    """Single-turn prompt source."""
    users: UserSettings = UserSettings()
    """Multi-turn simulated-user profiles (the training share)."""
    simulator: SimulatorSettings = SimulatorSettings()
    """Multi-turn simulated user."""
    episode: EpisodeSettings = EpisodeSettings()
    """Multi-turn episode settings."""
    reward: RewardSettings = RewardSettings()
    """The CARE reward."""
    curriculum: CurriculumSettings | None = None
    """Competence-boundary sampling of the prompts / simulated users (``null``: TRL's uniform shuffle);
    logged per step to ``curriculum.jsonl``."""
    data_dir: str | None = None
    """The data directory; ``$CARE_DATA_DIR`` when omitted (see :func:`care_lab.data.data_dir`)."""
    finetune: Literal["lora", "full"] = "lora"
    """LoRA adapters or full fine-tuning."""
    lora: LoraSettings = LoraSettings()
    """LoRA settings (with ``finetune: lora``)."""
    merge: bool = True
    """Also save a merged model."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Model weights dtype."""
    trl: dict[str, Any] = {}
    """Passed to ``trl.GRPOConfig`` (``num_generations``, ``max_completion_length``, ``use_vllm``, ...)."""


class EvalPolicyConfig(_Config):
    """Settings of ``care train eval-policy``: a policy against the simulated user on held-out profiles.

    Examples:
        >>> EvalPolicyConfig(policy="hf:runs/policy/merged", output_dir="runs/eval").split
        'held_out'
    """

    policy: str
    """Backend spec of the policy, e.g. ``hf:runs/policy_grpo_smoke/merged`` or ``openai:MODEL@URL``."""
    policy_options: dict[str, Any] = {}
    """Policy backend constructor options."""
    output_dir: str
    """Where to write ``dialogues.jsonl``, ``turns.jsonl`` and ``summary.json``."""
    label: str = "policy"
    """The run's name in the records' ``variant`` field (to compare policies in one plot)."""
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT
    """The policy's system prompt."""
    policy_max_tokens: int = Field(default=128, ge=1)
    """Token budget of one policy turn."""
    policy_temperature: float = Field(default=0.7, ge=0)
    """Sampling temperature of the policy."""
    episodes_per_profile: int = Field(default=1, ge=1)
    """Episodes rolled out per held-out profile."""
    batch_size: int = Field(default=8, ge=1)
    """Episodes rolled out together."""
    split: Literal["held_out", "train", "all"] = "held_out"
    """Which profiles to use: ``held_out`` (``users.held_out_path``, never trained on), ``train``
    (``users.path``) or ``all`` (both)."""
    users: UserSettings = UserSettings()
    """Simulated-user profiles (the same settings as training: evaluation reads the held-out file)."""
    simulator: SimulatorSettings = SimulatorSettings()
    """The simulated user."""
    episode: EpisodeSettings = EpisodeSettings()
    """Episode settings (``turn_max_tokens`` is unused: see ``policy_max_tokens``)."""
    judge: JudgeSettings = JudgeSettings()
    """Who judges the episodes: an independent judge by default; ``kind: training_reward`` scores
    them with ``reward`` instead (labelled as the training reward)."""
    user_types: tuple[str, ...] = ("cooperative",)
    """Simulated-user types, each played on every profile (scenario-matched): ``cooperative`` and the
    adversarial ``gaslighting``, ``escalation``, ``validation``, ``hidden_intention``
    (:mod:`care_lab.simulation.adversarial`); the summary has one row per type. Training never uses them."""
    reader: ReaderSettings | None = None
    """A state reader for the consistency score per user type (``null``: none)."""
    reward: RewardSettings = RewardSettings()
    """The CARE reward the policy was trained with; used only with ``judge.kind: training_reward``."""
    data_dir: str | None = None
    """The data directory; ``$CARE_DATA_DIR`` when omitted (see :func:`care_lab.data.data_dir`)."""
    seed: int = 0
    """Sampling seed of the policy."""

    @field_validator("user_types")
    @classmethod
    def _known_user_types(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return check_user_types(value)

    @model_validator(mode="after")
    def _judge_is_independent(self) -> EvalPolicyConfig:
        if self.judge.kind == "independent" and self.judge.backend in (self.reward.generator, self.reward.evaluator):
            raise ValueError(
                f"judge.backend {self.judge.backend!r} is the training reward's generator or evaluator, so it "
                "is not an independent judge; choose another model, or set judge.kind: training_reward"
            )
        if self.reader is not None and self.reader.backend == self.policy:
            raise ValueError(
                f"reader.backend {self.reader.backend!r} is the policy; the policy would read its own replies"
            )
        return self
