"""Expected rubric weights: the generator's weights read from its distributions over 0-10.

A generator writes its weights first, ``{"weights": {"cognitive": W, "affective": W, "proactive":
W}, ...``. Greedy decoding writes the most likely digit of each slot in turn, so one uncertain first
slot decides the rest. :func:`expected_weights_plan` instead reads the model's distribution over
``0``-``10`` at each slot with forced replies (a backend that implements
:class:`~care_sdk.backends.base.ForcedReplies` scores the choices in place, reusing the prompt it
has cached): the first slot, the second after each of the first's ``branch`` likeliest
values, the third after each of those pairs' ``branch`` likeliest second values. The weights are the
expectations of the three slots under that joint distribution (renormalised over the paths read).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from care_sdk.backends.base import RUBRIC, Completion, ForcedReply, ForcedRequest, GenerationRequest
from care_sdk.errors import CareError, OutputError
from care_sdk.plans import Plan
from care_sdk.prompts import MAX_WEIGHT
from care_sdk.types import DIMENSIONS, Dimension

__all__ = ["DEFAULT_BRANCH", "expected_weights_plan", "weight_distribution"]

DEFAULT_BRANCH = 3
"""Values of each of the first two slots followed further (1 + 3 + 9 forced reads a rubric)."""

_CHOICES = tuple(str(w) for w in range(MAX_WEIGHT + 1))
_SEGMENTS = tuple(
    ['{"weights": {' + f'"{DIMENSIONS[0].value}": ']
    + [f', "{d.value}": ' for d in DIMENSIONS[1:]]
    + ['}, "criteria": {']
)


def _slot_request(request: GenerationRequest, picks: Sequence[int]) -> ForcedRequest:
    head = "".join(segment + str(w) for segment, w in zip(_SEGMENTS, picks, strict=False))
    slot = len(picks)
    return ForcedRequest(
        messages=request.messages,
        reply=ForcedReply(segments=(head + _SEGMENTS[slot], _SEGMENTS[slot + 1]), choices=_CHOICES),
        seed=request.seed,
        purpose=RUBRIC,
    )


def weight_distribution(completion: Completion) -> tuple[float, ...]:
    """The distribution over weights 0-10 that a one-slot forced reply read at its slot.

    Raises:
        ValueError: the completion does not carry the slot's distribution.

    Examples:
        >>> from care_sdk.backends.base import TokenLogprob
        >>> slot = TokenLogprob(token="2", logprob=math.log(0.75), top=(("2", math.log(0.75)), ("8", math.log(0.25))))
        >>> [round(p, 2) for p in weight_distribution(Completion(text="2", logprobs=(slot,)))]
        [0.0, 0.0, 0.75, 0.0, 0.0, 0.0, 0.0, 0.0, 0.25, 0.0, 0.0]
    """
    for token in completion.logprobs or ():
        if token.top:
            probs = {choice: math.exp(lp) for choice, lp in token.top if choice in _CHOICES}
            total = sum(probs.values())
            if total > 0:
                return tuple(probs.get(c, 0.0) / total for c in _CHOICES)
    raise ValueError("the forced reply carries no distribution over the weights")


def _likeliest(distribution: Sequence[float], branch: int) -> list[int]:
    return sorted(range(len(distribution)), key=lambda w: (-distribution[w], w))[:branch]


def expected_weights_plan(
    requests: Sequence[GenerationRequest], branch: int = DEFAULT_BRANCH
) -> Plan[dict[Dimension, float]]:
    """The expected weights for each generator request (its messages; see the module docstring).

    An item whose reads fail gets the error (the backend's, or :class:`OutputError` for a reply
    without a distribution); weights that are all 0 in expectation are an :class:`OutputError` too.

    Examples:
        >>> from care_sdk.plans import drive
        >>> from care_sdk.testing import ScriptedBackend
        >>> likes_5 = ScriptedBackend([], forced=lambda text, chars: [0.0 if c == "5" else -9.0 for c in chars])
        >>> [weights] = drive(expected_weights_plan([GenerationRequest(messages=())]), likes_5)
        >>> {str(d): round(w, 2) for d, w in weights.items()}
        {'cognitive': 5.0, 'affective': 5.0, 'proactive': 5.0}
    """
    paths: list[dict[tuple[int, ...], float]] = [{(): 1.0} for _ in requests]
    errors: list[CareError | None] = [None] * len(requests)
    for slot in range(len(DIMENSIONS)):
        asks = [(i, path) for i, found in enumerate(paths) if errors[i] is None for path in found]
        results = yield [_slot_request(requests[i], path) for i, path in asks]
        grown: list[dict[tuple[int, ...], float]] = [{} for _ in requests]
        for (i, path), result in zip(asks, results, strict=True):
            if errors[i] is not None:
                continue
            if result.error is not None:
                errors[i] = result.error
                continue
            try:
                distribution = weight_distribution(result.completions[0])
            except ValueError as exc:
                errors[i] = OutputError(f"rubric weights: {exc}", attempts=1)
                continue
            last = slot == len(DIMENSIONS) - 1
            for w in range(len(distribution)) if last else _likeliest(distribution, branch):
                grown[i][(*path, w)] = paths[i][path] * distribution[w]
        paths = grown
    out: list[dict[Dimension, float] | CareError] = []
    for i, found in enumerate(paths):
        error = errors[i]
        total = sum(found.values())
        if error is None and total > 0:
            means = [sum(p[k] * mass for p, mass in found.items()) / total for k in range(len(DIMENSIONS))]
            if sum(means) > 0:
                out.append(dict(zip(DIMENSIONS, means, strict=True)))
                continue
            error = OutputError("rubric weights: every expected weight is 0", attempts=1)
        out.append(error or OutputError("rubric weights: no path was read", attempts=1))
    return out
