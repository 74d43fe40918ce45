"""``care train policy-grpo``: GRPO of a dialogue policy with the frozen CARE reward (TRL ``GRPOTrainer``).

- ``single_turn``: prompts are dialogue contexts from ESConv, MINT or your JSONL; TRL samples G
  replies per context and :class:`~care_lab.training.policy.rewards.PolicyReward` scores each with
  CARE (the ``context`` column, without the policy's system prompt, is what CARE judges).
- ``multi_turn``: prompts are simulated users' openings. TRL's ``rollout_func`` rolls out G
  episodes per profile with the simulated user (:func:`make_rollout_func`); every policy turn is
  scored by CARE against the context at that turn and the episode reward folds the turn rewards.
  The simulated user's tokens are masked out of the loss with ``env_mask``; TRL's optimiser and
  GRPO loss are untouched.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from care_lab.simulation.episodes import run_episodes
from care_lab.simulation.profiles import UserProfile, load_profiles
from care_lab.simulation.simulated_user import SimulatedUser
from care_lab.training._common import (
    GRPORunResult,
    load_model,
    make_trainer,
    reward_log,
    save_outputs,
    stage_setup,
    write_run_files,
)
from care_lab.training.policy.components import build_reward, build_simulator, prompt_rows, training_data_file
from care_lab.training.policy.config import PolicyGRPOConfig
from care_lab.training.policy.curriculum import BoundaryCurriculum
from care_lab.training.policy.rewards import EpisodeRecorder, PolicyReward
from care_sdk.backends import BackendPool
from care_sdk.types import Message

__all__ = ["PolicyGRPOResult", "make_rollout_func", "opening_rows", "run_policy_grpo"]

REWARD_NAME = "care_reward"


@dataclass
class PolicyGRPOResult(GRPORunResult):
    """What a policy-GRPO run produced: the run's ``output_dir``, the ``saved`` model directories, and
    per logged step ``reward`` (TRL's mean), ``care_reward`` and every ``care/...`` metric.

    Examples:
        >>> PolicyGRPOResult(output_dir="runs/policy", rewards=[{"step": 1.0, "reward": 0.4}]).rewards[0]["reward"]
        0.4
    """

    dialogues: str = ""
    """The scored dialogues file (``dialogues.jsonl``)."""
    turns: str = ""
    """The scored turns file (``turns.jsonl``)."""
    curriculum: str | None = None
    """The curriculum's per-step log (``curriculum.jsonl``; ``curriculum.json`` beside it holds all of it and
    the final pass rates and probabilities), with ``curriculum`` set."""


def _key(prompt: Sequence[Any]) -> str:
    return json.dumps([(m["role"], m["content"]) for m in prompt], ensure_ascii=False)


def opening_rows(profiles: Sequence[UserProfile], system_prompt: str | None) -> list[dict[str, Any]]:
    """Multi-turn GRPO rows: ``prompt`` (system prompt + the user's opening) and ``profile_id``.

    Examples:
        >>> p = UserProfile(id="p", source="d", persona="", situation="", goal="", opening="I'm lonely.")
        >>> opening_rows([p], None)
        [{'prompt': [{'role': 'user', 'content': "I'm lonely."}], 'profile_id': 'p'}]
    """
    head = [Message(role="system", content=system_prompt).model_dump()] if system_prompt else []
    return [{"prompt": [*head, p.first_message().model_dump()], "profile_id": p.id} for p in profiles]


def make_rollout_func(
    profiles: Sequence[UserProfile],
    simulator: SimulatedUser,
    *,
    system_prompt: str | None,
    max_turns: int,
    turn_max_tokens: int,
) -> Callable[[list[Any], Any], dict[str, Any]]:
    """TRL's ``rollout_func`` for multi-turn episodes with the simulated user.

    It receives the per-process prompts (each repeated ``num_generations`` times), finds each
    prompt's profile, rolls out one episode per prompt with the trainer's model as policy, and
    returns ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask`` and ``episode`` (each
    episode as a dict, forwarded to the reward function). Profiles that share an opening are used
    in turn, one per group.
    """
    from care_lab.training.policy.tokens import TokenPolicy

    lookup: dict[str, list[UserProfile]] = {}
    for row, profile in zip(opening_rows(profiles, system_prompt), profiles, strict=True):
        lookup.setdefault(_key(row["prompt"]), []).append(profile)
    turns: dict[str, int] = {}
    calls = [0]

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        group = max(1, int(getattr(trainer, "num_generations", 1)))
        chosen: list[UserProfile] = []
        run = 0
        for k, prompt in enumerate(prompts):
            key = _key(prompt)
            if key not in lookup:
                raise ValueError(f"rollout prompt {k} matches no simulated-user profile: {key[:200]}")
            candidates = lookup[key]
            starts_group = k == 0 or key != _key(prompts[k - 1]) or run == group
            run = 1 if starts_group else run + 1
            if starts_group:
                turns[key] = turns.get(key, -1) + 1
            chosen.append(candidates[turns[key] % len(candidates)])
        policy = TokenPolicy(trainer, turn_max_tokens=turn_max_tokens, episodes=len(prompts))
        step = int(trainer.state.global_step)
        rank = os.environ.get("RANK", "0")
        calls[0] += 1
        ids = [f"s{step}-r{rank}-c{calls[0]}-{k}-{p.id}" for k, p in enumerate(chosen)]
        episodes = run_episodes(chosen, policy, simulator, max_turns=max_turns, system_prompt=system_prompt, ids=ids)
        return {**policy.rollout_output(), "episode": [e.model_dump(mode="json") for e in episodes]}

    return rollout


def run_policy_grpo(
    config: PolicyGRPOConfig,
    *,
    pool: BackendPool | None = None,
    source: str = "policy-grpo config",
    log: Callable[[str], None] = print,
    callbacks: list[Any] | None = None,
) -> PolicyGRPOResult:
    """Train the policy with GRPO on the CARE reward and save it under ``config.output_dir``.

    Args:
        config: the run's settings.
        pool: backends to use by spec (e.g. ``BackendPool({"default": backend})`` to share a
            loaded model, or scripted backends in tests); built from the config when omitted.
        source: the config's origin, for error messages.
        log: where progress lines go.
        callbacks: extra ``transformers.TrainerCallback`` objects.

    Raises:
        MissingDependencyError: the ``train`` extra is missing.
        ConfigError: an invalid ``trl`` key or value (named).
        InputError: the prompt or profile data is missing or malformed.
    """
    from care_lab.training._common import GRPO_DEFAULTS

    out, args = stage_setup("grpo", config, GRPO_DEFAULTS, source)
    pool = pool if pool is not None else BackendPool()
    care = build_reward(config.reward, pool)
    multi = config.mode == "multi_turn"
    rollout_func = None
    emotions: dict[str, str | None] = {}
    if multi:
        profiles = load_profiles(config.users, "train", config.data_dir)
        emotions = {p.id: p.emotion for p in profiles}
        simulator = build_simulator(config.simulator, pool, seed=args.seed)
        rows = opening_rows(profiles, config.system_prompt)
        rollout_func = make_rollout_func(
            profiles,
            simulator,
            system_prompt=config.system_prompt,
            max_turns=config.episode.max_turns,
            turn_max_tokens=config.episode.turn_max_tokens,
        )
        what = f"{len(profiles)} {config.users.source} profiles, simulator {simulator!r}"
    else:
        rows = prompt_rows(config.prompts, config.system_prompt, config.data_dir)
        what = f"{len(rows)} {config.prompts.source} contexts"
    for name in ("dialogues.jsonl", "turns.jsonl", "curriculum.jsonl"):
        (out / name).unlink(missing_ok=True)
    recorder = EpisodeRecorder(out, variant=config.reward.variant, emotions=emotions)
    scenario_key = "profile_id" if multi else "id"
    curriculum = None
    if config.curriculum is not None:
        curriculum = BoundaryCurriculum([r[scenario_key] for r in rows], config.curriculum, out / "curriculum.jsonl")
        what += f", competence-boundary sampling (target pass rate {config.curriculum.target})"
    reward = PolicyReward(
        care,
        multi_turn=multi,
        how=config.episode.trajectory,
        gamma=config.episode.gamma,
        recorder=recorder,
        curriculum=curriculum,
        scenario_key=scenario_key,
    )
    model, tokenizer, model_path = load_model(config.model, config.dtype)
    log(f"policy-grpo ({config.mode}, reward {config.reward.variant}): {what}, policy {model_path}")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = make_trainer(
        "grpo",
        config,
        model,
        tokenizer,
        args,
        rows,
        reward_funcs=[reward],
        callbacks=callbacks,
        rollout_func=rollout_func,
        train_sampler=curriculum.sampler if curriculum is not None else None,
    )
    trainer.train()
    rewards = reward_log(trainer.state.log_history, [REWARD_NAME], metrics_prefix="care/")
    saved = save_outputs(trainer, tokenizer, out, merge=config.merge, log=log)
    metrics = {
        "mode": config.mode,
        "variant": config.reward.variant,
        "rewards": rewards,
        "saved": saved,
        "policy": str(model_path),
    }
    write_run_files(out, metrics, trainer.state.log_history, rewards)
    if curriculum is not None:
        _write_curriculum(out / "curriculum.json", curriculum, config)
    return PolicyGRPOResult(
        output_dir=str(out),
        rewards=rewards,
        saved=saved,
        dialogues=str(recorder.dialogues_path),
        turns=str(recorder.turns_path),
        curriculum=str(curriculum.log_path) if curriculum is not None else None,
    )


def _write_curriculum(path: Path, curriculum: BoundaryCurriculum, config: PolicyGRPOConfig) -> None:
    """``curriculum.json``: the training data with its declared role, then the curriculum's whole log."""
    from care_lab.data.roles import data_role

    data = training_data_file(config.mode, config.prompts, config.users, config.data_dir)
    summary = {
        "data": str(data),
        "role": data_role(data),
        "test_reads": 0,  # training reads no test data (refused)
        "model": config.model,
        "mode": config.mode,
        **curriculum.summary(),
    }
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
