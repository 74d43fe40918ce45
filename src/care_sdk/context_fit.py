"""Context fit: does a reply answer this conversation, or would it fit any?

A reply written for another conversation can meet every criterion of a rubric on paper (it asks
an open question, it names a feeling) while answering nothing the user said. The bundled 135M
evaluator does not tell such a reply from the real one; the same model read as a language model
does: a reply written for this context is likelier after it than after a neutral one. The reply's
pointwise mutual information with its context,

    pmi = log p(reply | context) - log p(reply | neutral context)   (nats, summed over the reply),

is the evidence, as a log Bayes factor, that the reply was written for this context rather than
for any. It is read with a backend that holds the model
(:attr:`~care_sdk.backends.Backend.supports_reply_logprobs`: llama.cpp, transformers) in two
prefills and no decoding, and a logistic :class:`Gate` fitted on held-out pairs turns it into a
number in (0, 1): how likely the reply was written for this context. ``AdaptiveReward(...,
context_fit=ContextFit())`` then pays ``fit * (floor + (1 - floor) * rubric reward)``: a reply
earns only as much as it answers this conversation; of that, it gets the floor's share (half by
default) whatever the rubric says, and the rubric decides the rest. A plain product (``floor=0``)
leaves a reply the evaluator gives all 1s at 0 however well it fits, and the bundled evaluator
does that to 20 of 48 ESConv valid reference replies. The sum, not the mean per token, is what a
long reply that keeps to the user's situation earns: per token, a long on-topic reply looks less
specific than a short one, and a reward read that way prefers terse replies.

Examples:
    >>> gate = Gate(slope=0.25, intercept=-2.0)
    >>> round(gate(8.0), 3), round(gate(0.0), 3)
    (0.5, 0.119)
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from care_sdk.backends import Backend, resolve_backend
from care_sdk.errors import BackendError, CareError, ConfigError
from care_sdk.types import Context, Message, as_messages

__all__ = ["BUNDLED_GATE", "DEFAULT_FLOOR", "ContextFit", "Gate", "fitted_reward"]


@dataclass(frozen=True)
class Gate:
    """``sigmoid(slope * pmi + intercept)``: the probability that a reply with this PMI (nats) was
    written for its context.

    Examples:
        >>> Gate(slope=2.0, intercept=0.0)(0.0)
        0.5
    """

    slope: float
    intercept: float

    def __call__(self, pmi: float) -> float:
        z = self.slope * pmi + self.intercept
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    @classmethod
    def fit(cls, written_for: Sequence[float], other: Sequence[float], steps: int = 50) -> Gate:
        """Logistic regression of "written for this context" on PMI (Newton's method, no penalty):
        ``written_for`` holds the PMI of replies written for their contexts, ``other`` of replies
        from other conversations read after the same contexts.

        Raises:
            ValueError: either list is empty, or the two cannot be fitted (a constant PMI).

        Examples:
            >>> gate = Gate.fit([14.0, 22.0, 3.0, 30.0], [1.0, -4.0, 9.0, 2.0])
            >>> gate(20.0) > 0.5 > gate(0.0)
            True
        """
        if not written_for or not other:
            raise ValueError("Gate.fit needs PMI values of both kinds of reply")
        xs = [*written_for, *other]
        ys = [1.0] * len(written_for) + [0.0] * len(other)
        slope = intercept = 0.0
        for _ in range(steps):
            ps = [cls(slope, intercept)(x) for x in xs]
            g_slope = sum((y - p) * x for x, y, p in zip(xs, ys, ps, strict=True))
            g_intercept = sum(y - p for y, p in zip(ys, ps, strict=True))
            w = [p * (1 - p) for p in ps]
            h_ss = sum(wi * x * x for wi, x in zip(w, xs, strict=True))
            h_si = sum(wi * x for wi, x in zip(w, xs, strict=True))
            h_ii = sum(w)
            det = h_ss * h_ii - h_si * h_si
            if det <= 1e-12:
                raise ValueError("Gate.fit: the PMI values do not vary; nothing to fit")
            slope += (h_ii * g_slope - h_si * g_intercept) / det
            intercept += (h_ss * g_intercept - h_si * g_slope) / det
        return cls(slope=slope, intercept=intercept)


DEFAULT_FLOOR = 0.5
"""The share of the fit a reply gets whatever the rubric says: half the reward is how well the reply
fits its conversation, half how well it meets the rubric (see :func:`fitted_reward`)."""


def fitted_reward(rubric_reward: float, fit: float, floor: float = DEFAULT_FLOOR) -> float:
    """The reward of a reply read with context fit: ``fit * (floor + (1 - floor) * rubric_reward)``.

    Examples:
        >>> fitted_reward(rubric_reward=0.0, fit=0.9), round(fitted_reward(rubric_reward=0.8, fit=0.2), 3)
        (0.45, 0.18)
        >>> fitted_reward(rubric_reward=0.8, fit=0.5, floor=0.0)  # the plain product
        0.4
    """
    return fit * (floor + (1.0 - floor) * rubric_reward)


BUNDLED_GATE = Gate(slope=0.1599, intercept=-2.1270)
"""The gate of the bundled SmolLM2-135M-Instruct on llama.cpp (window 6, neutral ``"Hi."``),
fitted on 150 ESConv ``valid`` pairs (each context's reference reply against a reply from another
valid dialogue, seed 0) by ``benchmarks/bench_evaluator.py --stage context-fit``; never on test
data. A reply with 13.3 nats of evidence gets 0.5; the median valid reference had 20.3 (0.75), the
median reply from another dialogue 7.1 (0.27)."""


class ContextFit:
    """How likely a reply was written for its context, in (0, 1), from a language model's PMI.

    Args:
        backend: a backend that can read the log-probability of a given reply (llama.cpp,
            transformers): an object or a spec. ``"default"`` is the bundled base model without
            adapters, the model :data:`BUNDLED_GATE` was fitted on.
        gate: turns PMI into a probability; fit one for another model with :meth:`Gate.fit`.
        window: how many of the context's last messages the model reads.
        neutral: the one user message a reply is compared against.
        floor: the share of the fit a reply gets whatever the rubric says (see :func:`fitted_reward`);
            ``0`` makes the reward the plain product of the two.

    Raises:
        ConfigError: the backend cannot read the log-probability of a given reply.

    Examples:
        >>> fit = ContextFit()  # doctest: +SKIP
        >>> context = [{"role": "user", "content": "My dog died yesterday and the flat is so quiet."}]
        >>> fit.score(context, "I'm so sorry about your dog. How are the evenings without him?")  # doctest: +SKIP
        0.93...
    """

    def __init__(
        self,
        backend: str | Backend | Any = "default",
        *,
        gate: Gate = BUNDLED_GATE,
        window: int = 6,
        neutral: str = "Hi.",
        floor: float = DEFAULT_FLOOR,
    ) -> None:
        self.backend = resolve_backend(backend)
        if not self.backend.supports_reply_logprobs:
            raise ConfigError(
                f"context fit needs a backend that reads the log-probability of a given reply; "
                f"{self.backend.provider} cannot (use llamacpp, hf or default)"
            )
        if window < 1:
            raise ConfigError(f"context fit: window must be at least 1, got {window}")
        if not 0.0 <= floor <= 1.0:
            raise ConfigError(f"context fit: floor must be in [0, 1], got {floor}")
        self.gate = gate
        self.floor = floor
        self.window = window
        self.neutral = (Message(role="user", content=neutral),)

    @property
    def identity(self) -> str:
        """The model, window, gate and floor that determine the values."""
        return f"{self.backend.identity}|window={self.window}|{self.gate}|floor={self.floor}"

    def _messages(self, context: Context) -> tuple[Message, ...]:
        messages = tuple(as_messages(context))
        return messages[-self.window :] or self.neutral

    def pmi(self, context: Context, reply: str) -> float:
        """The reply's PMI with its context in nats, summed over its tokens (0 for a reply without tokens).

        Raises:
            CareError: the backend could not read the reply (a context longer than its window, ...).

        Examples:
            >>> ContextFit().pmi("I failed my driving test again.", "Oh no, again? What happened?")  # doctest: +SKIP
            6.1...
        """
        value = self.pmi_batch([(context, reply)])[0]
        if isinstance(value, CareError):
            raise value
        return value

    def pmi_batch(self, items: Sequence[tuple[Context, str]]) -> list[float | CareError]:
        """:meth:`pmi` for many ``(context, reply)`` pairs; an item the backend could not read is
        its error, the others are unaffected. Pairs that share a context are read one after
        another, and every neutral read after them, so each prompt is prefilled once.
        """
        keyed = [(self._messages(context), reply) for context, reply in items]
        first_seen: dict[tuple[Message, ...], int] = {}
        for messages, _ in keyed:
            first_seen.setdefault(messages, len(first_seen))
        conditional: dict[int, list[float] | CareError] = {}
        for i in sorted(range(len(items)), key=lambda i: (first_seen[keyed[i][0]], i)):
            conditional[i] = self._read(keyed[i][0], keyed[i][1])
        out: list[float | CareError] = []
        for i, (_, reply) in enumerate(keyed):
            given = conditional[i]
            if isinstance(given, CareError):
                out.append(given)
                continue
            neutral = self._read(self.neutral, reply)
            out.append(neutral if isinstance(neutral, CareError) else sum(given) - sum(neutral))
        return out

    def _read(self, messages: Sequence[Message], reply: str) -> list[float] | CareError:
        try:
            return self.backend.reply_logprobs(messages, reply)
        except CareError as exc:
            return exc
        except (RuntimeError, ValueError) as exc:  # the engine failed on this input
            return BackendError(f"{type(exc).__name__}: {exc}", provider=self.backend.provider)

    def score(self, context: Context, reply: str) -> float:
        """The gate's value for one reply: how likely it was written for ``context``.

        Raises:
            CareError: the backend could not read the reply.
        """
        return self.gate(self.pmi(context, reply))

    def score_batch(self, items: Sequence[tuple[Context, str]]) -> list[float | CareError]:
        """:meth:`score` for many ``(context, reply)`` pairs; a failed item is its error (see :meth:`pmi_batch`)."""
        return [v if isinstance(v, CareError) else self.gate(v) for v in self.pmi_batch(items)]

    async def ascore_batch(self, items: Sequence[tuple[Context, str]]) -> list[float | CareError]:
        """Async form of :meth:`score_batch` (the model runs in a worker thread)."""
        return await asyncio.to_thread(self.score_batch, items)

    def close(self) -> None:
        """Close the backend."""
        self.backend.close()

    def __repr__(self) -> str:
        return f"ContextFit({self.identity!r})"
