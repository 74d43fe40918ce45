"""Building the pieces a policy recipe needs from its config: prompts, simulator, CARE reward (the
simulated users' profiles: :func:`care_lab.simulation.profiles.load_profiles`).

Backends named by the same spec string (and options) are built once and shared, so with
``default`` everywhere the bundled model is loaded once for simulator, generator and evaluator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from care_lab.data.roles import require_trainable
from care_lab.simulation.profiles import UserSettings, profiles_file
from care_lab.simulation.simulated_user import SimulatedUser
from care_lab.training.policy.config import PromptSettings, RewardSettings, SimulatorSettings
from care_sdk.addons import add_ons
from care_sdk.backends import BackendPool
from care_sdk.errors import InputError
from care_sdk.evaluator import RubricEvaluator
from care_sdk.generator import RubricGenerator
from care_sdk.reward import AdaptiveReward
from care_sdk.types import Dialogue, Message

__all__ = ["build_reward", "build_simulator", "prompt_rows", "prompts_file", "training_data_file"]


def _data_root(data_dir: str | None, given: str | None = None) -> Path:
    """The data directory; not looked up when the file itself is ``given``."""
    from care_lab.data import data_dir as default_data_dir

    if data_dir is None and given:
        return Path()  # not used: the settings name the file
    return Path(data_dir) if data_dir is not None else default_data_dir()


def build_reward(settings: RewardSettings, pool: BackendPool) -> AdaptiveReward:
    """The CARE reward of a config's ``reward`` section (no generator for ``fixed_rubric``), with its add-ons."""
    chosen = add_ons(settings.add_ons)
    evaluator = RubricEvaluator(
        pool.get(settings.evaluator, settings.evaluator_options, role="evaluator"),
        seed=settings.seed,
        max_tokens=settings.evaluator_max_tokens,
        max_attempts=settings.max_attempts,
        use_logprobs=settings.use_logprobs,
    )
    generator = None
    if settings.variant != "fixed_rubric":
        generator = RubricGenerator(
            pool.get(settings.generator, settings.generator_options, role="generator"),
            criteria_per_dimension=settings.criteria_per_dimension,
            seed=settings.seed,
            max_tokens=settings.generator_max_tokens,
            max_attempts=settings.max_attempts,
            **chosen.generator_options(),
        )
    return AdaptiveReward(generator, evaluator, variant=settings.variant, context_fit=chosen.context_fit)


def build_simulator(settings: SimulatorSettings, pool: BackendPool, *, seed: int = 0) -> SimulatedUser:
    """The simulated user of a config's ``simulator`` section."""
    return SimulatedUser(
        pool.get(settings.backend, settings.options),
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        seed=seed,
        max_attempts=settings.max_attempts,
        max_reply_chars=settings.max_reply_chars,
        max_profile_chars=settings.max_profile_chars,
    )


def prompts_file(settings: PromptSettings, root: Path) -> Path:
    """The file single-turn prompts are read from: ``prompts.path``, else the source's default under ``root``.

    Raises:
        InputError: ``jsonl`` without a path.

    Examples:
        >>> prompts_file(PromptSettings(), Path("data")).as_posix()
        'data/esconv/train.jsonl'
    """
    if settings.path:
        return Path(settings.path)
    if settings.source == "jsonl":
        raise InputError("prompts.source jsonl needs prompts.path", location="prompts.path")
    if settings.source == "esconv":
        return root / "esconv" / "train.jsonl"
    return root / "mint_lend_an_ear" / "training" / "conversations_322.json"


def _dialogues(settings: PromptSettings, root: Path) -> list[Dialogue]:
    path = prompts_file(settings, root)
    require_trainable(path, what="training prompts")
    if settings.source == "jsonl":
        from care_sdk.dialogues import read_dialogues

        out = []
        for line in read_dialogues(path):
            if line.error is not None:
                raise line.error
            assert line.dialogue is not None
            out.append(line.dialogue)
        return out
    if settings.source == "esconv":
        from care_lab.data import load_esconv

        loaded = load_esconv(path)
    else:
        from care_lab.data import load_mint_conversations

        loaded = load_mint_conversations(path)
    return [d.to_dialogue() for d in loaded.records]


def training_data_file(mode: str, prompts: PromptSettings, users: UserSettings, data_dir: str | None = None) -> Path:
    """The file a policy run trains on: the prompts file (single turn) or the training users' file (multi turn).

    Examples:
        >>> training_data_file("multi_turn", PromptSettings(), UserSettings(path="u.jsonl")).as_posix()
        'u.jsonl'
    """
    if mode == "multi_turn":
        return profiles_file(users, "train", _data_root(data_dir, users.path))
    return prompts_file(prompts, _data_root(data_dir, prompts.path))


def prompt_rows(
    settings: PromptSettings, system_prompt: str | None, data_dir: str | None = None
) -> list[dict[str, Any]]:
    """Single-turn GRPO rows: ``prompt`` (system prompt + context), ``context`` (what CARE judges), ``id``.

    The source file must be declared trainable (:mod:`care_lab.data.roles`).

    Raises:
        InputError: the source is missing, malformed or not trainable (named), or yields no context.

    Examples:
        >>> import tempfile, os
        >>> from care_lab.data.roles import write_roles
        >>> d = tempfile.mkdtemp(); p = os.path.join(d, "d.jsonl"); _ = write_roles(d, {"d.jsonl": "train"})
        >>> _ = open(p, "w").write('{"id": "a", "messages": [{"role": "user", "content": "I failed."},'
        ...                        ' {"role": "assistant", "content": "Oh no."}]}\\n')
        >>> row = prompt_rows(PromptSettings(source="jsonl", path=p), "Be kind.")[0]
        >>> [m["role"] for m in row["prompt"]], row["id"]
        (['system', 'user'], 'a:1')
    """
    root = _data_root(data_dir, settings.path)
    dialogues = _dialogues(settings, root)
    if settings.max_dialogues is not None:
        dialogues = dialogues[: settings.max_dialogues]
    head = [Message(role="system", content=system_prompt).model_dump()] if system_prompt else []
    rows = []
    for dialogue in dialogues:
        for k, turn in enumerate(dialogue.turns()):
            if k >= settings.turns_per_dialogue:
                break
            context = [m.model_dump() for m in turn.context if m.role != "system"]
            if settings.max_context_messages is not None:
                context = context[-settings.max_context_messages :]
            if not context or context[-1]["role"] != "user":
                continue
            rows.append({"prompt": head + context, "context": context, "id": f"{dialogue.id}:{turn.index}"})
    if not rows:
        raise InputError("no dialogue context ending with a user message", location=f"prompts.{settings.source}")
    return rows
