"""The reward variants a quality run compares, scored side by side with shared work.

Variants (the paper's ablations plus a baseline):

- ``care``: generated weights and generated criteria (full CARE);
- ``uniform_weights``: generated criteria, weights 1/3 each;
- ``fixed_criteria``: generated weights over the fixed six criteria;
- ``fixed_rubric``: the fixed six criteria with uniform weights (no generator);
- ``length``: the reply's length in characters (no model at all).

Each model variant is an :class:`~care_sdk.AdaptiveReward` with that option. The variants share
one generator (so each context gets one rubric) and one request memo in front of each backend
(so requests that are identical across variants are sent once): the evaluator prompt holds the
criteria but not the weights, so ``care`` and ``uniform_weights`` send the same evaluation
request, and so do ``fixed_criteria`` and ``fixed_rubric``. One item costs one rubric and two
evaluations for all five variants. With a context fit (:class:`~care_sdk.addons.ContextFitReader`),
every model variant's reward is scaled by the reply's fit to its context, read once per reply for all of them.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from care_sdk.addons import ContextFitReader
from care_sdk.backends import Backend, ForwardingBackend, GenerationRequest, GenerationResult
from care_sdk.backends.base import Request
from care_sdk.errors import CareError, ConfigError
from care_sdk.evaluator import RubricEvaluator
from care_sdk.generator import RubricGenerator
from care_sdk.reward import AdaptiveReward
from care_sdk.types import Message, Rubric
from care_sdk.variants import VARIANT_LABELS as REWARD_LABELS
from care_sdk.variants import VARIANTS as REWARD_VARIANTS
from care_sdk.variants import needs_generator

R = TypeVar("R", bound=Request)

__all__ = [
    "MODEL_VARIANTS",
    "VARIANTS",
    "VARIANT_LABELS",
    "Item",
    "SharedRequests",
    "VariantScorer",
    "record_done",
]

MODEL_VARIANTS: tuple[str, ...] = REWARD_VARIANTS
"""The variants that call a model: the reward variants of :mod:`care_sdk.variants`."""
VARIANTS: tuple[str, ...] = (*MODEL_VARIANTS, "length")
"""Every variant, in report order."""
VARIANT_LABELS: dict[str, str] = {**REWARD_LABELS, "length": "length only"}
"""Column titles of the report."""


@dataclass(frozen=True)
class Item:
    """One thing to score: a context and a reply (or only a context, when only the rubric matters).

    Examples:
        >>> item = Item(key="d1:3", context=(Message(role="user", content="hi"),), reply="hello", fields={"id": "d1"})
        >>> item.needs_evaluation
        True
    """

    key: str
    """Unique within its task; the resume key."""
    context: tuple[Message, ...]
    """The messages before the reply."""
    reply: str | None
    """The reply to score; ``None`` when only the rubric is needed."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Extra fields copied into every output record (``id``, ``turn``, ``emotion``, ...)."""

    @property
    def needs_evaluation(self) -> bool:
        """Whether the item has a reply to evaluate."""
        return self.reply is not None


def _request_key(request: Request) -> str:
    """What makes two requests the same: every field but ``purpose`` (a request to decode and a
    forced reply never share a key)."""
    fields = {
        f.name: getattr(request, f.name) for f in dataclasses.fields(request) if f.name not in ("messages", "purpose")
    }
    fields["messages"] = [[m.role, m.content] for m in request.messages]
    return json.dumps({"kind": type(request).__name__, **fields}, sort_keys=True, ensure_ascii=False, default=repr)


class SharedRequests(ForwardingBackend):
    """A backend wrapper that answers each distinct request once and replays the result.

    Failed requests are not remembered (a later identical request is sent again). Call
    :meth:`clear` to drop what is remembered.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> inner = ScriptedBackend(lambda req: "ok")
        >>> shared = SharedRequests(inner)
        >>> req = GenerationRequest(messages=(Message(role="user", content="hi"),))
        >>> [r.text for r in shared.generate([req, req])], len(inner.requests), shared.hits
        (['ok', 'ok'], 1, 1)
    """

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self._memo: dict[str, GenerationResult] = {}
        self._lock = threading.Lock()
        self.hits = 0
        """Requests answered from memory."""
        self.sent = 0
        """Requests sent to the inner backend."""

    def _split(self, requests: Sequence[R]) -> tuple[list[str], dict[str, R]]:
        keys = [_request_key(r) for r in requests]
        todo: dict[str, R] = {}
        with self._lock:
            for key, request in zip(keys, requests, strict=True):
                if key not in self._memo and key not in todo:
                    todo[key] = request
        return keys, todo

    def _join(
        self, keys: list[str], todo: Mapping[str, Request], results: list[GenerationResult]
    ) -> list[GenerationResult]:
        fresh = dict(zip(todo, results, strict=True))
        with self._lock:
            self.sent += len(todo)
            self.hits += len(keys) - len(todo)
            for key, result in fresh.items():
                if result.ok:
                    self._memo[key] = result
            return [fresh[k] if k in fresh else self._memo[k] for k in keys]

    def forward(
        self, requests: Sequence[R], call: Callable[[Sequence[R]], list[GenerationResult]]
    ) -> list[GenerationResult]:
        """Send only the requests not answered before (forced replies too)."""
        keys, todo = self._split(requests)
        results = call(list(todo.values())) if todo else []
        return self._join(keys, todo, results)

    async def aforward(
        self,
        requests: Sequence[GenerationRequest],
        call: Callable[[Sequence[GenerationRequest]], Awaitable[list[GenerationResult]]],
    ) -> list[GenerationResult]:
        """Async form of :meth:`forward`."""
        keys, todo = self._split(requests)
        results = await call(list(todo.values())) if todo else []
        return self._join(keys, todo, results)

    def clear(self) -> None:
        """Forget every remembered result."""
        with self._lock:
            self._memo.clear()


def answers_one_at_a_time(backend: Backend) -> bool:
    """Whether ``backend`` (or the backend a wrapper forwards to) is llama.cpp, which answers
    requests one at a time, in order, and keeps the last prompt's evaluated tokens: a larger batch
    runs no faster there, and requests that share a prompt prefix run faster one after another.

    Examples:
        >>> from care_sdk.testing import RecordingBackend, ScriptedBackend
        >>> answers_one_at_a_time(RecordingBackend(ScriptedBackend([])))
        False
    """
    from care_sdk.backends.llamacpp import LlamaCppBackend

    while isinstance(backend, ForwardingBackend):
        backend = backend.inner
    return isinstance(backend, LlamaCppBackend)


class VariantScorer:
    """Scores items under several variants at once, paying each shared request once.

    Args:
        generator: the rubric generator (its cache is shared by the variants).
        evaluator: the evaluator.
        variants: which of :data:`VARIANTS` to score.
        context_fit: the context-fit add-on every model variant's reward reads (one reader, so a
            reply's fit is read once for every variant).
        serial: whether every model answers requests one at a time, in order, keeping the last
            prompt's evaluated tokens (llama.cpp): then one context's requests are sent together
            (see :meth:`score_batches`). ``None``: where every backend is llama.cpp
            (:func:`answers_one_at_a_time`).

    Examples:
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
        >>> def script(req):
        ...     if req.purpose == "evaluation":
        ...         return evaluation_json([5, 5, 3, 3, 1, 1])
        ...     return rubric_json({"cognitive": 2, "affective": 1, "proactive": 1})
        >>> backend = ScriptedBackend(script)
        >>> scorer = VariantScorer(RubricGenerator(backend), RubricEvaluator(backend))
        >>> item = Item(key="k", context=(Message(role="user", content="I lost my job."),), reply="That's hard.")
        >>> records = scorer.score([item])[0]
        >>> {v: r["reward"] for v, r in records.items()}
        {'care': 0.625, 'uniform_weights': 0.5, 'fixed_criteria': 0.625, 'fixed_rubric': 0.5, 'length': 12.0}
        >>> len(backend.requests)  # one rubric, two evaluations
        3
    """

    def __init__(
        self,
        generator: RubricGenerator | None,
        evaluator: RubricEvaluator | None,
        variants: Sequence[str] = VARIANTS,
        context_fit: ContextFitReader | None = None,
        serial: bool | None = None,
    ) -> None:
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            raise ConfigError(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
        self.variants = tuple(v for v in VARIANTS if v in variants)
        needs_model = [v for v in self.variants if v != "length"]
        generating = [v for v in needs_model if needs_generator(v)]
        if needs_model and evaluator is None:
            raise ConfigError(f"variant(s) {', '.join(needs_model)} need an evaluator")
        if generating and generator is None:
            raise ConfigError(f"variant(s) {', '.join(generating)} need a generator")
        components = [c for c in (generator, evaluator) if c is not None]
        self.serial = all(answers_one_at_a_time(c.backend) for c in components) if serial is None else serial
        """Whether one context's requests are sent together (see :meth:`score_batches`)."""
        self._shared: dict[int, SharedRequests] = {}
        self.generator = self._wrap(generator) if generator is not None else None
        self.evaluator = self._wrap(evaluator) if evaluator is not None else None
        self.rewards: dict[str, AdaptiveReward] = {}
        for variant in needs_model:
            assert self.evaluator is not None  # checked above
            self.rewards[variant] = AdaptiveReward(
                self.generator, self.evaluator, variant=variant, context_fit=context_fit
            )  # one ContextFit: a reply's fit is read once for every variant

    def _wrap(self, component: Any) -> Any:
        backend = component.backend
        shared = self._shared.get(id(backend))
        if shared is None:
            shared = self._shared[id(backend)] = SharedRequests(backend)
        clone = copy.copy(component)
        clone.backend = shared
        return clone

    @property
    def requests_sent(self) -> int:
        """Requests sent to the backends so far (after sharing)."""
        return sum(s.sent for s in self._shared.values())

    @property
    def requests_shared(self) -> int:
        """Requests answered by sharing instead of a backend call."""
        return sum(s.hits for s in self._shared.values())

    def score(self, items: Sequence[Item]) -> list[dict[str, dict[str, Any]]]:
        """One ``{variant: record}`` per item.

        A record holds the item's fields and ``reward``, ``error``, ``rubric``, ``evaluation``
        and ``dimension_scores`` as in ``care score`` output. Items without a reply get the
        rubric each variant would use and ``reward=None`` (``error`` set only when the rubric
        could not be generated).
        """
        out: list[dict[str, dict[str, Any]]] = [{} for _ in items]
        for batch in self.score_batches(items):
            for i, records in batch:
                out[i] = records
        return out

    def score_batches(self, items: Sequence[Item]) -> Iterator[list[tuple[int, dict[str, dict[str, Any]]]]]:
        """:meth:`score`, handing over each batch's ``(index in items, {variant: record})`` as soon as
        it is scored, so that a caller can keep them before the next batch starts: one batch for
        the items with a reply, or one per context where every model answers requests one at a
        time (see :meth:`_batches`), then one for the items without a reply.

        Examples:
            >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
            >>> def script(req):
            ...     if req.purpose == "evaluation":
            ...         return evaluation_json([5, 5, 3, 3, 1, 1])
            ...     return rubric_json({"cognitive": 2, "affective": 1, "proactive": 1})
            >>> backend = ScriptedBackend(script)
            >>> scorer = VariantScorer(RubricGenerator(backend), RubricEvaluator(backend), ["care"], serial=True)
            >>> items = [Item(key=f"k{i}", context=(Message(role="user", content=f"Story {i}."),), reply="Oh.")
            ...          for i in range(2)]
            >>> [[(i, r["care"]["reward"]) for i, r in batch] for batch in scorer.score_batches(items)]
            [[(0, 0.625)], [(1, 0.625)]]
        """
        scored = [i for i, item in enumerate(items) if item.needs_evaluation]
        rubric_only = [i for i, item in enumerate(items) if not item.needs_evaluation]

        def with_fields(out: dict[int, dict[str, dict[str, Any]]]) -> list[tuple[int, dict[str, dict[str, Any]]]]:
            return [
                (i, {v: {**items[i].fields, **rec} for v, rec in by_variant.items()}) for i, by_variant in out.items()
            ]

        try:
            for batch in self._batches(items, scored):
                pairs = [(list(items[i].context), items[i].reply or "") for i in batch]
                out: dict[int, dict[str, dict[str, Any]]] = {i: {} for i in batch}
                for variant, reward in self.rewards.items():
                    for i, result in zip(batch, reward.score_batch(pairs), strict=True):
                        # without its provenance: what a reward cost is the run's (its seconds, its batch's
                        # rubric sharing), and a resumed run must write the records a fresh one writes
                        out[i][variant] = result.model_dump(mode="json", exclude={"provenance"})
                if "length" in self.variants:
                    for i in batch:
                        out[i]["length"] = _length_record(items[i].reply or "")
                yield with_fields(out)
            if rubric_only:
                out = {i: {} for i in rubric_only}
                self._rubrics_only(items, rubric_only, out)
                yield with_fields(out)
        finally:
            for shared in self._shared.values():
                shared.clear()

    def _batches(self, items: Sequence[Item], indices: list[int]) -> list[list[int]]:
        """The items to score, in one batch; or, where every model answers requests one at a time
        (:attr:`serial`), one batch per context, so that one context's evaluations under every
        variant's criteria run back to back and its dialogue, which starts each evaluation prompt,
        is evaluated once instead of once per set of criteria."""
        if not indices or not self.serial:
            return [indices] if indices else []
        by_context: dict[tuple[tuple[str, str], ...], list[int]] = {}
        for i in indices:
            by_context.setdefault(tuple((m.role, m.content) for m in items[i].context), []).append(i)
        return list(by_context.values())

    def _rubrics_only(
        self, items: Sequence[Item], indices: list[int], out: dict[int, dict[str, dict[str, Any]]]
    ) -> None:
        generated: list[Rubric | CareError | None] = [None] * len(indices)
        if self.generator is not None and any(r.rubric is None for r in self.rewards.values()):
            generated = list(self.generator.generate_batch([list(items[i].context) for i in indices]))
        for i, rubric in zip(indices, generated, strict=True):
            for variant, reward in self.rewards.items():
                if reward.rubric is not None:
                    out[i][variant] = _rubric_record(reward.rubric)
                elif isinstance(rubric, Rubric):
                    out[i][variant] = _rubric_record(reward.adapt(rubric))
                else:
                    out[i][variant] = _failed_record(f"rubric generation failed: {rubric}")


def _rubric_record(rubric: Rubric) -> dict[str, Any]:
    return {
        "reward": None,
        "error": None,
        "rubric": rubric.model_dump(mode="json"),
        "evaluation": None,
        "dimension_scores": None,
    }


def _failed_record(error: str) -> dict[str, Any]:
    return {"reward": None, "error": error, "rubric": None, "evaluation": None, "dimension_scores": None}


def _length_record(reply: str) -> dict[str, Any]:
    return {"reward": float(len(reply)), "error": None, "rubric": None, "evaluation": None, "dimension_scores": None}


def record_done(record: Mapping[str, Any] | None, needs_evaluation: bool) -> bool:
    """Whether a stored record is finished (a reward, or for rubric-only items a rubric).

    Examples:
        >>> record_done({"reward": 0.5, "error": None}, True), record_done({"reward": None, "error": "x"}, True)
        (True, False)
    """
    if record is None or record.get("error") is not None:
        return False
    if needs_evaluation:
        return record.get("reward") is not None
    return record.get("rubric") is not None
