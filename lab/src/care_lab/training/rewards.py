"""The generator's preference-GRPO reward terms: format, ``r_pref`` and ``r_align``.

Each term is a plain function of its inputs (:func:`r_align`, :func:`r_pref`,
:func:`format_reward`) plus a TRL-style reward function ``(prompts, completions, **kwargs) ->
list[float | None]`` (:class:`FormatReward`, :class:`PrefReward`, :class:`AlignReward`) with its
own ``__name__``, so TRL logs each term separately. They work in any trainer that passes
dataset columns as keyword arguments.

:class:`PrefGRPORewards` computes the three together, so that an evaluator failure makes the
whole completion unscorable (``None`` in every term, which TRL masks) instead of leaving a 0 or
a lone ``None`` that TRL's ``nansum`` turns into a 0.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from care_lab.data.priorities import align_violations, r_align
from care_sdk.integrations.trl import completion_text
from care_sdk.prompts import parse_rubric, rubric_reply_json
from care_sdk.types import DIMENSIONS, Message, RewardResult, Rubric, as_messages

__all__ = [
    "AlignReward",
    "FormatReward",
    "PrefGRPORewards",
    "PrefReward",
    "align_violations",
    "completion_text",
    "format_reward",
    "r_align",
    "r_pref",
]


def r_pref(chosen_score: float | None, rejected_score: float | None, *, tie: float = 0.0) -> float | None:
    """The preference reward: 1 when the preferred reply scores higher under the rubric, else 0.

    A tie gets ``tie`` (0 by default): the term rewards rubrics that *separate* the preferred
    reply from the dispreferred one, and a rubric under which everything scores the same (all 5s,
    say) must not earn anything for it. ``None`` in, ``None`` out: a failed evaluation is no
    reward, never a 0.

    Examples:
        >>> r_pref(0.8, 0.4), r_pref(0.5, 0.5), r_pref(None, 0.4)
        (1.0, 0.0, None)
    """
    if chosen_score is None or rejected_score is None:
        return None
    if math.isclose(chosen_score, rejected_score, abs_tol=1e-9):
        return tie
    return 1.0 if chosen_score > rejected_score else 0.0


def _parse(completion: Any, criteria_per_dimension: int | None) -> Rubric | None:
    try:
        rubric = parse_rubric(completion_text(completion))
    except (ValueError, TypeError):
        return None
    if criteria_per_dimension is not None and any(
        len(rubric.criteria_for(d)) != criteria_per_dimension for d in DIMENSIONS
    ):
        return None
    return rubric


def format_reward(completion: str | Sequence[Mapping[str, Any]], *, criteria_per_dimension: int | None = None) -> float:
    """1 when the completion parses and validates as a rubric (with ``criteria_per_dimension``
    criteria per dimension, when given), else 0.

    Examples:
        >>> from care_sdk.testing import rubric_json
        >>> format_reward(rubric_json({"cognitive": 1, "affective": 1, "proactive": 1})), format_reward("{")
        (1.0, 0.0)
    """
    return 1.0 if _parse(completion, criteria_per_dimension) is not None else 0.0


def _column(kwargs: Mapping[str, Any], name: str, n: int) -> list[Any]:
    values = kwargs.get(name)
    if values is None:
        raise KeyError(f"the reward needs the dataset column {name!r}; got columns {sorted(kwargs)}")
    values = list(values)
    if len(values) != n:
        raise ValueError(f"column {name!r} has {len(values)} values for {n} completions")
    return values


class FormatReward:
    """TRL reward function: :func:`format_reward` per completion.

    Examples:
        >>> FormatReward()(prompts=["p"], completions=["not json"])
        [0.0]
    """

    __name__ = "format"

    def __init__(self, criteria_per_dimension: int | None = 2) -> None:
        self.criteria_per_dimension = criteria_per_dimension

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        return [format_reward(c, criteria_per_dimension=self.criteria_per_dimension) for c in completions]


class AlignReward:
    """TRL reward function: :func:`r_align` of each sampled rubric against the preferred reply's
    strategy counts (dataset column ``chosen_strategy_counts``, a ``{dimension: n}`` mapping).

    A completion that is not a rubric gets 0 (the format term reports why); a row without counts
    gets ``None``.

    Examples:
        >>> from care_sdk.testing import rubric_json
        >>> AlignReward()(prompts=["p"], completions=[rubric_json({"cognitive": 3, "affective": 1, "proactive": 1})],
        ...               chosen_strategy_counts=[{"cognitive": 2, "affective": 0, "proactive": 0}])
        [1.0]
    """

    __name__ = "r_align"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        counts = _column(kwargs, "chosen_strategy_counts", len(completions))
        out: list[float | None] = []
        for completion, n in zip(completions, counts, strict=True):
            rubric = _parse(completion, None)
            if n is None:
                out.append(None)
            else:
                out.append(0.0 if rubric is None else r_align(rubric, n))
        return out


class PrefReward:
    """TRL reward function: :func:`r_pref` with a frozen evaluator.

    For each sampled rubric, the evaluator scores the preferred (``chosen``) and dispreferred
    (``rejected``) replies to the row's ``context`` (dataset columns); the reward formula turns
    each evaluation into a weighted score in [0, 1] and :func:`r_pref` compares them. All
    evaluations of a batch go to the evaluator in one :meth:`~care_sdk.RubricEvaluator.evaluate_batch`
    call; results are cached by (context, rubric, reply), so a rubric sampled twice is scored
    once. A failed evaluation gives ``None`` (TRL's "no reward"); a completion that is not a rubric
    gets 0.

    Args:
        evaluator: a :class:`~care_sdk.RubricEvaluator` (or anything with its ``evaluate_batch``).
        tie: the reward of a tie (see :func:`r_pref`).

    Examples:
        >>> from care_sdk import RubricEvaluator
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
        >>> ev = RubricEvaluator(ScriptedBackend([evaluation_json([5] * 6), evaluation_json([1] * 6)]))
        >>> PrefReward(ev)(prompts=["p"], completions=[rubric_json({"cognitive": 1, "affective": 1, "proactive": 1})],
        ...                context=[[{"role": "user", "content": "I lost my job."}]],
        ...                chosen=["That sounds scary."], rejected=["Whatever."])
        [1.0]
    """

    __name__ = "r_pref"

    def __init__(self, evaluator: Any, *, tie: float = 0.0, cache_size: int = 100_000) -> None:
        self.evaluator = evaluator
        self.tie = tie
        self.cache_size = cache_size
        self._cache: dict[str, float | None] = {}
        self.last_errors: list[str] = []
        """The evaluator errors of the last call (what produced ``None`` rewards)."""

    @staticmethod
    def _key(context: Sequence[Message], rubric: Rubric, reply: str) -> str:
        payload = json.dumps([[m.model_dump() for m in context], rubric_reply_json(rubric), reply], ensure_ascii=False)
        return hashlib.sha256(payload.encode()).hexdigest()

    def scores(self, items: Sequence[tuple[Sequence[Message], Rubric, str]]) -> list[float | None]:
        """Weighted rubric scores of ``(context, rubric, reply)`` items (``None`` where evaluation failed)."""
        keys = [self._key(c, r, y) for c, r, y in items]
        todo: dict[str, tuple[Sequence[Message], Rubric, str]] = {}
        for key, item in zip(keys, items, strict=True):
            if key not in self._cache and key not in todo:
                todo[key] = item
        self.last_errors = []
        fresh: dict[str, float | None] = {}
        if todo:
            results = self.evaluator.evaluate_batch(list(todo.values()))
            for (key, (_, rubric, _)), result in zip(todo.items(), results, strict=True):
                if isinstance(result, BaseException):
                    self.last_errors.append(f"{type(result).__name__}: {result}")
                    fresh[key] = None  # not cached: a later call may succeed
                    continue
                score = RewardResult.from_parts(rubric, result).reward
                fresh[key] = score
                if len(self._cache) >= self.cache_size:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = score
        return [fresh[k] if k in fresh else self._cache[k] for k in keys]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        n = len(completions)
        contexts = _column(kwargs, "context", n)
        chosen = _column(kwargs, "chosen", n)
        rejected = _column(kwargs, "rejected", n)
        rubrics = [_parse(c, None) for c in completions]
        items: list[tuple[Sequence[Message], Rubric, str]] = []
        for rubric, context, yes, no in zip(rubrics, contexts, chosen, rejected, strict=True):
            if rubric is not None:
                messages = as_messages(context)
                items += [(messages, rubric, yes), (messages, rubric, no)]
        scores = iter(self.scores(items))
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):  # TRL passes this: evaluator failures show up next to the reward
            log_metric("r_pref/evaluator_failures", float(len(self.last_errors)))
        out: list[float | None] = []
        for rubric in rubrics:
            if rubric is None:
                out.append(0.0)
            else:
                out.append(r_pref(next(scores), next(scores), tie=self.tie))
        return out


def _batch_key(completions: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    payload = [completion_text(c) for c in completions]
    columns = [kwargs.get(name) for name in ("context", "chosen", "rejected", "chosen_strategy_counts")]
    return hashlib.sha256(json.dumps([payload, columns], default=str, ensure_ascii=False).encode()).hexdigest()


class _Term:
    """One term of :class:`PrefGRPORewards` as a TRL reward function with its own ``__name__``."""

    def __init__(self, owner: PrefGRPORewards, name: str) -> None:
        self._owner = owner
        self.__name__ = name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        return self._owner.batch(prompts, completions, term=self.__name__, **kwargs)[self.__name__]

    def __repr__(self) -> str:
        return f"<pref-GRPO reward term {self.__name__}>"


class PrefGRPORewards:
    """The three pref-GRPO terms computed together: a failure voids the whole completion, never a 0.

    TRL sums the weighted terms with ``nansum``, so a lone ``None`` (NaN) next to two numbers
    counts as 0: a failed evaluator call would punish the rubric like a lost comparison. Here
    a completion whose evaluation failed gets ``None`` in **every** term; TRL (1.6 and later)
    then masks the whole completion out of the loss. A completion that is not a rubric is the
    policy's own fault and gets 0 in every term, as :class:`FormatReward` and friends give it.

    :meth:`terms` returns the three TRL reward functions (``format``, ``r_pref``, ``r_align``);
    the first of them called on a batch computes all three, the others reuse the result.

    Args:
        evaluator: a :class:`~care_sdk.RubricEvaluator` (or anything with its ``evaluate_batch``).
        criteria_per_dimension: criteria per dimension the format term checks.
        tie: the reward of a tie (see :func:`r_pref`).

    Examples:
        >>> from care_sdk import RubricEvaluator
        >>> from care_sdk.errors import BackendError
        >>> from care_sdk.testing import ScriptedBackend, candidate_reply, evaluation_json, rubric_json
        >>> def answer(request):
        ...     down = candidate_reply(request) == "DOWN"
        ...     return BackendError("server down", provider="demo") if down else evaluation_json([4] * 6)
        >>> rewards = PrefGRPORewards(RubricEvaluator(ScriptedBackend(answer), max_attempts=1))
        >>> fmt, pref, align = rewards.terms()
        >>> columns = dict(context=[[{"role": "user", "content": "I lost my job."}]] * 3,
        ...                chosen=["GOOD", "GOOD", "GOOD"], rejected=["BAD", "DOWN", "BAD"],
        ...                chosen_strategy_counts=[{"affective": 1}] * 3)
        >>> rubric = rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
        >>> fmt(prompts=["p"] * 3, completions=[rubric, rubric, "{"], **columns)
        [1.0, None, 0.0]
        >>> align(prompts=["p"] * 3, completions=[rubric, rubric, "{"], **columns)
        [1.0, None, 0.0]
    """

    def __init__(self, evaluator: Any, *, criteria_per_dimension: int | None = 2, tie: float = 0.0) -> None:
        self.format = FormatReward(criteria_per_dimension)
        self.pref = PrefReward(evaluator, tie=tie)
        self.align = AlignReward()
        self._last: tuple[str, dict[str, list[float | None]]] | None = None
        self._read: set[str | None] = set()
        self.unscorable = 0
        """Completions voided by an evaluator failure so far."""

    def terms(self) -> list[Any]:
        """The TRL reward functions ``format``, ``r_pref`` and ``r_align``, in that order."""
        return [_Term(self, name) for name in ("format", "r_pref", "r_align")]

    def batch(
        self, prompts: Sequence[Any], completions: Sequence[Any], *, term: str | None = None, **kwargs: Any
    ) -> dict[str, list[float | None]]:
        """Every term of one batch, by name: computed by the first term's call, reused by the other
        two (``term`` names the caller; the batch is forgotten once each term has read it, so a
        later identical batch is scored afresh)."""
        key = _batch_key(completions, kwargs)
        if self._last is not None and self._last[0] == key and term not in self._read:
            self._read.add(term)
            out = self._last[1]
            if self._read >= {"format", "r_pref", "r_align"}:
                self._last = None
            return out
        fmt = self.format(prompts, completions, **kwargs)
        pref = self.pref(prompts, completions, **kwargs)
        align = self.align(prompts, completions, **kwargs)
        parsed = [_parse(c, None) is not None for c in completions]
        voided = [ok and p is None for ok, p in zip(parsed, pref, strict=True)]
        self.unscorable += sum(voided)
        out = {
            name: [None if void else value for value, void in zip(values, voided, strict=True)]
            for name, values in (("format", fmt), ("r_pref", pref), ("r_align", align))
        }
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            log_metric("pref/unscorable", float(sum(voided)))
        self._last, self._read = (key, out), {term}
        return out
