"""The reward-function calling convention of :class:`~care_sdk.AdaptiveReward` (TRL's).

TRL calls a reward function as ``f(prompts=..., completions=..., completion_ids=..., **columns,
trainer_state=..., log_extra=..., log_metric=...)`` where ``columns`` are the dataset's other
columns, repeated once per generation. This module turns such a call into ``(context, reply)``
pairs (and the user profile of each, from a ``profile`` column) and reports each batch's
explanation through the two logging hooks. TRL itself is not imported. The public home of these
names is :mod:`care_sdk.integrations.trl`.

Examples:
    >>> items = trl_items(["I failed."], [[{"role": "assistant", "content": "Oh no."}]], {})
    >>> items[0][1]
    'Oh no.'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from care_sdk.errors import InputError
from care_sdk.guards import INFO_FLAGS
from care_sdk.profiles import UserProfile, as_profiles
from care_sdk.provenance import Cost, mean_cost
from care_sdk.types import DIMENSIONS, Message, Messages, RewardResult, as_messages

__all__ = ["METRIC_PREFIX", "completion_text", "report_to_trainer", "trl_items", "trl_profiles"]

METRIC_PREFIX = "care"
"""Prefix of every metric and completions-table column this package logs."""

_SHORT = {"cognitive": "cog", "affective": "aff", "proactive": "pro"}


def completion_text(completion: str | Sequence[Mapping[str, Any]] | Message) -> str:
    """The reply text of a completion in TRL's plain-text or conversational form.

    Examples:
        >>> completion_text([{"role": "assistant", "content": "I'm here."}])
        "I'm here."
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Message):
        return completion.content
    return "".join(str(m.get("content", "")) for m in completion if m.get("role", "assistant") == "assistant")


def trl_items(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    kwargs: Mapping[str, Any],
    context_column: str | None = "context",
) -> list[tuple[Messages, str]]:
    """The ``(context, reply)`` pairs of one TRL reward call, each context normalised here, where
    it enters from the trainer (:func:`~care_sdk.types.as_messages`).

    The context is the prompt (a string, or chat messages for conversational datasets), unless
    the dataset has a ``context_column`` column: then that column's value is the judged context
    (e.g. the dialogue so far without the policy's system prompt).

    Raises:
        InputError: the lists' lengths differ, naming the column.

    Examples:
        >>> trl_items(["<policy prompt>"], ["Tell me more."], {"context": [[{"role": "user", "content": "I'm sad."}]]})
        [((Message(role='user', content="I'm sad."),), 'Tell me more.')]
    """
    contexts: Sequence[Any] = prompts
    if context_column is not None and kwargs.get(context_column) is not None:
        contexts = kwargs[context_column]
        if len(contexts) != len(completions):
            raise InputError(
                f"dataset column {context_column!r} has {len(contexts)} values for {len(completions)} completions"
            )
    if len(prompts) != len(completions):
        raise InputError(f"got {len(prompts)} prompts but {len(completions)} completions")
    return [(as_messages(c), completion_text(r)) for c, r in zip(contexts, completions, strict=True)]


def trl_profiles(
    kwargs: Mapping[str, Any], count: int, profile_column: str | None = "profile"
) -> list[UserProfile | None]:
    """The user profile of each of ``count`` completions of one TRL reward call: the dataset's
    ``profile_column`` column (free text or ``{"text", "traits", "history"}`` per row; ``None`` or
    empty text for no profile), or no profiles when there is no such column.

    Raises:
        InputError: the column has another length, or a row's value is not a profile; the message
            names the column and the row.

    Examples:
        >>> trl_profiles({"profile": ["A retired nurse.", None]}, 2)[0].text
        'A retired nurse.'
        >>> trl_profiles({}, 2)
        [None, None]
        >>> trl_profiles({"profile": [{"age": 70}]}, 1)
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: dataset column 'profile'[0].age: Extra inputs are not permitted
    """
    values = kwargs.get(profile_column) if profile_column is not None else None
    if values is None:
        return [None] * count
    return as_profiles(list(values), count, f"dataset column {profile_column!r}")


def _compact(values: Mapping[Any, float]) -> str:
    return " ".join(f"{_SHORT[str(d)]}={values[d]:.2f}" for d in DIMENSIONS if d in values)


def report_to_trainer(results: Sequence[RewardResult], kwargs: Mapping[str, Any], prefix: str = METRIC_PREFIX) -> None:
    """Log a batch's explanation through TRL's ``log_metric`` and ``log_extra`` hooks, when present.

    Metrics (averaged by TRL over each logging step): ``care/failed`` (share of replies without
    a reward), ``care/flagged`` (share of replies a guard flagged: empty, forged turns, text aimed
    at the evaluator; see :mod:`care_sdk.guards`), and over the replies the evaluator scored,
    ``care/score/<dimension>`` (mean normalised score per dimension, before weighting),
    ``care/weight/<dimension>`` (mean rubric weight) and ``care/context_fit`` (the mean
    context-fit factor, when the reward reads it; see :mod:`care_sdk.addons`). From each result's
    provenance (see :mod:`care_sdk.provenance`), per reply: ``care/cost/calls``,
    ``care/cost/seconds``, ``care/cost/prompt_tokens`` and ``care/cost/completion_tokens`` (the
    mean share of backend calls, seconds and tokens; the tokens when the backend reports them; times
    the batch size, a step's cost), and ``care/rubric/cached`` (the share of replies whose rubric
    came from the cache, over those whose rubric was asked of the generator).
    Completions-table columns, one value per reply: ``care/weights``, ``care/scores`` (compact
    per-dimension text), ``care/flags`` (comma-separated), ``care/error``, ``care/rubric`` (the
    rubric's content hash and source) and ``care/cost`` (compact text).

    Examples:
        >>> from care_sdk import Rubric
        >>> logged = {}
        >>> report_to_trainer([RewardResult.failed("evaluation failed")],
        ...                   {"log_metric": lambda name, value: logged.setdefault(name, value)})
        >>> logged
        {'care/failed': 1.0, 'care/flagged': 0.0}
    """
    if not results:
        return
    log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
    log_extra: Callable[[str, list[Any]], None] | None = kwargs.get("log_extra")
    scored = [r for r in results if r.reward is not None and r.rubric is not None and r.dimension_scores]
    if callable(log_metric):
        log_metric(f"{prefix}/failed", sum(r.reward is None for r in results) / len(results))
        log_metric(f"{prefix}/flagged", sum(_flags(r) for r in results) / len(results))
        if scored:
            for dim in DIMENSIONS:
                scores = [r.dimension_scores[dim] for r in scored if r.dimension_scores and dim in r.dimension_scores]
                weights = [r.rubric.weights[dim] for r in scored if r.rubric is not None]
                if scores:
                    log_metric(f"{prefix}/score/{dim.value}", sum(scores) / len(scores))
                log_metric(f"{prefix}/weight/{dim.value}", sum(weights) / len(weights))
        fits = [r.context_fit for r in results if r.context_fit is not None]
        if fits:
            log_metric(f"{prefix}/context_fit", sum(fits) / len(fits))
        _log_cost(results, log_metric, prefix)
    if callable(log_extra):
        log_extra(f"{prefix}/weights", [_compact(r.rubric.weights) if r.rubric else None for r in results])
        log_extra(f"{prefix}/scores", [_compact(r.dimension_scores) if r.dimension_scores else None for r in results])
        log_extra(f"{prefix}/flags", [",".join(r.flags) or None for r in results])
        log_extra(f"{prefix}/error", [r.error for r in results])
        log_extra(f"{prefix}/rubric", [_rubric_text(r) for r in results])
        log_extra(f"{prefix}/cost", [_cost_text(r.provenance.cost) if r.provenance else None for r in results])


def _log_cost(results: Sequence[RewardResult], log_metric: Callable[[str, float], None], prefix: str) -> None:
    mean = mean_cost(results)
    if mean is None:
        return
    log_metric(f"{prefix}/cost/calls", mean.calls)
    log_metric(f"{prefix}/cost/seconds", mean.seconds)
    for name in ("prompt_tokens", "completion_tokens"):
        value = getattr(mean, name)
        if value is not None:
            log_metric(f"{prefix}/cost/{name}", value)
    sources = [r.provenance.rubric_source for r in results if r.provenance is not None]
    asked = [s for s in sources if s in ("generated", "cached")]
    if asked:
        log_metric(f"{prefix}/rubric/cached", asked.count("cached") / len(asked))


def _rubric_text(result: RewardResult) -> str | None:
    made = result.provenance
    if made is None or made.rubric_hash is None:
        return None
    return f"{made.rubric_hash} {made.rubric_source}"


def _cost_text(cost: Cost) -> str:
    """A cost in a few characters, for a table cell.

    Examples:
        >>> _cost_text(Cost(calls=1.5, prompt_tokens=812, completion_tokens=66, seconds=0.84))
        'calls=1.50 tokens=812+66 s=0.840'
    """
    tokens = ""
    if cost.prompt_tokens is not None or cost.completion_tokens is not None:
        tokens = f" tokens={cost.prompt_tokens or 0:.0f}+{cost.completion_tokens or 0:.0f}"
    return f"calls={cost.calls:.2f}{tokens} s={cost.seconds:.3f}"


def _flags(result: RewardResult) -> bool:
    return any(f not in INFO_FLAGS for f in result.flags)
