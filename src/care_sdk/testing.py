"""A scripted backend for unit tests: no model, fully deterministic.

Examples:
    >>> from care_sdk import RubricGenerator
    >>> from care_sdk.testing import ScriptedBackend, rubric_json
    >>> backend = ScriptedBackend([rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})])
    >>> RubricGenerator(backend).generate("I lost my job.").top_dimension.value
    'affective'
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from care_sdk.backends import base
from care_sdk.backends.base import (
    Backend,
    Completion,
    ForwardingBackend,
    GenerationRequest,
    GenerationResult,
    with_capabilities,
)
from care_sdk.errors import BackendError

__all__ = ["RecordingBackend", "Reply", "ScriptedBackend", "candidate_reply", "evaluation_json", "rubric_json"]

Reply = str | BackendError | Completion
"""What a script yields for one completion: text, a full completion, or an error to report."""


def rubric_json(
    weights: Mapping[str, float],
    criteria: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """Build the JSON text of a rubric reply, in the format the generator prompt asks for.

    Examples:
        >>> json.loads(rubric_json({"cognitive": 1, "affective": 1, "proactive": 2}))["weights"]["proactive"]
        2
    """
    if criteria is None:
        criteria = {
            d: [f"The reply addresses the {d} need of the user.", f"The reply is specific about the {d} aspect."]
            for d in ("cognitive", "affective", "proactive")
        }
    return json.dumps({"weights": dict(weights), "criteria": {k: list(v) for k, v in criteria.items()}})


_FENCED = re.compile(r"<<<REPLY-([0-9a-f]+)>>>\n(.*)\n<<<END-\1>>>\s*$", re.DOTALL)


def candidate_reply(request: base.Request | str) -> str:
    """The candidate reply quoted in an evaluator request (or its last message's text), as the evaluator sees it.

    Works for every evaluator prompt version, so a scripted judge can answer by the reply it is shown.

    Examples:
        >>> from care_sdk import Rubric, RubricEvaluator
        >>> request = RubricEvaluator(ScriptedBackend([])).request("I'm sad.", Rubric.uniform_fixed(), "I'm here.")
        >>> candidate_reply(request)
        "I'm here."
        >>> v1 = RubricEvaluator(ScriptedBackend([]), prompt_version="v1")
        >>> candidate_reply(v1.request("I'm sad.", Rubric.uniform_fixed(), "I'm here."))
        "I'm here."
    """
    text = request if isinstance(request, str) else request.messages[-1].content
    fenced = _FENCED.search(text)
    if fenced is not None:
        return fenced.group(2)
    return text.rpartition("Candidate reply:\n")[2]


def evaluation_json(scores: Sequence[int]) -> str:
    """Build the JSON text of an evaluation reply scoring criteria ``c1..cN``.

    Examples:
        >>> evaluation_json([5, 4])
        '{"scores": {"c1": 5, "c2": 4}}'
    """
    return json.dumps({"scores": {f"c{i + 1}": s for i, s in enumerate(scores)}})


class ScriptedBackend(Backend):
    """A backend that answers from a script and records every request it gets.

    ``script`` is either a list of replies consumed in order (one per completion; an exhausted
    script raises) or a function ``request -> reply`` called for every completion. A reply that
    is a :class:`~care_sdk.errors.BackendError` fails that request; a reply that is a
    :class:`~care_sdk.backends.base.Completion` is returned as it is (say, one cut off with
    ``finish_reason="length"``). Usage counts one token per character: ``prompt_tokens`` over the
    request's message contents, ``completion_tokens`` over the replies (forced replies too).

    With ``forced``, the backend also has the
    :class:`~care_sdk.backends.base.ForcedReplies` capability: it builds a forced reply itself, one
    token per character (ASCII text), asking ``forced(reply_so_far, next_characters)`` for the
    log-probability of each next character; a :class:`~care_sdk.errors.BackendError` it raises
    fails that request. Forced requests are recorded in :attr:`requests` too.

    Examples:
        >>> backend = ScriptedBackend(lambda req: "ok")
        >>> backend.generate([GenerationRequest(messages=())])[0].text
        'ok'
        >>> len(backend.requests)
        1
        >>> from care_sdk.backends.base import ForcedReply, ForcedRequest
        >>> def likes_4(text, chars):
        ...     return [0.0 if c == "4" else -3.0 for c in chars]
        >>> prefers_4 = ScriptedBackend(lambda req: "ok", forced=likes_4)
        >>> slot = ForcedReply(segments=("score: ", "."), choices=("3", "4"))
        >>> prefers_4.forced_replies([ForcedRequest(messages=(), reply=slot)])[0].text
        'score: 4.'
    """

    provider = "scripted"
    pickles_by_value = True  # a test aid: its script and the requests so far travel with it

    def __init__(
        self,
        script: Iterable[Reply] | Callable[[GenerationRequest], Reply],
        *,
        name: str = "scripted",
        forced: Callable[[str, Sequence[str]], Sequence[float]] | None = None,
    ) -> None:
        self._forced = forced
        if forced is not None:  # the ForcedReplies capability: this instance's class has it (with_capabilities)
            self.__class__ = with_capabilities(type(self), [_ScriptedForcedReplies])
        self._fn = script if callable(script) else None
        self._queue = [] if callable(script) else list(script)
        self._lock = threading.Lock()
        self._name = name
        self.requests: list[base.Request] = []
        """Every request received, in order."""

    @property
    def identity(self) -> str:
        return f"scripted:{self._name}"

    def _next(self, request: GenerationRequest) -> Reply:
        if self._fn is not None:
            return self._fn(request)
        if not self._queue:
            raise AssertionError("ScriptedBackend: the script is exhausted")
        return self._queue.pop(0)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        results = []
        with self._lock:
            for request in requests:
                self.requests.append(request)
                completions: list[Completion] = []
                error: BackendError | None = None
                for _ in range(request.n):
                    reply = self._next(request)
                    if isinstance(reply, BackendError):
                        error = reply
                        break
                    completions.append(
                        reply if isinstance(reply, Completion) else Completion(text=reply, finish_reason="stop")
                    )
                used = {"prompt_tokens": _chars(request), "completion_tokens": sum(len(c.text) for c in completions)}
                results.append(
                    GenerationResult(error=error) if error else GenerationResult(tuple(completions), usage=used)
                )
        return results

    def _forced_replies(self, requests: Sequence[base.ForcedRequest]) -> list[GenerationResult]:
        assert self._forced is not None
        with self._lock:
            self.requests.extend(requests)
            results = [self._build_forced(request.reply, self._forced) for request in requests]
            return [
                dataclasses.replace(
                    result, usage={"prompt_tokens": _chars(request), "completion_tokens": len(result.text)}
                )
                if result.ok
                else result
                for request, result in zip(requests, results, strict=True)
            ]

    @staticmethod
    def _build_forced(
        forced: base.ForcedReply, logprobs: Callable[[str, Sequence[str]], Sequence[float]]
    ) -> GenerationResult:
        from care_sdk.backends.forced import build_forced_reply, forced_completion

        def per_character(text: str) -> tuple[list[int], list[int]]:
            return [ord(ch) for ch in text], list(range(1, len(text) + 1))

        def next_logprobs(ids: Sequence[int], wanted: Sequence[int]) -> list[float]:
            return list(logprobs("".join(map(chr, ids[1:])), [chr(w) for w in wanted]))

        try:
            built = build_forced_reply(forced, [0], per_character, next_logprobs)
        except BackendError as exc:
            return GenerationResult(error=exc)
        return GenerationResult(completions=(forced_completion(built, forced),))


class _ScriptedForcedReplies(ScriptedBackend):
    def forced_replies(self, requests: Sequence[base.ForcedRequest]) -> list[GenerationResult]:
        """Build each forced reply one character at a time, asking the script's ``forced``."""
        return self._forced_replies(requests)


def _chars(request: base.Request) -> int:
    """The scripted backend's prompt tokens: one per character of the request's message contents."""
    return sum(len(m.content) for m in request.messages)


class RecordingBackend(ForwardingBackend):
    """Forwards to a real backend and records every request, batch size and result.

    Useful to check what reaches a model, e.g. that a reply settled by the guards costs no call.

    Examples:
        >>> recorder = RecordingBackend(ScriptedBackend(lambda req: "ok"))
        >>> _ = recorder.generate([GenerationRequest(messages=(), purpose="rubric")] * 2)
        >>> recorder.batches, [r.purpose for r in recorder.requests], recorder.count("rubric")
        ([2], ['rubric', 'rubric'], 2)
    """

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self.requests: list[base.Request] = []
        """Every request forwarded, in order (forced replies included)."""
        self.results: list[GenerationResult] = []
        """Every result returned, batch by batch as the batches came back."""
        self.batches: list[int] = []
        """The size of each forwarded batch (with retries, batch k holds attempt k)."""

    def on_requests(self, requests: Sequence[base.Request]) -> None:
        with self._lock:
            self.requests.extend(requests)
            self.batches.append(len(requests))

    def on_results(self, requests: Sequence[base.Request], results: Sequence[GenerationResult]) -> None:
        with self._lock:
            self.results.extend(results)

    def count(self, purpose: str | None = None) -> int:
        """How many requests were forwarded (with that ``purpose``, when given)."""
        return sum(1 for r in self.requests if purpose is None or r.purpose == purpose)


def score_logprobs(probabilities: Mapping[int, float]) -> base.TokenLogprob:
    """A score token with the given probabilities of 1-5, for testing logprob-expected scores.

    Examples:
        >>> score_logprobs({4: 0.5, 5: 0.5}).token
        '4'
    """
    import math

    top = tuple(sorted(((str(k), math.log(v)) for k, v in probabilities.items() if v > 0), key=lambda kv: -kv[1]))
    return base.TokenLogprob(token=top[0][0], logprob=top[0][1], top=top)
