"""Per-turn CARE rewards for verl's multi-turn rollouts, each on the last token of its assistant turn.

verl's agent loop lays a multi-turn rollout out as one response per sample: the assistant turns the
policy generated and the observation turns between them (user or tool messages, chat-templated),
with ``response_mask`` 1 on generated tokens and 0 on observation and padding tokens. Its trainer
reads ``rm_scores`` (``[batch, response_length]``) as the token-level scores. This module scores every
assistant turn against the dialogue before it (a rubric per context, as
:class:`~care_sdk.TrajectoryReward`) and puts each turn's reward on that turn's last generated token:

- :func:`assistant_turn_ends`: the turn boundaries from ``response_mask`` (the last index of each run
  of 1s), or :func:`assistant_mask` to rebuild the mask from the tokens and a ChatML or Llama 3 tokenizer.
- :func:`score_turns_batch`: dialogues as chat messages plus their turn ends in, token rewards out.
- :func:`turn_rewards_from_tokens`: verl's token layout (prompts, responses, response mask, tokenizer)
  in, the ``rm_scores`` tensor and verl's ``reward_extra_info`` columns out.
- :class:`CareTurnRewardManager`: a verl reward manager (``reward.reward_manager.source=importlib``)
  whose ``assemble_rm_scores`` places the turn rewards, so verl trains on them as they are.

``how`` scales what is placed: ``None`` (default) puts each turn's own reward; ``"mean"``,
``"last"`` or ``"discounted"`` put ``r_t * w_t / sum(w)``, so a row sums to the episode reward of
:class:`~care_sdk.TrajectoryReward` (what GRPO's outcome advantage reads, since it sums the row).

Examples:
    >>> from care_sdk import AdaptiveReward
    >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
    >>> backend = ScriptedBackend(lambda req: rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
    ...                           if req.purpose == "rubric" else evaluation_json([5, 5, 5, 5, 1, 1]))
    >>> dialogue = [{"role": "user", "content": "I lost my job."}, {"role": "assistant", "content": "I'm sorry."},
    ...             {"role": "user", "content": "It was ten years."}, {"role": "assistant", "content": "A long time."}]
    >>> out = score_turns_batch([dialogue], [[3, 9]], 12, reward=AdaptiveReward.from_backend(backend))[0]
    >>> out.token_rewards
    [0.0, 0.0, 0.0, 0.75, 0.0, 0.0, 0.0, 0.0, 0.0, 0.75, 0.0, 0.0]
    >>> out.extras["care_turns"], out.extras["care_turn_rewards"], out.extras["score"]
    (2.0, '[0.75, 0.75]', 1.5)
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from care_sdk.errors import CareError, ConfigError, InputError
from care_sdk.integrations.verl import DEFAULT_PROFILE_KEY, get_reward, read_profile
from care_sdk.profiles import ProfileLike, as_profiles
from care_sdk.reward import AdaptiveReward
from care_sdk.serve.protocol import split_query
from care_sdk.trajectory import Aggregation
from care_sdk.types import DIMENSIONS, Dialogue, Message, Messages, RewardResult, dialogue_turns

__all__ = [
    "CareTurnRewardManager",
    "TurnRewards",
    "assistant_mask",
    "assistant_turn_ends",
    "score_turns_batch",
    "token_turns",
    "turn_rewards_from_tokens",
]

logger = logging.getLogger(__name__)

_REPLY_HEADS = ("<|im_start|>assistant\n", "<|start_header_id|>assistant<|end_header_id|>\n\n")
_TURN_ENDS = ("<|im_end|>", "<|eot_id|>")
_Item = tuple[Messages, str]


def _weights(n: int, how: Aggregation | None, gamma: float) -> list[float]:
    """Each turn's share of the episode reward, as :func:`care_sdk.trajectory.aggregate_turn_rewards` weighs it."""
    if how is None or how == "mean":
        return [1.0] * n
    if how == "last":
        return [0.0] * (n - 1) + [1.0] if n else []
    return [gamma ** (n - 1 - t) for t in range(n)]


def _ints(values: Any) -> list[int]:
    return [int(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]


def assistant_turn_ends(response_mask: Any, attention_mask: Any = None) -> list[int]:
    """The position of each assistant turn's last token: the last index of each run of 1s in the mask.

    Args:
        response_mask: verl's ``response_mask`` row (1 on generated tokens), a list or a tensor.
        attention_mask: the response part of ``attention_mask``; when given, padding is masked out too.

    Examples:
        >>> assistant_turn_ends([1, 1, 1, 0, 0, 1, 1, 0, 0])
        [2, 6]
    """
    mask = _ints(response_mask)
    if attention_mask is not None:
        mask = [m * a for m, a in zip(mask, _ints(attention_mask), strict=True)]
    return [i for i, m in enumerate(mask) if m and (i + 1 == len(mask) or not mask[i + 1])]


def assistant_mask(prompt_ids: Any, response_ids: Any, tokenizer: Any) -> list[int]:
    """Rebuild verl's ``response_mask`` from the tokens of a ChatML or Llama 3 conversation.

    A response token is generated (1) when it follows an assistant header and is not past that
    turn's end-of-turn token (which the policy generates, so it counts); observation tokens and
    padding are 0. For the layouts where verl passes no ``response_mask`` (its streaming reward loop).

    Raises:
        InputError: the prompt does not end with a ChatML or Llama 3 assistant header.

    Examples:
        >>> from types import SimpleNamespace
        >>> pieces = ["<|im_start|>", "assistant\\n", "Hi", "<|im_end|>", "\\n<|im_start|>", "user\\n", "x",
        ...           "<|im_end|>", "\\n<|im_start|>", "assistant\\n", "Yo", "<|im_end|>", "<pad>"]
        >>> tok = SimpleNamespace(decode=lambda ids, **kw: "".join(pieces[i] for i in ids))
        >>> assistant_mask([0, 1], list(range(2, 13)), tok)
        [1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0]
    """
    prompt_text = tokenizer.decode(_ints(prompt_ids), skip_special_tokens=False)
    if not prompt_text.endswith(_REPLY_HEADS):
        raise InputError("verl sample: the prompt does not end with a ChatML or Llama 3 assistant header")
    tail, inside, mask = prompt_text[-64:], True, []
    for token in _ints(response_ids):
        piece = tokenizer.decode([token], skip_special_tokens=False)
        tail = (tail + piece)[-64:]
        if inside:
            mask.append(1)
            inside = not any(end in piece for end in _TURN_ENDS)
        else:
            mask.append(0)
            inside = tail.endswith(_REPLY_HEADS)
    return mask


def token_turns(
    prompt_ids: Any, response_ids: Any, tokenizer: Any, response_mask: Any = None
) -> list[tuple[Messages, str, int]]:
    """Each assistant turn of a verl sample as ``(context, reply, last token position)``.

    The text up to each turn's last token is decoded and read back into chat messages
    (:func:`care_sdk.serve.protocol.split_query`; ChatML and Llama 3 templates). The context keeps
    the user and assistant turns (the system prompt is the policy's, not judged).

    Raises:
        InputError: a turn could not be read back into messages.

    Examples:
        >>> from types import SimpleNamespace
        >>> pieces = ["<|im_start|>user\\nI failed.<|im_end|>\\n<|im_start|>assistant\\n", "Oh no.", "<|im_end|>"]
        >>> tok = SimpleNamespace(decode=lambda ids, **kw: "".join(pieces[i] for i in ids))
        >>> token_turns([0], [1, 2], tok, response_mask=[1, 1])
        [((Message(role='user', content='I failed.'),), 'Oh no.', 1)]
    """
    prompt, response = _ints(prompt_ids), _ints(response_ids)
    mask = assistant_mask(prompt, response, tokenizer) if response_mask is None else _ints(response_mask)
    out = []
    for end in assistant_turn_ends(mask[: len(response)]):
        text = tokenizer.decode(prompt + response[: end + 1], skip_special_tokens=False)
        split = split_query(text)
        if split.error is not None or isinstance(split.context, str):
            raise InputError(f"verl sample: the turn ending at response token {end} cannot be read back: {split.error}")
        context = dialogue_turns(split.context)
        out.append((context, split.reply, end))
    return out


@dataclass(frozen=True)
class TurnRewards:
    """One sample's per-turn rewards, placed on tokens, with verl's extra columns.

    Examples:
        >>> TurnRewards(token_rewards=[0.0, 0.5], turn_ends=(1,), turn_rewards=(0.5,)).score
        0.5
    """

    token_rewards: list[float]
    """One value per response token: each turn's (scaled) reward on its last token, 0 elsewhere."""
    turn_ends: tuple[int, ...]
    """The last token position of each assistant turn."""
    turn_rewards: tuple[float | None, ...]
    """Each turn's CARE reward (``None``: could not be scored)."""
    turns: tuple[RewardResult, ...] = ()
    """The turn results that explain the rewards (rubrics, per-dimension scores, errors)."""
    extras: dict[str, float | str] = field(default_factory=dict)
    """verl's ``reward_extra_info`` for this sample: scalars and strings, the same keys for every sample."""

    @property
    def score(self) -> float:
        """The row sum of :attr:`token_rewards` (what verl logs as the sample's score)."""
        return math.fsum(self.token_rewards)


def _extras(placed: list[float], rewards: list[float | None], turns: Sequence[RewardResult]) -> dict[str, float | str]:
    out: dict[str, float | str] = {
        "score": math.fsum(placed),
        "care_turns": float(len(rewards)),
        "care_failed": float(any(r is None for r in rewards)),
        "care_first_turn": math.nan if not rewards or rewards[0] is None else rewards[0],
        "care_last_turn": math.nan if not rewards or rewards[-1] is None else rewards[-1],
        "care_turn_rewards": json.dumps(rewards),
    }
    for dim in DIMENSIONS:
        scores = [t.dimension_scores[dim] for t in turns if t.dimension_scores and dim in t.dimension_scores]
        weights = [t.rubric.weights[dim] for t in turns if t.rubric is not None]
        out[f"care_{dim.value}"] = math.fsum(scores) / len(scores) if scores else math.nan
        out[f"care_weight_{dim.value}"] = math.fsum(weights) / len(weights) if weights else math.nan
    return out


def _check(how: Aggregation | None, gamma: float, on_error: str | float) -> str | float:
    if how is not None and how not in ("mean", "last", "discounted"):
        raise ConfigError(f"how must be None, 'mean', 'last' or 'discounted', got {how!r}")
    if not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"gamma must be in [0, 1], got {gamma}")
    if on_error == "raise":
        return on_error
    try:
        return float(on_error)
    except (TypeError, ValueError):
        raise ConfigError(f"on_error must be 'raise' or a number, got {on_error!r}") from None


def _score(
    samples: Sequence[Sequence[tuple[_Item, int]]],
    lengths: Sequence[int],
    reward: AdaptiveReward | None,
    how: Aggregation | None,
    gamma: float,
    on_error: str | float,
    profiles: Sequence[ProfileLike] | None = None,
) -> list[TurnRewards]:
    policy = _check(how, gamma, on_error)
    users = as_profiles(profiles, len(samples), "verl profiles")
    if reward is None:
        reward = get_reward()
    chosen = [list(turns[-1:]) if how == "last" else list(turns) for turns in samples]
    items = [item for turns in chosen for item, _ in turns]
    per_turn = [user for turns, user in zip(chosen, users, strict=True) for _ in turns]
    results = reward.score_batch(items, per_turn) if items else []
    out, start = [], 0
    for index, (turns, length) in enumerate(zip(chosen, lengths, strict=True)):
        mine = results[start : start + len(turns)]
        start += len(turns)
        ends = [end for _, end in turns]
        rewards = [r.reward for r in mine]
        weights = _weights(len(turns), how, gamma)
        total = (sum(weights) or 1.0) if how is not None else 1.0
        placed = [0.0] * length
        for position, (end, value, weight) in enumerate(zip(ends, rewards, weights, strict=True)):
            if not 0 <= end < length:
                raise InputError(f"verl sample {index}: turn end {end} is outside the response ({length} tokens)")
            if value is None:
                error = f"verl sample {index}, turn {position} (response token {end}): {mine[position].error}"
                if policy == "raise":
                    raise CareError(error)
                logger.warning("%s; scoring the turn %s", error, policy)
                value = float(policy)
            placed[end] = value * weight / total
        out.append(
            TurnRewards(
                token_rewards=placed,
                turn_ends=tuple(ends),
                turn_rewards=tuple(rewards),
                turns=tuple(mine),
                extras=_extras(placed, rewards, mine),
            )
        )
    return out


def score_turns_batch(
    dialogues: Sequence[Sequence[Message | Mapping[str, Any]]],
    turn_ends: Sequence[Sequence[int]],
    response_length: int | Sequence[int],
    *,
    reward: AdaptiveReward | None = None,
    how: Aggregation | None = None,
    gamma: float = 0.9,
    on_error: str | float = "raise",
    profiles: Sequence[ProfileLike] | None = None,
) -> list[TurnRewards]:
    """Score the assistant turns of dialogues given as chat messages, and place each on its turn end.

    All turns of all dialogues go to the backend in one batch; G samples whose first turn has the
    same context share its rubric.

    Args:
        dialogues: per sample, the whole conversation (prompt and rollout) as chat messages; the
            k-th assistant message that follows another message is turn k.
        turn_ends: per sample, the response position of each assistant turn's last token.
        response_length: the response length (one for all samples, or one per sample).
        reward: the per-turn reward (default: :func:`care_sdk.integrations.verl.get_reward`, from
            ``$CARE_BACKEND``, ``$CARE_RUBRIC_CACHE`` and ``$CARE_ADD_ONS``).
        how: ``None`` (each turn's own reward) or an aggregation whose weights scale the turns
            (``"last"`` scores only the final turn).
        gamma: the discount for ``"discounted"``.
        on_error: ``"raise"`` (default) or the value a turn CARE could not score gets (such samples
            have ``care_failed=1.0`` and a logged warning).
        profiles: per sample, the user's profile (:mod:`care_sdk.profiles`), used for every turn of it;
            ``None`` for none.

    Raises:
        InputError: the numbers of assistant turns and turn ends differ, an end is out of range, or
            ``profiles`` has another length or an entry that is not a profile.
        CareError: a turn could not be scored and ``on_error="raise"``.

    Examples:
        >>> from care_sdk import AdaptiveReward, Rubric
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json
        >>> reward = AdaptiveReward.from_backend(ScriptedBackend(lambda r: evaluation_json([5] * 6)),
        ...                                      rubric=Rubric.uniform_fixed())
        >>> dialogue = [{"role": "user", "content": "I lost my job."}, {"role": "assistant", "content": "Oh no."}]
        >>> [sample] = score_turns_batch([dialogue], [[2]], 4, reward=reward)
        >>> sample.token_rewards, sample.turn_rewards
        ([0.0, 0.0, 1.0, 0.0], (1.0,))
    """
    lengths = [response_length] * len(dialogues) if isinstance(response_length, int) else list(response_length)
    if len(turn_ends) != len(dialogues) or len(lengths) != len(dialogues):
        raise InputError(f"verl batch: {len(dialogues)} dialogues, {len(turn_ends)} turn ends, {len(lengths)} lengths")
    samples = []
    for index, (messages, ends) in enumerate(zip(dialogues, turn_ends, strict=True)):
        kept = dialogue_turns(messages)
        turns = list(Dialogue(messages=kept).turns()) if kept else []
        if len(turns) != len(ends):
            raise InputError(f"verl sample {index}: {len(turns)} assistant turns but {len(ends)} turn ends")
        samples.append([((t.context, t.reply), int(e)) for t, e in zip(turns, ends, strict=True)])
    return _score(samples, lengths, reward, how, gamma, on_error, profiles)


def turn_rewards_from_tokens(
    prompts: Any,
    responses: Any,
    tokenizer: Any,
    *,
    response_mask: Any = None,
    attention_mask: Any = None,
    reward: AdaptiveReward | None = None,
    how: Aggregation | None = None,
    gamma: float = 0.9,
    on_error: str | float = "raise",
    profiles: Sequence[ProfileLike] | None = None,
) -> tuple[Any, dict[str, list[Any]]]:
    """verl's batch layout in, ``(rm_scores, reward_extra_info)`` out, each turn's reward on its last token.

    Args:
        prompts: ``batch["prompts"]``, ``[batch, prompt_length]`` (left-padded).
        responses: ``batch["responses"]``, ``[batch, response_length]`` (right-padded).
        tokenizer: the policy's tokenizer (ChatML or Llama 3 chat template).
        response_mask: ``batch["response_mask"]``; without it, rebuilt with :func:`assistant_mask`.
        attention_mask: ``batch["attention_mask"]`` (``[batch, prompt_length + response_length]``):
            drops the prompt's left padding and the response's right padding.
        reward: how: gamma: on_error: profiles: as in :func:`score_turns_batch`.

    Returns:
        ``rm_scores`` (a float32 tensor shaped like ``responses`` when it is a tensor, else lists)
        and the extra columns, one list per key, one value per sample.

    Examples:
        >>> from transformers import AutoTokenizer  # doctest: +SKIP
        >>> tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")  # doctest: +SKIP
        >>> scores, extra = turn_rewards_from_tokens(batch["prompts"], batch["responses"], tokenizer,
        ...                                          response_mask=batch["response_mask"])  # doctest: +SKIP
        >>> scores.shape == batch["responses"].shape  # doctest: +SKIP
        True
    """
    rows_p, rows_r = [_ints(p) for p in prompts], [_ints(r) for r in responses]
    masks = [None] * len(rows_r) if response_mask is None else [_ints(m) for m in response_mask]
    samples, lengths = [], []
    for i, (p, r, m) in enumerate(zip(rows_p, rows_r, masks, strict=True)):
        if attention_mask is not None:
            att = _ints(attention_mask[i])
            p = [t for t, a in zip(p, att[: len(p)], strict=True) if a]
            valid = sum(att[len(rows_p[i]) :])
            r, m = r[:valid], (m[:valid] if m is not None else None)
        turns = token_turns(p, r, tokenizer, m)
        samples.append([((c, reply), end) for c, reply, end in turns])
        lengths.append(len(rows_r[i]))
    scored = _score(samples, lengths, reward, how, gamma, on_error, profiles)
    rows = [s.token_rewards for s in scored]
    extras = {key: [s.extras[key] for s in scored] for key in (scored[0].extras if scored else {})}
    if type(responses).__module__.startswith("torch"):
        import torch

        return torch.tensor(rows, dtype=torch.float32, device=responses.device), extras
    return rows, extras


class CareTurnRewardManager:
    """A verl reward manager that trains on CARE's per-turn rewards (verl's reward loop, 0.9).

    Plug it in with ``reward.reward_manager.source=importlib``,
    ``reward.reward_manager.module.path=<this file>``, ``reward.reward_manager.name=CareTurnRewardManager``.
    verl builds it as ``cls(config, tokenizer, compute_score, **kwargs)`` in each reward worker, calls
    ``await run_single(data)`` per rollout and ``cls.assemble_rm_scores(data, scores)`` on the batch.
    Options are class attributes (subclass to change them); the reward comes from ``$CARE_BACKEND``,
    ``$CARE_RUBRIC_CACHE`` and ``$CARE_ADD_ONS``. A rollout whose ``extra_info`` holds a profile under
    :attr:`profile_key` (as :func:`care_sdk.integrations.verl.make_row` writes it) is judged as said to
    that user, every turn of it.

    Where verl scores the batch after the rollout (``assemble_rm_scores``, used when a reward model
    is enabled on the actor's GPUs), each turn's reward lands on its turn's last token. Where verl
    streams rewards from the agent loop, it places one number per sample on the last token itself:
    ``run_single`` then returns the row sum (the episode reward under ``how``).

    Examples:
        >>> manager = CareTurnRewardManager(config=None, tokenizer=None, compute_score=None)
        >>> manager.how, manager.on_error
        (None, 'raise')
    """

    how: Aggregation | None = None
    """As in :func:`score_turns_batch`."""
    gamma: float = 0.9
    """The discount for ``how="discounted"``."""
    on_error: str | float = "raise"
    """``"raise"`` or the value of a turn CARE could not score."""
    reward: AdaptiveReward | None = None
    """The per-turn reward (default: from the environment)."""
    profile_key: str = DEFAULT_PROFILE_KEY
    """The ``extra_info`` key holding the user's profile (see :func:`care_sdk.integrations.verl.make_row`)."""

    def __init__(self, config: Any = None, tokenizer: Any = None, compute_score: Any = None, **_: Any) -> None:
        self.config = config
        self.tokenizer = tokenizer

    async def run_single(self, data: Any) -> dict[str, Any]:
        """Score one rollout (verl's ``RewardManagerBase.run_single``): ``reward_score`` and ``reward_extra_info``.

        ``reward_score`` is the list of ``(position, value)`` pairs to place when ``data`` carries
        ``response_mask`` (verl's batch layout), else the row sum.
        """
        import asyncio

        item = data[-1:][0]
        batch = item.batch
        extra_info = (getattr(item, "non_tensor_batch", None) or {}).get("extra_info")
        profile = read_profile(extra_info, self.profile_key, "verl rollout")
        has_mask = "response_mask" in batch.keys()  # noqa: SIM118  # a TensorDict refuses `in` without keys()
        mask = batch["response_mask"] if has_mask else None
        rm, extras = await asyncio.get_running_loop().run_in_executor(
            None,
            lambda: turn_rewards_from_tokens(
                [batch["prompts"]],
                [batch["responses"]],
                self.tokenizer,
                response_mask=None if mask is None else [mask],
                attention_mask=[batch["attention_mask"]],
                reward=self.reward,
                how=self.how,
                gamma=self.gamma,
                on_error=self.on_error,
                profiles=[profile],
            ),
        )
        row = [float(v) for v in (rm[0].tolist() if hasattr(rm[0], "tolist") else rm[0])]
        info = {key: values[0] for key, values in extras.items()}
        if mask is None:
            return {"reward_score": math.fsum(row), "reward_extra_info": info}
        return {"reward_score": [(i, v) for i, v in enumerate(row) if v], "reward_extra_info": info}

    @classmethod
    def assemble_rm_scores(cls, data: Any, scores: Sequence[Any]) -> Any:
        """verl's ``assemble_rm_scores``: a ``[batch, response_length]`` tensor with each turn's reward placed."""
        import torch

        responses = data.batch["responses"]
        rm_scores = torch.zeros_like(responses, dtype=torch.float32)
        for row, placed in enumerate(scores):
            if isinstance(placed, int | float):  # one number (the streaming layout): on the last valid token
                prompt_len = data.batch["prompts"].size(1)
                last = int(data.batch["attention_mask"][row, prompt_len:].sum()) - 1
                rm_scores[row, last] = float(placed)
                continue
            for position, value in placed:
                rm_scores[row, int(position)] = float(value)
        return rm_scores
