"""The policy under training as a :class:`~care_lab.simulation.episodes.TurnPolicy`, at the token level.

TRL's ``GRPOTrainer`` takes a ``rollout_func`` that returns, per sample, the prompt tokens, the
completion tokens and (optionally) an ``env_mask``: 1 for tokens the model wrote, 0 for tokens
the environment inserted. :class:`TokenPolicy` builds exactly that while an episode runs: the
completion is every policy turn in order, with the simulated user's turns (rendered by the chat
template) between them under mask 0, so GRPO's loss and TRL's optimiser see only the policy's own
tokens. Generation uses the trainer's model (transformers) or, with ``use_vllm``, TRL's vLLM
generation (colocated or server mode).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from care_sdk.errors import CareError
from care_sdk.types import Message

__all__ = ["TokenPolicy", "user_turn_ids"]


def _template(tokenizer: Any, messages: list[dict[str, str]], *, generation_prompt: bool) -> list[int]:
    ids = tokenizer.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=generation_prompt, return_dict=False
    )
    return [int(i) for i in ids]


def user_turn_ids(tokenizer: Any, text: str) -> list[int]:
    """The tokens the chat template puts between an assistant turn's end-of-turn token and the next
    assistant turn: the user's message and the assistant generation prompt.

    Derived from a dummy conversation, as TRL does for tool results, so it works for any template
    whose assistant turns end with the tokenizer's EOS token.

    Examples:
        >>> from transformers import AutoTokenizer  # doctest: +SKIP
        >>> tok = AutoTokenizer.from_pretrained(tiny_model_dir())  # doctest: +SKIP
        >>> tok.decode(user_turn_ids(tok, "I see."))  # doctest: +SKIP
        '\\n<|im_start|>user\\nI see.<|im_end|>\\n<|im_start|>assistant\\n'
    """
    dummy = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
    ]
    prefix = _template(tokenizer, dummy, generation_prompt=False)
    eos = tokenizer.eos_token_id
    ends = [i for i, t in enumerate(prefix) if t == eos]
    if ends:
        prefix = prefix[: ends[-1] + 1]
    full = _template(tokenizer, [*dummy, {"role": "user", "content": text}], generation_prompt=True)
    if full[: len(prefix)] != prefix:
        raise ValueError("the chat template does not render a conversation as a prefix of its continuation")
    return full[len(prefix) :]


class TokenPolicy:
    """The trainer's policy, writing each turn as tokens and recording them for GRPO.

    Args:
        trainer: the running ``trl.GRPOTrainer``.
        turn_max_tokens: token budget of one policy turn.

    After :func:`~care_lab.simulation.episodes.run_episodes`, :meth:`rollout_output` gives
    ``prompt_ids``, ``completion_ids``, ``logprobs`` and ``env_mask`` per episode, in order.
    """

    def __init__(self, trainer: Any, *, turn_max_tokens: int, episodes: int) -> None:
        self.trainer = trainer
        self.tokenizer = trainer.processing_class
        self.turn_max_tokens = turn_max_tokens
        self.collective = bool(getattr(trainer, "use_vllm", False))
        self.eos = int(self.tokenizer.eos_token_id)
        self.prompt_ids: list[list[int]] = [[] for _ in range(episodes)]
        self.completion_ids: list[list[int]] = [[] for _ in range(episodes)]
        self.env_mask: list[list[int]] = [[] for _ in range(episodes)]
        self.logprobs: list[list[float]] = [[] for _ in range(episodes)]
        self._seen = [0] * episodes
        self._has_logprobs = False

    def _extend(self, i: int, conversation: Sequence[Message]) -> list[int]:
        """Append what happened since this episode's last turn; return the full sequence so far."""
        if not self.prompt_ids[i]:
            messages = [m.model_dump() for m in conversation]
            self.prompt_ids[i] = _template(self.tokenizer, messages, generation_prompt=True)
        else:
            new = list(conversation[self._seen[i] :])
            if [m.role for m in new] != ["assistant", "user"]:
                raise RuntimeError(f"episode {i}: expected the policy's reply and a user turn, got {new}")
            ids = user_turn_ids(self.tokenizer, new[1].content)
            self.completion_ids[i] += ids
            self.env_mask[i] += [0] * len(ids)
            self.logprobs[i] += [0.0] * len(ids)
        self._seen[i] = len(conversation)
        return self.prompt_ids[i] + self.completion_ids[i]

    def _generate(self, sequences: list[list[int]]) -> tuple[list[list[int]], list[list[float]] | None]:
        if self.collective:
            return self._generate_vllm(sequences)
        return self._generate_hf(sequences), None

    def _generate_hf(self, sequences: list[list[int]]) -> list[list[int]]:
        import torch
        from trl.models.utils import unwrap_model_for_generation

        trainer = self.trainer
        pad_id = self.tokenizer.pad_token_id
        width = max(len(s) for s in sequences)
        input_ids = torch.tensor([[pad_id] * (width - len(s)) + s for s in sequences])
        attention = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences])
        device = trainer.accelerator.device
        config = copy.deepcopy(trainer.generation_config)
        config.max_new_tokens = self.turn_max_tokens
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                generation_kwargs=trainer.generation_kwargs,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
        ):
            out = model.generate(
                input_ids=input_ids.to(device), attention_mask=attention.to(device), generation_config=config
            )
        return [row[width:].tolist() for row in out.cpu()]

    def _generate_vllm(self, sequences: list[list[int]]) -> tuple[list[list[int]], list[list[float]]]:
        generation = self.trainer.vllm_generation
        saved = generation.max_completion_length
        generation.max_completion_length = self.turn_max_tokens
        try:
            _, completion_ids, logprobs, _ = generation.generate(prompts=sequences, images=None, num_generations=1)
        finally:
            generation.max_completion_length = saved
        top1 = [[float(lp[0]) if lp and lp[0] is not None else 0.0 for lp in seq] for seq in logprobs or []]
        return [list(c) for c in completion_ids], top1

    def respond(self, indices: Sequence[int], conversations: Sequence[Sequence[Message]]) -> list[str | CareError]:
        """Generate one turn for each running episode and record its tokens (mask 1)."""
        sequences = [self._extend(i, c) for i, c in zip(indices, conversations, strict=True)]
        if self.collective:
            # every process sends one prompt per episode it holds, finished or not, to every call
            running = dict(zip(indices, sequences, strict=True))
            sequences = [running.get(i, [self.eos]) for i in range(len(self.prompt_ids))]
            order = list(range(len(self.prompt_ids)))
        else:
            order = list(indices)
        if not sequences:
            return []
        generated, logprobs = self._generate(sequences)
        if logprobs is not None:
            self._has_logprobs = True
        wanted = set(indices)
        replies: list[str | CareError] = []
        for k, i in enumerate(order):
            if i not in wanted:
                continue
            ids = list(generated[k])
            if self.eos in ids:
                ids = ids[: ids.index(self.eos) + 1]
            pad_id = self.tokenizer.pad_token_id
            while ids and ids[-1] == pad_id and ids[-1] != self.eos:
                ids.pop()
            lps = list(logprobs[k][: len(ids)]) if logprobs is not None else [0.0] * len(ids)
            mask = [1] * len(ids)
            if not ids or ids[-1] != self.eos:  # cut by the turn budget: close the turn for the template
                ids.append(self.eos)
                lps.append(0.0)
                mask.append(0)
            self.completion_ids[i] += ids
            self.env_mask[i] += mask
            self.logprobs[i] += lps
            replies.append(self.tokenizer.decode(ids, skip_special_tokens=True).strip())
        return replies

    def rollout_output(self) -> dict[str, Any]:
        """The fields TRL's ``rollout_func`` returns: ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask``."""
        return {
            "prompt_ids": self.prompt_ids,
            "completion_ids": self.completion_ids,
            "logprobs": self.logprobs if self._has_logprobs else None,
            "env_mask": self.env_mask,
        }
