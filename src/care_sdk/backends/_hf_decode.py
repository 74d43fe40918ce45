"""Batched decoding for the transformers backend.

One *row* is one sampled completion: a prompt, its sampling settings, its own random generator
and (when the request has a JSON schema) its own llguidance matcher. :func:`decode_rows` runs a
batch of rows through the model together: left-padded prompts, one KV cache, one forward pass
per step, and per row a grammar mask, greedy or nucleus sampling, and top-k logprobs.

Everything heavy (torch, llguidance) is imported by the caller and passed in or imported inside
functions, so this module stays importable without them.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["Row", "allowed_tokens", "decode_rows", "sample_token", "text_pieces"]


@dataclass
class Row:
    """The state of one completion being decoded.

    Examples:
        >>> row = Row(prompt_ids=[1, 2, 3], max_tokens=8)
        >>> row.done, row.tokens
        (False, [])
    """

    prompt_ids: list[int]
    """Token ids of the chat-templated prompt."""
    max_tokens: int
    """Upper bound on generated tokens (EOS excluded)."""
    temperature: float = 0.0
    """0 is greedy; otherwise logits are divided by it before sampling."""
    top_p: float = 1.0
    """Nucleus mass kept when sampling."""
    generator: torch.Generator | None = None
    """The row's own random generator: its samples do not depend on the rest of the batch."""
    matcher: Any = None
    """An ``llguidance.LLMatcher`` constraining the row, or ``None``."""
    top_logprobs: int | None = None
    """When set, record this many alternatives with every generated token."""
    tokens: list[int] = field(default_factory=list)
    """Generated token ids so far."""
    logprobs: list[tuple[float, tuple[tuple[int, float], ...]]] = field(default_factory=list)
    """Per generated token: its logprob and the top alternatives ``(token_id, logprob)``."""
    finish_reason: str | None = None
    """``"stop"`` (EOS or grammar complete), ``"length"`` (max_tokens), or ``None`` while running."""
    error: str | None = None
    """Why the row failed (a grammar error), if it did."""

    @property
    def done(self) -> bool:
        """Whether the row has finished or failed."""
        return self.finish_reason is not None or self.error is not None


def allowed_tokens(matcher: Any, vocab_size: int) -> torch.Tensor:
    """The boolean mask of tokens a matcher allows next, sized to the model's vocabulary.

    Tokens beyond the matcher's vocabulary (padding rows of the output layer) are never allowed.

    Examples:
        >>> class Everything:  # a stand-in matcher that allows all 40 tokens of its vocabulary
        ...     def compute_bitmask(self) -> bytes:
        ...         return bytes([255] * 5)
        >>> allowed_tokens(Everything(), 42).tolist()[38:]
        [True, True, False, False]
    """
    import numpy as np
    import torch

    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
    mask = np.zeros(vocab_size, dtype=bool)
    n = min(vocab_size, bits.shape[0])
    mask[:n] = bits[:n].astype(bool)
    return torch.from_numpy(mask)


def sample_token(scores: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None) -> int:
    """Pick the next token from one row of (already masked) logits.

    Greedy when ``temperature <= 0``; otherwise softmax at ``temperature``, restricted to the
    smallest set of tokens whose mass reaches ``top_p``, sampled with ``generator``.

    Examples:
        >>> import torch
        >>> sample_token(torch.tensor([0.0, 3.0, 1.0]), 0.0, 1.0, None)
        1
        >>> g = torch.Generator().manual_seed(0)
        >>> sample_token(torch.tensor([0.0, 9.0, float("-inf")]), 1.0, 0.5, g)
        1
    """
    import torch

    if temperature <= 0:
        return int(torch.argmax(scores).item())
    probs = torch.softmax(scores.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        drop = cumulative - sorted_probs >= top_p  # keep the tokens needed to reach top_p
        sorted_probs[drop] = 0.0
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    # Inverse-CDF sampling: one uniform draw, much faster than torch.multinomial over a large vocabulary.
    cdf = torch.cumsum(probs, dim=-1)
    draw = torch.rand((), generator=generator) * cdf[-1]
    index = int(torch.searchsorted(cdf, draw.unsqueeze(0), right=True).item())
    return min(index, int(probs.shape[0]) - 1)


def text_pieces(decode: Any, token_ids: Sequence[int]) -> list[str]:
    """Split the decoded text of ``token_ids`` into one piece per token, so the pieces join to the text.

    A token that ends inside a multi-byte character gets an empty piece; the next one carries it.

    Examples:
        >>> vocab = {1: "Hel", 2: "lo", 3: "!"}
        >>> text_pieces(lambda ids: "".join(vocab[i] for i in ids), [1, 2, 3])
        ['Hel', 'lo', '!']
    """
    pieces: list[str] = []
    clean = ""
    for i in range(len(token_ids)):
        current = str(decode(list(token_ids[: i + 1])))
        if current.endswith("\ufffd") and i < len(token_ids) - 1:
            pieces.append("")
            continue
        pieces.append(current[len(clean) :])
        clean = current
    return pieces


def _forward_options(model: Any) -> tuple[dict[str, Any], str]:
    """Extra forward kwargs (logits of the last position only) and the name of the cache argument.

    transformers 5.24 renamed ``past_key_values`` to ``cache``; both are supported.
    """
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft wrapper forwards kwargs
    try:
        params = inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    extra = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    return extra, "cache" if "cache" in params else "past_key_values"


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def decode_rows(model: Any, rows: Sequence[Row], *, pad_id: int, eos_ids: frozenset[int], device: Any) -> None:
    """Decode ``rows`` together, updating each in place until all are done.

    Args:
        model: a causal LM returning ``logits`` and ``past_key_values``.
        rows: the rows; each keeps its own settings, generator and matcher.
        pad_id: the token used for left padding and for rows that have finished.
        eos_ids: the token ids that end a completion.
        device: where the model lives.
    """
    import torch

    if not rows:
        return
    width = max(len(r.prompt_ids) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, width - len(row.prompt_ids) :] = torch.tensor(row.prompt_ids, dtype=torch.long)
        attention[i, width - len(row.prompt_ids) :] = 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    extra, cache_arg = _forward_options(model)
    input_ids, attention, positions = input_ids.to(device), attention.to(device), positions.to(device)
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True, **extra)
    cache = _cache_of(out)
    last_position = positions[:, -1:]
    vocab_size = int(out.logits.shape[-1])
    active = list(range(len(rows)))  # batch position -> row index
    for _ in range(max(r.max_tokens for r in rows)):
        logits = out.logits[:, -1, :].float().cpu()
        next_ids = [pad_id] * len(active)
        for j, i in enumerate(active):
            if rows[i].done:
                continue
            token = _step(rows[i], logits[j], vocab_size, eos_ids)
            if token is not None:
                next_ids[j] = token
        keep = [j for j, i in enumerate(active) if not rows[i].done]
        if not keep:
            break
        if len(keep) < len(active) and hasattr(cache, "batch_select_indices"):
            # Drop finished rows from the batch so they cost nothing from here on.
            index = torch.tensor(keep, dtype=torch.long, device=device)
            cache.batch_select_indices(index)
            attention, last_position = attention[index], last_position[index]
            active, next_ids = [active[j] for j in keep], [next_ids[j] for j in keep]
        step_ids = torch.tensor(next_ids, dtype=torch.long, device=device).unsqueeze(-1)
        attention = torch.cat([attention, torch.ones_like(step_ids)], dim=-1)
        last_position = last_position + 1
        out = model(
            input_ids=step_ids,
            attention_mask=attention,
            position_ids=last_position,
            use_cache=True,
            **{cache_arg: cache},
            **extra,
        )
        cache = _cache_of(out)
    for row in rows:
        if not row.done:
            row.finish_reason = "length"


def _step(row: Row, logits: torch.Tensor, vocab_size: int, eos_ids: frozenset[int]) -> int | None:
    """Choose, record and consume one token for ``row``; return it, or ``None`` when the row ends."""
    import torch

    scores = logits
    if row.matcher is not None:
        mask = allowed_tokens(row.matcher, vocab_size)
        if row.matcher.is_error() or not bool(mask.any()):
            row.error = row.matcher.get_error() or "the grammar allows no next token"
            return None
        scores = logits.masked_fill(~mask, float("-inf"))
    token = sample_token(scores, row.temperature, row.top_p, row.generator)
    if token in eos_ids:
        row.finish_reason = "stop"
        return None
    if row.top_logprobs is not None:
        logprobs = torch.log_softmax(logits, dim=-1)
        k = min(row.top_logprobs, vocab_size)
        top_values, top_ids = torch.topk(logprobs, k) if k > 0 else (logprobs[:0], logprobs[:0].long())
        top = tuple((int(t), float(v)) for t, v in zip(top_ids.tolist(), top_values.tolist(), strict=True))
        row.logprobs.append((float(logprobs[token]), top))
    row.tokens.append(token)
    if row.matcher is not None:
        if not row.matcher.consume_token(token):
            row.error = row.matcher.get_error() or f"the grammar rejected token {token}"
            return None
        if row.matcher.is_stopped():
            row.finish_reason = "stop"
            return None
    if len(row.tokens) >= row.max_tokens:
        row.finish_reason = "length"
        return None
    return token
