"""Context fit: does a reply answer this conversation, or would it fit any?

A reply written for another conversation can meet every criterion of a rubric on paper (it asks
an open question, it names a feeling) while answering nothing the user said. A small evaluator
can miss that; the same model read as a language model has another view of it: a reply written
for this context is likelier after it than after a neutral message. The
reply's pointwise mutual information with its context,

    pmi = log p(reply | context) - log p(reply | "Hi.")   (nats, summed over the reply),

is the evidence, as a log Bayes factor, that the reply was written for this context rather than
for any. The baseline is the one message ``"Hi."`` (:data:`NEUTRAL`). It is read with a backend that
holds the model (a :class:`~care_sdk.backends.ReplyLogprobs`: llama.cpp,
transformers), one prefill of the reply after its context and one after the baseline, no
decoding; a logistic :class:`Gate` fitted on held-out pairs turns it into a
number in (0, 1): how likely the reply was written for this context. ``AdaptiveReward(...,
context_fit=ContextFit())`` then pays ``fit * (floor + (1 - floor) * rubric reward)``: a reply
earns only as much as it answers this conversation; of that, it gets the floor's share (half by
default) whatever the rubric says, and the rubric decides the rest. A plain product (``floor=0``)
leaves a reply the evaluator gives all 1s at 0 however well it fits, and a small evaluator can
give all 1s to a real reference reply too. The sum, not the mean per token, is what a
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
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from care_sdk.backends import Backend, ReplyLogprobs, resolve_backend
from care_sdk.errors import BackendError, CareError, ConfigError, ContextOverflowError
from care_sdk.guards import own_share, strip_copied
from care_sdk.types import Context, Message, Messages, as_messages

__all__ = [
    "BUNDLED_GATE",
    "DEFAULT_FLOOR",
    "GATE_FILE",
    "MEMO_SIZE",
    "NEUTRAL",
    "ContextFit",
    "Gate",
    "context_fit_for",
    "fitted_reward",
]


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


GATE_FILE = "context_fit_gate.json"
"""The bundled gate's file in :mod:`care_sdk.bundled.adapters`: its slope and intercept, and what it was fitted on."""


def _bundled_gate() -> Gate:
    import json
    from importlib import resources

    raw = json.loads(resources.files("care_sdk.bundled.adapters").joinpath(GATE_FILE).read_text("utf-8"))
    return Gate(slope=float(raw["slope"]), intercept=float(raw["intercept"]))


BUNDLED_GATE = _bundled_gate()
"""The gate of the bundled SmolLM2-135M-Instruct on llama.cpp (window 6, neutral ``"Hi."``), read from
:data:`GATE_FILE`: fitted on ESConv ``train`` pairs (each context's real reply against another train
dialogue's reply) by ``benchmarks/bench_contrast.py fit-gate``; what it measured is in
``benchmarks/results/context_fit_gate.json``.

Examples:
    >>> BUNDLED_GATE(40.0) > 0.5 > BUNDLED_GATE(0.0)
    True
"""


_AUTO = "auto"
"""The context-fit option that used to turn it on for the bundled models only; refused now."""

NEUTRAL = "Hi."
"""What a reply's likelihood after its context is compared with: one neutral user message, the
setting :data:`BUNDLED_GATE` was fitted with; two reads a reply.

Examples:
    >>> [(m.role, m.content) for m in as_messages(NEUTRAL)]
    [('user', 'Hi.')]
"""

MEMO_SIZE = 4096
"""PMI values a :class:`ContextFit` keeps, so a reply met again in the same context (a repeated
sample in a GRPO group, the same reply under several reward variants) is not read twice."""


class ContextFit:
    """How likely a reply was written for its context, in (0, 1), from a language model's PMI.

    Args:
        backend: a backend that can read the log-probability of a given reply (llama.cpp,
            transformers): an object or a spec. ``"default"`` is the bundled base model without
            adapters, the model :data:`BUNDLED_GATE` was fitted on.
        gate: turns PMI into a probability; fit one for another model with :meth:`Gate.fit`.
            ``None``: :data:`BUNDLED_GATE`.
        window: how many of the context's last messages the model reads (fewer when they do not
            fit the model's context window with the reply: the oldest are dropped first). The
            bundled gate was fitted at 6, and ``gate=None`` uses it at any window (the research
            notes compare gates fitted at other windows, ``docs/research/context_fit.md``). For a
            window far from 6, fit a gate.
        floor: the share of the fit a reply gets whatever the rubric says (see :func:`fitted_reward`);
            ``0`` makes the reward the plain product of the two.
        strip_copies: what the reply repeats from the context earns no fit: the model reads the
            reply without the runs of words it repeats (:func:`~care_sdk.guards.strip_copied`), and
            the fit is scaled by the share of the reply that is its own (one minus
            :func:`~care_sdk.guards.copied_share`). Repeating the user's words back is likely after
            the context but says nothing new; read as it is, it would earn the highest fit.

    Raises:
        ConfigError: the backend cannot read the log-probability of a given reply; a window below
            1; a floor outside [0, 1].

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
        gate: Gate | None = None,
        window: int = 6,
        floor: float = DEFAULT_FLOOR,
        strip_copies: bool = True,
    ) -> None:
        self.backend = resolve_backend(backend)
        if not isinstance(self.backend, ReplyLogprobs):
            raise ConfigError(
                f"context fit needs a backend that reads the log-probability of a given reply; "
                f"{self.backend.provider} cannot (use llamacpp, hf or default)"
            )
        self._reader: ReplyLogprobs = self.backend
        if window < 1:
            raise ConfigError(f"context fit: window must be at least 1, got {window}")
        if not 0.0 <= floor <= 1.0:
            raise ConfigError(f"context fit: floor must be in [0, 1], got {floor}")
        self.floor = floor
        self.strip_copies = strip_copies
        self.window = window
        self.baseline: Messages = (Message(role="user", content=NEUTRAL),)
        """What a reply's likelihood after its context is compared with: the one message ``"Hi."``."""
        self.gate = gate if gate is not None else BUNDLED_GATE
        self._memo: OrderedDict[tuple[Messages, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # The memo starts empty and the lock is new in the process that unpickles it.
        return {k: v for k, v in self.__dict__.items() if k not in ("_memo", "_lock")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _memo=OrderedDict(), _lock=threading.Lock())

    @property
    def identity(self) -> str:
        """The model, window, gate and floor that determine the values."""
        copies = "|copies discounted" if self.strip_copies else ""
        return f"{self.backend.identity}|window={self.window}|{self.gate}|floor={self.floor}{copies}"

    def _read_as(self, messages: Messages, reply: str) -> tuple[Messages, str]:
        """The messages the model reads before the reply, and the reply as it is read."""
        if self.strip_copies:
            reply = strip_copied(reply, [m.content for m in messages])
        return messages[-self.window :], reply

    def pmi(self, context: Context, reply: str) -> float:
        """The reply's PMI with its context in nats, summed over its tokens (0 for an empty context,
        a reply without tokens, and one that only repeats the context when ``strip_copies`` is on).

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
        another, then every reply after ``"Hi."``, so each prompt is prefilled once (and a reply
        met under several contexts is read once after ``"Hi."``).
        """
        keyed = [self._read_as(as_messages(context), reply) for context, reply in items]
        with self._lock:
            known = {key: self._memo[key] for key in keyed if key in self._memo}
        for key in keyed:
            if not key[0] or not key[1]:  # an empty context or reply: no evidence either way
                known[key] = 0.0
        todo = [i for i, key in enumerate(keyed) if key not in known]
        first_seen: dict[Messages, int] = {}
        for i in todo:
            first_seen.setdefault(keyed[i][0], len(first_seen))
        conditional: dict[int, list[float] | CareError] = {}
        for i in sorted(todo, key=lambda i: (first_seen[keyed[i][0]], i)):
            conditional[i] = self._read_fitting(*keyed[i])
        replies = list(dict.fromkeys(keyed[i][1] for i in todo if not isinstance(conditional[i], CareError)))
        neutral = {reply: self._read_fitting(self.baseline, reply) for reply in replies}
        out: list[float | CareError] = []
        for i, key in enumerate(keyed):
            if key in known:
                out.append(known[key])
                continue
            given = conditional[i]
            if isinstance(given, CareError):
                out.append(given)
                continue
            baseline = neutral[key[1]]
            if isinstance(baseline, CareError):
                out.append(baseline)
                continue
            known[key] = sum(given) - sum(baseline)
            out.append(known[key])
            with self._lock:
                self._memo[key] = known[key]
                while len(self._memo) > MEMO_SIZE:
                    self._memo.popitem(last=False)
        return out

    def _read_fitting(self, messages: Messages, reply: str) -> list[float] | CareError:
        """The reply read after ``messages``; when they do not fit the model's context with it
        (:class:`ContextOverflowError`), after fewer of them, the oldest dropped first, down to the
        last one. Any other error is returned as it is."""
        value = self._read(messages, reply)
        while isinstance(value, ContextOverflowError) and len(messages) > 1:
            messages = messages[1:]
            value = self._read(messages, reply)
        return value

    def _read(self, messages: Sequence[Message], reply: str) -> list[float] | CareError:
        if not reply:
            return []  # no tokens, nothing to read
        try:
            return self._reader.reply_logprobs(messages, reply)
        except CareError as exc:
            return exc
        except (RuntimeError, ValueError) as exc:  # the engine failed on this input
            return BackendError(f"{type(exc).__name__}: {exc}", provider=self.backend.provider)

    def own_share(self, context: Context, reply: str) -> float:
        """The share of the reply that is its own: one minus the share of its word 4-grams found in
        the context (1 for a reply under 8 words, and whenever ``strip_copies`` is off).

        Examples:
            >>> reply = "You lost your job today. That is a lot to take in."
            >>> ContextFit().own_share("I lost my job today.", reply)  # doctest: +SKIP
            0.777...
        """
        if not self.strip_copies:
            return 1.0
        return own_share(reply, [m.content for m in as_messages(context)])

    def score(self, context: Context, reply: str) -> float:
        """How likely the reply was written for ``context``: the gate's value of its PMI, times its
        :meth:`own_share`.

        Raises:
            CareError: the backend could not read the reply.
        """
        value = self.score_batch([(context, reply)])[0]
        if isinstance(value, CareError):
            raise value
        return value

    def score_batch(self, items: Sequence[tuple[Context, str]]) -> list[float | CareError]:
        """:meth:`score` for many ``(context, reply)`` pairs; a failed item is its error (see :meth:`pmi_batch`).

        A context is normalised once here (:func:`~care_sdk.types.as_messages`;
        :class:`~care_sdk.AdaptiveReward` passes :data:`~care_sdk.types.Messages`, which pass as they are).
        """
        normalised = [(as_messages(context), reply) for context, reply in items]
        values = self.pmi_batch(normalised)
        return [
            value if isinstance(value, CareError) else self.gate(value) * self.own_share(context, reply)
            for value, (context, reply) in zip(values, normalised, strict=True)
        ]

    async def ascore_batch(self, items: Sequence[tuple[Context, str]]) -> list[float | CareError]:
        """Async form of :meth:`score_batch` (the model runs in a worker thread)."""
        return await asyncio.to_thread(self.score_batch, items)

    def combine(self, rubric_reward: float, fit: float) -> float:
        """The reward paid for a reply: :func:`fitted_reward` with this fit's :attr:`floor`.

        Examples:
            >>> ContextFit().combine(rubric_reward=0.8, fit=0.5)  # the default floor, 0.5  # doctest: +SKIP
            0.45
        """
        return fitted_reward(rubric_reward, fit, self.floor)

    def close(self) -> None:
        """Close the backend."""
        self.backend.close()

    def __repr__(self) -> str:
        return f"ContextFit({self.identity!r})"


def context_fit_for(option: ContextFit | str | None) -> ContextFit | None:
    """The context fit a reward factory builds from an option: an opt-in add-on, never on by default.

    Every backend's reward is the method's formula unless the caller asks for more, so no backend
    spec turns context fit on. ``None`` or ``"off"``: none. ``"on"``: a :class:`ContextFit` read on
    the bundled base model (backend ``"default"``, the model its gate was fitted on). Another
    string: a :class:`ContextFit` read on that backend spec. A :class:`ContextFit`: itself.

    Raises:
        ConfigError: ``"auto"``, which used to turn context fit on for the bundled models only.

    Examples:
        >>> context_fit_for("off") is None, context_fit_for(None) is None
        (True, True)
        >>> context_fit_for("on")  # doctest: +SKIP
        ContextFit('llamacpp:SmolLM2-135M-Instruct.Q4_1.gguf|window=6|...|floor=0.5|copies discounted')
        >>> context_fit_for("auto")
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: context fit 'auto' is gone: every backend's reward is the method's formula; ...
    """
    if option is None or isinstance(option, ContextFit):
        return option
    spec = option.strip()
    if spec.lower() == "off":
        return None
    if spec.lower() == _AUTO:
        raise ConfigError(
            "context fit 'auto' is gone: every backend's reward is the method's formula; "
            "ask for context fit with 'on' (read on the bundled base model) or a backend spec"
        )
    if spec.lower() == "on":
        return ContextFit()
    return ContextFit(spec)
