"""Forced replies on the transformers backend: a KV cache kept across calls and cut back to the
longest prefix the next sequence shares with it, so a context's prompt is prefilled once for all
its candidates and each slot of a reply costs one short forward pass.

torch is imported inside functions, so this module stays importable without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from care_sdk.backends._hf_decode import _cache_of, _forward_options
from care_sdk.backends.forced import common_prefix

__all__ = ["PrefixCache"]


class PrefixCache:
    """Next-token logprobs for growing token sequences, reusing the KV cache of the previous one.

    Examples:
        >>> cache = PrefixCache(model=None, device="cpu")  # a real model in practice
        >>> cache.evaluated_tokens, cache.ids
        (0, [])
    """

    def __init__(self, model: Any, device: Any) -> None:
        self.model = model
        self.device = device
        self.ids: list[int] = []
        """The token ids whose keys and values the cache holds."""
        self.evaluated_tokens = 0
        """Tokens run through the model so far (what the cache did not already hold)."""
        self._cache: Any = None

    def reset(self) -> None:
        """Forget the cached keys and values."""
        self.ids, self._cache = [], None

    def next_logprobs(self, ids: Sequence[int], wanted: Sequence[int]) -> list[float]:
        """Log-probabilities (over the vocabulary) of each of ``wanted`` right after ``ids``."""
        import torch

        logits = self._forward(ids, min(common_prefix(self.ids, ids), len(ids) - 1), last=1)
        logprobs = torch.log_softmax(logits[-1].float(), dim=-1)
        return [float(logprobs[w]) for w in wanted]

    def span_logprobs(self, ids: Sequence[int], start: int) -> list[float]:
        """Log-probability of each of ``ids[start:]`` after the tokens before it (``start`` >= 1)."""
        import torch

        keep = min(common_prefix(self.ids, ids), start - 1)
        logits = self._forward(ids, keep, last=len(ids) - start + 1)[:-1]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        targets = torch.tensor(list(ids[start:]), dtype=torch.long, device=logprobs.device)
        return [float(v) for v in logprobs.gather(1, targets[:, None])[:, 0]]

    def _forward(self, ids: Sequence[int], keep: int, last: int) -> Any:
        """Logits at the ``last`` final positions of ``ids``, after cutting the cache back to its first
        ``keep`` tokens and running ``ids[keep:]`` (``last <= len(ids) - keep``)."""
        import torch

        if keep == 0:
            self._cache = None
        elif keep < len(self.ids):
            self._cache.crop(keep - len(self.ids))
        extra, cache_arg = _forward_options(self.model)
        if extra:
            extra = {"logits_to_keep": last}
        fresh = torch.tensor([list(ids[keep:])], dtype=torch.long, device=self.device)
        try:
            out = self.model(input_ids=fresh, use_cache=True, **{cache_arg: self._cache}, **extra)
        except BaseException:
            self.reset()  # the cache may hold a partial update
            raise
        self._cache = _cache_of(out)
        self.ids = list(ids)
        self.evaluated_tokens += len(ids) - keep
        return out.logits[0, -last:]
