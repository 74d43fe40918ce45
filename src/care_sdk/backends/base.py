"""The backend interface every model provider implements.

A backend turns a batch of :class:`GenerationRequest` (chat messages, an optional JSON schema
the reply must follow, sampling parameters) into one :class:`GenerationResult` per request,
in input order. A request that fails yields a result whose ``error`` is set; the rest of the
batch is unaffected. Backends implement :meth:`Backend.generate` or :meth:`Backend.agenerate`
(or both); the base class derives the other.

That, with :attr:`Backend.identity` and :meth:`Backend.close`, is what every transport gives.
A backend that holds the model may also implement optional capabilities, each a protocol that
callers test with ``isinstance``: :class:`ForcedReplies` (a reply fixed except in a few slots,
built by scoring the slots: :class:`ForcedRequest`), :class:`ReplyLogprobs` (how likely a given
reply is), :class:`HiddenStates` (a layer's hidden states of a text) and :class:`TrainedAdapter`
(the records of the care-sdk adapter it applies). Nothing else is part of the contract: a setting
only one backend reads is that backend's own.

Examples:
    >>> from care_sdk.testing import ScriptedBackend
    >>> plain = ScriptedBackend([])
    >>> [isinstance(plain, c) for c in (ForcedReplies, ReplyLogprobs, HiddenStates, TrainedAdapter)]
    [False, False, False, False]
"""

from __future__ import annotations

import asyncio
import pickle
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from care_sdk._runner import run_sync
from care_sdk.errors import BackendError, ConfigError
from care_sdk.types import Message

if TYPE_CHECKING:
    from care_sdk.backends.lora import AdapterInfo

__all__ = [
    "EVALUATION",
    "RUBRIC",
    "Backend",
    "Completion",
    "ForcedReplies",
    "ForcedReply",
    "ForcedRequest",
    "ForwardingBackend",
    "GenerationRequest",
    "GenerationResult",
    "HiddenStates",
    "ReplyLogprobs",
    "Request",
    "TokenLogprob",
    "TrainedAdapter",
    "run_sync",
    "with_capabilities",
]

R = TypeVar("R", bound="GenerationRequest | ForcedRequest")
B = TypeVar("B", bound="Backend")

RUBRIC = "rubric"
"""The purpose of a rubric generator's request."""
EVALUATION = "evaluation"
"""The purpose of an evaluator's request."""


@dataclass(frozen=True)
class ForcedReply:
    """A reply whose text is fixed except for a few slots, each filled with one of ``choices``.

    The reply reads ``segments[0] + pick_1 + segments[1] + ... + pick_k + segments[k]``. A backend
    that implements :class:`ForcedReplies` builds it itself: it feeds the fixed text up to
    each slot, reads the model's distribution over the choices there (restricted to them), picks
    one (the most likely under greedy decoding) and goes on, instead of decoding every token.

    Examples:
        >>> forced = ForcedReply(segments=('{"scores": {"c1": ', ', "c2": ', "}}"), choices=("1", "2", "3"))
        >>> forced.slots, forced.text(["3", "1"])
        (2, '{"scores": {"c1": 3, "c2": 1}}')
    """

    segments: tuple[str, ...]
    """The fixed text around the slots: one more segment than there are slots."""
    choices: tuple[str, ...]
    """What a slot may hold (distinct, non-empty strings)."""

    def __post_init__(self) -> None:
        if len(self.segments) < 2:
            raise ValueError("a forced reply needs at least one slot (two segments)")
        if len(set(self.choices)) != len(self.choices) or not all(self.choices):
            raise ValueError("choices must be distinct non-empty strings")
        if len(self.choices) < 2:
            raise ValueError("a slot needs at least two choices")

    @property
    def slots(self) -> int:
        """How many slots the reply has."""
        return len(self.segments) - 1

    def text(self, picks: Sequence[str]) -> str:
        """The reply with ``picks`` in its slots."""
        if len(picks) != self.slots:
            raise ValueError(f"expected {self.slots} picks, got {len(picks)}")
        parts = [self.segments[0]]
        for pick, segment in zip(picks, self.segments[1:], strict=True):
            parts += [pick, segment]
        return "".join(parts)


@dataclass(frozen=True)
class GenerationRequest:
    """One chat request to a backend.

    Examples:
        >>> req = GenerationRequest(messages=(Message(role="user", content="hi"),), max_tokens=16)
        >>> req.n
        1
    """

    messages: tuple[Message, ...]
    """The chat messages."""
    json_schema: dict[str, Any] | None = None
    """A JSON schema the reply must follow (decoded under it where the backend can)."""
    max_tokens: int = 512
    """Upper bound on generated tokens per completion."""
    temperature: float = 0.0
    """Sampling temperature; 0 is greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    n: int = 1
    """How many completions to sample."""
    seed: int | None = None
    """Sampling seed, for backends that support one."""
    top_logprobs: int | None = None
    """When set, return this many top alternatives with each token's logprob."""
    purpose: str | None = None
    """What the request is for: :data:`RUBRIC`, :data:`EVALUATION`, ``"simulated user"``, ... A
    label for the callers around a backend (wrappers that count or meter requests by it, such as
    :meth:`~care_sdk.testing.RecordingBackend.count`, logs, scripted test backends); backends do
    not read it, and it never changes a reply."""


@dataclass(frozen=True)
class ForcedRequest:
    """A request whose reply is ``reply`` with its slots filled: sent to a backend that implements
    :class:`ForcedReplies`, which builds it by scoring the slots instead of decoding.

    The completion's ``logprobs`` hold one entry per fixed segment (logprob 0) and one per slot,
    whose ``top`` is the distribution over the choices, renormalised over them.

    Examples:
        >>> slot = ForcedReply(segments=("score: ", "."), choices=("1", "2"))
        >>> ForcedRequest(messages=(Message(role="user", content="hi"),), reply=slot).reply.slots
        1
    """

    messages: tuple[Message, ...]
    """The chat messages."""
    reply: ForcedReply
    """The reply's template."""
    temperature: float = 0.0
    """0 picks the most likely choice at each slot; above 0 a choice is drawn from the restricted
    distribution sharpened by ``1 / temperature``."""
    n: int = 1
    """How many replies to build."""
    seed: int | None = None
    """Seed of the draws when ``temperature`` is above 0."""
    purpose: str | None = None
    """What the request is for (see :attr:`GenerationRequest.purpose`)."""


Request = GenerationRequest | ForcedRequest
"""What a wrapper may be asked to forward: a request to decode, or a forced reply to build."""


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token with its logprob and the top alternatives at that position.

    Examples:
        >>> TokenLogprob(token="4", logprob=-0.1, top=(("4", -0.1), ("5", -2.3))).top[1][0]
        '5'
    """

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Completion:
    """One sampled completion.

    Examples:
        >>> Completion(text='{"a": 1}').finish_reason is None
        True
    """

    text: str
    finish_reason: str | None = None
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True)
class GenerationResult:
    """The outcome of one request: ``n`` completions, or the error that prevented them.

    Examples:
        >>> GenerationResult(completions=(Completion(text="ok"),)).ok
        True
    """

    completions: tuple[Completion, ...] = ()
    error: BackendError | None = None
    usage: dict[str, int] = field(default_factory=dict)
    """Token counts where the backend reports them (``prompt_tokens``, ``completion_tokens``)."""

    @property
    def ok(self) -> bool:
        """Whether the request produced completions."""
        return self.error is None

    @property
    def text(self) -> str:
        """The first completion's text; raises the request's error when it failed."""
        if self.error is not None:
            raise self.error
        return self.completions[0].text


class NotPicklableError(ConfigError, pickle.PicklingError):
    """A backend built around a live object (a loaded model, a client) cannot travel to another
    process: build it from a spec string instead, which the other process opens again.

    Examples:
        >>> issubclass(NotPicklableError, pickle.PicklingError)
        True
    """


_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


class _NewLock:
    """Stands for a lock in a pickled backend: the unpickling process makes a new one."""


def _rebuild(factory: Callable[..., Backend], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Backend:
    return factory(*args, **kwargs)


def remember_config(backend: Backend, factory: Callable[..., Backend], *args: Any, **kwargs: Any) -> None:
    """Record how ``backend`` was built, so that it pickles as this call and reopens in the other process.

    Examples:
        >>> import pickle
        >>> from care_sdk.testing import ScriptedBackend
        >>> backend = ScriptedBackend(["hi"], name="a")
        >>> remember_config(backend, ScriptedBackend, ["hello"], name="a")
        >>> pickle.loads(pickle.dumps(backend)).generate([GenerationRequest(messages=())])[0].text
        'hello'
    """
    backend.__dict__["_care_config"] = (factory, tuple(args), dict(kwargs))


@runtime_checkable
class ForcedReplies(Protocol):
    """The optional capability of building forced replies by scoring their slots (llama.cpp,
    transformers): one prefill of the fixed text, one distribution over the choices per slot.
    ``isinstance(backend, ForcedReplies)`` says whether a backend has it; the evaluator then reads
    its scores this way (see :data:`~care_sdk.evaluator.EVALUATOR_MODES`).

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> likes_2 = ScriptedBackend([], forced=lambda text, chars: [0.0 if c == "2" else -2.0 for c in chars])
        >>> isinstance(likes_2, ForcedReplies)
        True
        >>> slot = ForcedReply(segments=("score: ", "."), choices=("1", "2"))
        >>> likes_2.forced_replies([ForcedRequest(messages=(), reply=slot)])[0].text
        'score: 2.'
    """

    def forced_replies(self, requests: Sequence[ForcedRequest]) -> list[GenerationResult]:
        """Build each request's reply; one result per request, in order (a request that fails,
        say with :class:`~care_sdk.errors.ContextOverflowError`, is a result with ``error`` set).
        Blocking: async callers run it in a worker thread."""
        ...


@runtime_checkable
class ReplyLogprobs(Protocol):
    """The optional capability of reading how likely a given reply is (llama.cpp, transformers):
    ``isinstance(backend, ReplyLogprobs)`` says whether a backend has it.

    Examples:
        >>> class Uniform:
        ...     def reply_logprobs(self, messages, reply):
        ...         return [-1.0] * len(reply.split())
        >>> isinstance(Uniform(), ReplyLogprobs)
        True
    """

    def reply_logprobs(self, messages: Sequence[Message], reply: str) -> list[float]:
        """The log-probability of each token of ``reply`` as the assistant's answer to ``messages``
        (one prefill, no decoding; the cached prompt of the previous call reused where it shares a
        prefix).

        Raises:
            CareError: the reply could not be read (:class:`~care_sdk.errors.ContextOverflowError`
                when the prompt and the reply do not fit the model's context).
        """
        ...


@runtime_checkable
class HiddenStates(Protocol):
    """The optional capability of reading a layer's hidden states of a text (llama.cpp,
    transformers): ``isinstance(backend, HiddenStates)`` says whether a backend has it.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> isinstance(ScriptedBackend([]), HiddenStates)
        False
    """

    def hidden_state_means(self, texts: Sequence[str], layer: int) -> list[list[float]]:
        """Each text's ``hidden_states[layer]`` (the output of the first ``layer`` decoder layers),
        averaged over its tokens (the text alone: no chat template, no BOS); the layers above
        ``layer`` need not be computed.

        Raises:
            CareError: a text could not be read (an unknown layer, a text longer than the context).
        """
        ...


@runtime_checkable
class TrainedAdapter(Protocol):
    """The optional capability of applying a care-sdk LoRA adapter (llama.cpp): ``adapter`` holds its
    records (role, prompt version, the context cut it was trained with; ``None`` when the model runs
    without one). :class:`~care_sdk.RubricGenerator` and :class:`~care_sdk.RubricEvaluator` built on
    such a backend check the adapter's role and prompt version and cut the context as it was trained.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> isinstance(ScriptedBackend([]), TrainedAdapter)
        False
    """

    @property
    def adapter(self) -> AdapterInfo | None:
        """The records of the adapter the model applies, or ``None``."""
        ...


_CAPABILITY_CLASSES: dict[tuple[type[Any], tuple[type[Any], ...]], type[Any]] = {}
_CAPABILITY_LOCK = threading.Lock()


def with_capabilities(cls: type[B], mixins: Sequence[type[Any]]) -> type[B]:
    """``cls`` with the methods of ``mixins`` (each implementing an optional capability), as a class
    made once per set: what a backend whose capabilities depend on how it was built (a wrapper, a
    scripted backend given ``forced=``) makes its class in ``__init__``
    (``self.__class__ = with_capabilities(type(self), mixins)``), so that its class, and with it
    ``isinstance`` on the capability protocols, says what it has. An instance pickles as one of
    ``cls`` with the same mixins.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> class Reads:
        ...     def reply_logprobs(self, messages, reply):
        ...         return [0.0]
        >>> made = with_capabilities(ScriptedBackend, [Reads])
        >>> made is with_capabilities(ScriptedBackend, [Reads]), made.__name__, issubclass(made, ReplyLogprobs)
        (True, 'ScriptedBackend', True)
        >>> with_capabilities(ScriptedBackend, []) is ScriptedBackend
        True
    """
    declared: type[B] = cls.__dict__.get("_care_declared", cls)
    # a mixin goes first in the new class's bases, so it only adds what the declared class lacks
    wanted = tuple(m for m in mixins if not all(hasattr(declared, name) for name in _public(m)))
    if not wanted:
        return declared
    key = (declared, wanted)
    with _CAPABILITY_LOCK:
        made = _CAPABILITY_CLASSES.get(key)
        if made is None:
            namespace = {
                "__module__": declared.__module__,
                "__qualname__": declared.__qualname__,
                "__doc__": declared.__doc__,
                "_care_declared": declared,
                "_care_mixins": wanted,
            }
            made = _CAPABILITY_CLASSES[key] = type(declared.__name__, (*wanted, declared), namespace)
    return made


def _public(mixin: type[Any]) -> list[str]:
    return [name for name in vars(mixin) if not name.startswith("_")]


def _capability_instance(cls: type[Any], mixins: tuple[type[Any], ...]) -> Any:
    """An empty instance of ``cls`` with ``mixins``, its state set next by pickle."""
    return object.__new__(with_capabilities(cls, mixins))


class Backend:
    """A model provider behind one small interface.

    Subclasses override :meth:`generate` (blocking engines such as llama.cpp) or
    :meth:`agenerate` (network clients), or both; the other is derived. ``identity`` names
    the model and settings that determine outputs and is part of rubric cache keys.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> backend = ScriptedBackend(["hello"])
        >>> backend.generate([GenerationRequest(messages=(Message(role="user", content="hi"),))])[0].text
        'hello'
    """

    provider: str = "backend"
    """Short provider name used in errors and logs."""

    @property
    def identity(self) -> str:
        """A stable description of the model and settings (no secrets)."""
        return self.provider

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Run a batch of requests; one result per request, in order."""
        if type(self).agenerate is Backend.agenerate:
            raise NotImplementedError(f"{type(self).__name__} implements neither generate nor agenerate")
        return run_sync(self.agenerate(requests))

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Async form of :meth:`generate`."""
        if type(self).generate is Backend.generate:
            raise NotImplementedError(f"{type(self).__name__} implements neither generate nor agenerate")
        return await asyncio.to_thread(self.generate, requests)

    def close(self) -> None:
        """Release resources (models, connections). Safe to call twice."""

    pickles_by_value: bool = False
    """Whether an instance without a recorded configuration pickles by its attributes (locks made
    anew): true for test aids and wrappers, false for backends that hold a live model or client."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        config = self.__dict__.get("_care_config")
        if config is not None:  # rebuilt from its spec or constructor arguments where it is unpickled
            return (_rebuild, config)
        if not self.pickles_by_value:
            raise NotPicklableError(
                f"{self!r} wraps a live object that cannot be sent to another process; build the reward "
                "from a spec instead, e.g. AdaptiveReward.from_backend('llamacpp:PATH.gguf'), "
                "from_backend('openai:MODEL@BASE_URL'), from_backend('vllm:MODEL') or from_backend('hf:PATH')"
            )
        reduced = super().__reduce_ex__(protocol)
        declared = type(self).__dict__.get("_care_declared")
        if declared is None:
            return reduced
        # a class made by with_capabilities is not importable: rebuilt from its declared class and mixins
        return (_capability_instance, (declared, type(self).__dict__["_care_mixins"]), *reduced[2:])

    def __getstate__(self) -> dict[str, Any]:
        return {k: _NewLock() if isinstance(v, _LOCK_TYPES) else v for k, v in self.__dict__.items()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({k: threading.Lock() if isinstance(v, _NewLock) else v for k, v in state.items()})

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.identity!r})"


class ForwardingBackend(Backend):
    """A backend that forwards every batch to ``inner``: the base of wrappers that count, record
    or meter requests. Override :meth:`on_requests` and :meth:`on_results` (or, to time, memoise or
    skip requests, :meth:`forward` and :meth:`aforward`); sync and async calls and forced replies all
    pass through them. The optional capabilities of ``inner`` (:class:`ForcedReplies`,
    :class:`ReplyLogprobs`, :class:`HiddenStates`, :class:`TrainedAdapter`) are forwarded as they
    are: a wrapper is an instance of a class made once per set of capabilities
    (:func:`with_capabilities`), so it has those ``inner`` has, and only those, and ``isinstance``
    says so.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> class Counter(ForwardingBackend):
        ...     sent = 0
        ...     def on_requests(self, requests):
        ...         self.sent += len(requests)
        >>> counter = Counter(ScriptedBackend(lambda req: "ok"))
        >>> counter.generate([GenerationRequest(messages=())])[0].text, counter.sent, counter.identity
        ('ok', 1, 'scripted:scripted')
        >>> isinstance(counter, ForcedReplies)  # the scripted backend builds no forced replies
        False
        >>> forced = Counter(ScriptedBackend([], forced=lambda text, chars: [0.0] * len(chars)))
        >>> isinstance(forced, ForcedReplies), type(forced).__name__, "forced_replies" in vars(forced)
        (True, 'Counter', False)
    """

    pickles_by_value = True

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.provider = inner.provider
        # this instance's class: its own with the mixins that forward the inner backend's capabilities
        self.__class__ = with_capabilities(type(self), [m for c, m in _FORWARDED if isinstance(inner, c)])

    @property
    def identity(self) -> str:
        """The inner backend's identity (a wrapper does not change outputs)."""
        return self.inner.identity

    def on_requests(self, requests: Sequence[Request]) -> None:
        """Called with each batch before it is forwarded."""

    def on_results(self, requests: Sequence[Request], results: Sequence[GenerationResult]) -> None:
        """Called with each batch and its results after they came back."""

    def forward(
        self, requests: Sequence[R], call: Callable[[Sequence[R]], list[GenerationResult]]
    ) -> list[GenerationResult]:
        """Send a batch through ``call`` (``inner.generate`` or ``inner.forced_replies``) between the hooks."""
        self.on_requests(requests)
        results = call(requests)
        self.on_results(requests, results)
        return results

    async def aforward(
        self,
        requests: Sequence[GenerationRequest],
        call: Callable[[Sequence[GenerationRequest]], Awaitable[list[GenerationResult]]],
    ) -> list[GenerationResult]:
        """Async form of :meth:`forward` (``call`` is ``inner.agenerate``)."""
        self.on_requests(requests)
        results = await call(requests)
        self.on_results(requests, results)
        return results

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Forward a batch to ``inner.generate``."""
        return self.forward(requests, self.inner.generate)

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Forward a batch to ``inner.agenerate``."""
        return await self.aforward(requests, self.inner.agenerate)

    def close(self) -> None:
        """Close the inner backend."""
        self.inner.close()


class _ForwardsForcedReplies(ForwardingBackend):
    def forced_replies(self, requests: Sequence[ForcedRequest]) -> list[GenerationResult]:
        """Build each request's reply on the inner backend, through :meth:`forward`."""
        inner = self.inner
        assert isinstance(inner, ForcedReplies)
        return self.forward(requests, inner.forced_replies)


class _ForwardsReplyLogprobs(ForwardingBackend):
    def reply_logprobs(self, messages: Sequence[Message], reply: str) -> list[float]:
        """The inner backend's :meth:`ReplyLogprobs.reply_logprobs`."""
        inner = self.inner
        assert isinstance(inner, ReplyLogprobs)
        return inner.reply_logprobs(messages, reply)


class _ForwardsHiddenStates(ForwardingBackend):
    def hidden_state_means(self, texts: Sequence[str], layer: int) -> list[list[float]]:
        """The inner backend's :meth:`HiddenStates.hidden_state_means`."""
        inner = self.inner
        assert isinstance(inner, HiddenStates)
        return inner.hidden_state_means(texts, layer)


class _ForwardsAdapter(ForwardingBackend):
    @property
    def adapter(self) -> AdapterInfo | None:
        """The inner backend's adapter: a wrapper answers with the same model, so components built
        on it check the adapter's role and prompt version and cut the context as it was trained."""
        inner = self.inner
        assert isinstance(inner, TrainedAdapter)
        return inner.adapter


_FORWARDED: tuple[tuple[type[Any], type[ForwardingBackend]], ...] = (
    (ForcedReplies, _ForwardsForcedReplies),
    (ReplyLogprobs, _ForwardsReplyLogprobs),
    (HiddenStates, _ForwardsHiddenStates),
    (TrainedAdapter, _ForwardsAdapter),
)
"""Each optional capability and the mixin that forwards it."""
