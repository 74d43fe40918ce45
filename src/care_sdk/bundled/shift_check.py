"""A second reading of context fit: how the context moves the model's hidden state of the reply.

Context fit's PMI (:class:`~care_sdk.bundled.context_fit.ContextFit`) asks how much likelier a reply is
after its context than after "Hi.". The same model's hidden states say more: read the reply after
its context and after "Hi.", and the difference of the two mean states of the reply's tokens (its
*shift*) tells a reply written for the conversation from another conversation's better than the
PMI alone. :class:`ShiftCheck` is a linear ranking probe on the reply's PMI and its shift at one
layer, fitted on ESConv train pairs (a reference reply against a reply from another train
conversation), with a gate that turns its score into a probability. It only takes away: its
factor is ``min(1, gate(score) / saturation)``, so a reply the probe finds at least that likely
written for the context keeps its fit whole, and a reply it doubts keeps that share of it.

The texts are read as the probe was fitted: the context's last ``window`` messages as raw
``User: ...`` / ``Supporter: ...`` lines ending in ``Supporter:``, and the reply after a space
(:func:`check_prefix`). The bundled check (:meth:`ShiftCheck.bundled`) was fitted by
``benchmarks/bench_fit_probe.py --export`` on the bundled base model read on llama.cpp; it holds
for that model, against "Hi." as the baseline (``docs/research/context_fit.md``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from care_sdk.errors import CareError, ConfigError, ContextOverflowError
from care_sdk.prompts import Context
from care_sdk.types import Message, as_messages

__all__ = ["ShiftCheck", "ShiftReader", "check_prefix"]

_BUNDLED = "shift_check.json"
NEUTRAL_PREFIX = "User: Hi.\nSupporter:"
"""What a reply is read after for the second half of its shift: the neutral message "Hi."."""
READS = "r2"
"""How :class:`ShiftReader` reads a reply's states, part of :attr:`ShiftCheck.identity` so that
factors read one way are not mixed with the other's. ``r2``: the reply's own tokens computed after
the prefix's (the prefix once for its replies). ``r1`` (what the bundled check was fitted on) read
the prefix with the reply whole and took the difference with the prefix's reading, three times
the work. Both are llama.cpp's rounding of the same states, equally far from transformers' float32
reading (``benchmarks/bench_shift_reads.py``)."""


def check_prefix(context: Context, window: int) -> str:
    """The text a reply is read after: the context's last ``window`` messages as raw lines, then
    ``Supporter:``.

    Examples:
        >>> check_prefix([{"role": "user", "content": "I failed. "}, {"role": "assistant", "content": "Oh no."}], 6)
        'User: I failed.\\nSupporter: Oh no.\\nSupporter:'
        >>> check_prefix("Hi.", 6) == NEUTRAL_PREFIX
        True
    """
    lines = [f"{'User' if m.role == 'user' else 'Supporter'}: {m.content.strip()}" for m in as_messages(context)]
    return "\n".join(lines[-window:]) + "\nSupporter:"


@dataclass(frozen=True)
class ShiftCheck:
    """A linear probe on a reply's PMI and its shift, and the factor it puts on context fit.

    Examples:
        >>> check = ShiftCheck(layer=1, window=6, weights=[1.0, 2.0], scale=[1.0, 1.0], slope=1.0, intercept=0.0,
        ...     saturation=0.5)
        >>> round(check.score(1.0, [0.5]), 3), check.factor(1.0, [0.5])  # gate(2.0) = 0.88 >= 0.5: kept whole
        (2.0, 1.0)
        >>> round(check.factor(-1.0, [0.0]), 3)  # gate(-1.0) = 0.27: a little over half the fit kept
        0.538
    """

    layer: int
    """Which hidden state is read: ``hidden_states[layer]``, the output of the first ``layer`` decoder layers."""
    window: int
    """How many of the context's last messages are read before the reply."""
    weights: list[float]
    """The probe's weights: the PMI's first, then one per hidden-state feature."""
    scale: list[float]
    """What each feature is divided by before the weights (their spread on the training pairs)."""
    slope: float
    """The gate on the probe's score: ``sigmoid(slope * score + intercept)``."""
    intercept: float
    """See :attr:`slope`."""
    saturation: float
    """The gate's value from which a reply keeps its whole fit."""
    training: str = ""
    """How the check was fitted (data, counts, command)."""
    reply_tokens: int | None = None
    """Read the shift over the reply's first this many tokens only (``None``: all of them); its
    PMI is read over the whole reply either way."""

    def __post_init__(self) -> None:
        if len(self.weights) != len(self.scale) or len(self.weights) < 2:
            raise ConfigError("shift check: weights and scale must have one value per feature (PMI, then the state)")
        if not 0.0 < self.saturation <= 1.0:
            raise ConfigError(f"shift check: saturation must be in (0, 1], got {self.saturation}")
        if self.layer < 1 or self.window < 1:
            raise ConfigError("shift check: layer and window must be at least 1")
        if self.reply_tokens is not None and self.reply_tokens < 1:
            raise ConfigError(f"shift check: reply_tokens must be at least 1 or None, got {self.reply_tokens}")

    def score(self, pmi: float, shift: Sequence[float]) -> float:
        """The probe's score of a reply: higher is likelier written for the context.

        Raises:
            ConfigError: ``shift`` has the wrong size.
        """
        if len(shift) != len(self.weights) - 1:
            raise ConfigError(f"shift check: expected {len(self.weights) - 1} state values, got {len(shift)}")
        features = [pmi, *shift]
        return sum(w * x / s for w, x, s in zip(self.weights, features, self.scale, strict=True))

    def probability(self, pmi: float, shift: Sequence[float]) -> float:
        """The gate's value of :meth:`score`: the probability the reply was written for the context."""
        z = self.slope * self.score(pmi, shift) + self.intercept
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def factor(self, pmi: float, shift: Sequence[float]) -> float:
        """What context fit is multiplied by: ``min(1, probability / saturation)``."""
        return min(1.0, self.probability(pmi, shift) / self.saturation)

    @cached_property
    def identity(self) -> str:
        """A short fingerprint of the check and of how its states are read (:data:`READS`; part of
        :attr:`ContextFit.identity`)."""
        fields = {k: v for k, v in asdict(self).items() if k != "reply_tokens" or v is not None}
        digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
        return f"shift-check={digest[:12]}-{READS}"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the check as JSON."""
        Path(path).write_text(json.dumps(asdict(self), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ShiftCheck:
        """Read a check written by :meth:`save`.

        Raises:
            ConfigError: the file is missing or is not a shift check (the error names the file and field).
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"shift check {path}: cannot be read ({exc})") from exc
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"shift check {path}: not a shift check ({exc})") from exc

    @classmethod
    def bundled(cls) -> ShiftCheck:
        """The check shipped for the bundled base model (fitted on 400 ESConv train pairs).

        Examples:
            >>> check = ShiftCheck.bundled()
            >>> check.layer, check.window, check.saturation, len(check.weights)
            (15, 6, 0.5, 577)
        """
        with resources.as_file(resources.files("care_sdk.bundled.adapters") / _BUNDLED) as path:
            return cls.load(path)


class ShiftReader:
    """Reads replies' shifts (:class:`ShiftCheck`'s state features) on a llama.cpp backend.

    A reply's mean state after a prefix is the mean over its own tokens, computed after the
    prefix's (the backend's ``hidden_state_means_after``): the prefix is computed once for a run of
    its replies. A prefix too long for the model's context keeps its last messages that fit, the
    oldest dropped first.

    Args:
        backend: a llama.cpp backend (``hidden_state_means_after``).
        layer: which hidden state is read (:attr:`ShiftCheck.layer`).
        window: how many of the context's last messages are read (:attr:`ShiftCheck.window`).
        reply_tokens: read over the reply's first this many tokens only (:attr:`ShiftCheck.reply_tokens`).

    Raises:
        ConfigError: the backend is not a llama.cpp backend that reads hidden states.

    Examples:
        >>> from care_sdk.backends import resolve_backend
        >>> reader = ShiftReader(resolve_backend("default"), layer=15, window=6)  # doctest: +SKIP
        >>> len(reader.shift("I lost my job today.", "That is a hard blow. What happened?"))  # doctest: +SKIP
        576
    """

    def __init__(self, backend: Any, *, layer: int, window: int, reply_tokens: int | None = None) -> None:
        if not getattr(backend, "supports_hidden_states", False) or not hasattr(backend, "hidden_state_means_after"):
            raise ConfigError("shift check: it reads hidden states on llama.cpp; this backend cannot")
        self.backend = backend
        self.layer = layer
        self.window = window
        self.reply_tokens = reply_tokens
        self._lock = threading.Lock()

    def reply_mean(self, prefix: str, reply: str) -> list[float]:
        """The mean state over the reply's tokens (its first :attr:`reply_tokens`, if set) read
        after ``prefix`` (a space between them).

        Raises:
            ContextOverflowError: the prefix with the reply does not fit the model's context.
        """
        texts = [f"{prefix} {reply.strip()}"]
        if self.reply_tokens is None:  # every token, as from a backend without max_tokens
            return list(self.backend.hidden_state_means_after(prefix, texts, self.layer)[0])
        return list(self.backend.hidden_state_means_after(prefix, texts, self.layer, max_tokens=self.reply_tokens)[0])

    def _after_context(self, context: Context, reply: str) -> list[float]:
        messages = as_messages(context)[-self.window :]
        while True:
            try:
                return self.reply_mean(check_prefix(messages, self.window), reply)
            except ContextOverflowError:
                if len(messages) <= 1:
                    raise
                messages = messages[1:]

    def shift(self, context: Context, reply: str) -> list[float]:
        """The reply's mean state after its context minus after "Hi.".

        Raises:
            CareError: the model could not read it (the reply alone does not fit, ...).
        """
        (value,) = self.shift_batch([(context, reply)])
        if isinstance(value, CareError):
            raise value
        return value

    def shift_batch(self, items: Sequence[tuple[Context, str]]) -> list[list[float] | CareError]:
        """:meth:`shift` for many pairs; an item that could not be read is its error.

        The replies are read context by context, each after its context, and then all of them
        after "Hi.": the backend keeps a prefix computed while the replies after it are read, so
        each prefix is computed once for a run of its replies.
        """
        keys = [tuple(as_messages(context)) for context, _ in items]
        first: dict[tuple[Message, ...], int] = {}
        for i, key in enumerate(keys):
            first.setdefault(key, i)
        order = sorted(range(len(items)), key=lambda i: first[keys[i]])
        out: list[list[float] | CareError] = [[] for _ in items]
        with self._lock:
            for i in order:
                try:
                    out[i] = self._after_context(*items[i])
                except CareError as exc:
                    out[i] = exc
            for i in order:
                after_context = out[i]
                if isinstance(after_context, CareError):
                    continue
                try:
                    after_neutral = self.reply_mean(NEUTRAL_PREFIX, items[i][1])
                except CareError as exc:
                    out[i] = exc
                    continue
                out[i] = [a - b for a, b in zip(after_context, after_neutral, strict=True)]
        return out
