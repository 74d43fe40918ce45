"""CARE rewards for verl: a module-level ``compute_score`` and its batch form.

verl's reward managers call ``compute_score(data_source=..., solution_str=..., ground_truth=...,
extra_info=...)`` once per response (``naive``), or ``compute_score(data_sources=...,
solution_strs=..., ground_truths=..., extra_infos=...)`` once per batch (``batch``). Neither passes
the prompt, so the dialogue context travels in the row's ``extra_info``:

.. code-block:: python

    {
        "data_source": "esconv",
        "prompt": [{"role": "user", "content": "I lost my job today."}],   # what the policy sees
        "ability": "emotional_support",
        "reward_model": {"style": "model", "ground_truth": ""},           # unused by CARE
        "extra_info": {
            "index": 0,
            "messages": [{"role": "user", "content": "I lost my job today."}],  # the judged context
            "profile": "A single father of two.",   # optional: who the user is (care_sdk.profiles)
        },
    }

:func:`make_row` builds such a row. Point verl at this file and pass options as
``custom_reward_function.reward_kwargs`` (verl merges them into every call)::

    custom_reward_function.path=$(python -c "import care_sdk.integrations.verl as m; print(m.__file__)")
    custom_reward_function.name=compute_score            # or compute_score_batch with reward_model.reward_manager=batch
    +custom_reward_function.reward_kwargs.backend=openai:my-judge@http://127.0.0.1:8000/v1
    +custom_reward_function.reward_kwargs.cache=/data/rubrics.sqlite

The returned dict has ``score`` (the reward verl trains on) and, for verl's
``reward_extra_info``, ``care_<dimension>`` (per-dimension score), ``care_weight_<dimension>``
(rubric weight), ``care_failed`` (1.0 when no reward could be computed), and the reward's cost
(see :mod:`care_sdk.provenance`): ``care_cost_calls``, ``care_cost_seconds``,
``care_cost_prompt_tokens``, ``care_cost_completion_tokens`` (the row's share; tokens NaN where the
backend reports none) and ``care_rubric_cached`` (1.0 when the rubric came from the cache, 0.0 when
it was written, NaN otherwise). Every row returns the same keys.

Two options of the batch form watch and shape the reward during training:

- ``advantages="per_dimension"``: ``score`` is the per-dimension advantage of the reply within the
  replies to its context in the batch (:mod:`care_sdk.advantages`); ``care_reward`` keeps the
  weighted reward. ::

    +custom_reward_function.reward_kwargs.advantages=per_dimension

- ``audit=SPEC``: an :class:`~care_sdk.audit.Audit` with that reference judge sees every batch
  (``audit_options`` are its keyword arguments, e.g. ``fraction``, ``log_path``,
  ``gap_trend_threshold``); its metrics of the batch come back in every row as
  ``care_audit_<key>`` (NaN where the batch has none; see :data:`~care_sdk.audit.AUDIT_KEYS`) and
  its JSONL log is what ``care report --audit`` draws. ::

    +custom_reward_function.reward_kwargs.audit=openai:judge@http://127.0.0.1:8001/v1
    +custom_reward_function.reward_kwargs.audit_options.log_path=/data/audit.jsonl
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from care_sdk.advantages import ADVANTAGES, per_dimension_advantages
from care_sdk.audit import AUDIT_KEYS, Audit
from care_sdk.audit import context_key as group_key
from care_sdk.backends import Backend
from care_sdk.errors import CareError, ConfigError, InputError
from care_sdk.profiles import ProfileLike, UserProfile, as_profile
from care_sdk.provenance import cost_metrics
from care_sdk.reward import AdaptiveReward
from care_sdk.types import DIMENSIONS, Message, Messages, RewardResult, as_messages
from care_sdk.variants import as_variant

__all__ = ["compute_score", "compute_score_batch", "get_audit", "get_reward", "make_row", "read_profile"]

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT_KEY = "messages"
"""The ``extra_info`` key that holds the dialogue context."""
DEFAULT_PROFILE_KEY = "profile"
"""The ``extra_info`` key that holds the user's profile, when a row has one."""

_REWARDS: dict[tuple[Any, ...], AdaptiveReward] = {}
_AUDITS: dict[tuple[Any, ...], Audit] = {}
_LOCK = threading.Lock()


def make_row(
    context: str | Sequence[Message | Mapping[str, Any]],
    *,
    data_source: str = "care",
    index: int | None = None,
    prompt: Sequence[Mapping[str, Any]] | None = None,
    context_key: str = DEFAULT_CONTEXT_KEY,
    profile: ProfileLike = None,
    profile_key: str = DEFAULT_PROFILE_KEY,
) -> dict[str, Any]:
    """A verl dataset row whose ``extra_info`` carries the context CARE judges.

    Args:
        context: the dialogue so far (chat messages, or a string as one user message).
        data_source: verl's ``data_source`` column.
        index: stored as ``extra_info["index"]`` (used in error messages).
        prompt: what the policy sees, when it differs from the context (e.g. with a system prompt).
        context_key: the ``extra_info`` key for the context.
        profile: the user's profile (see :mod:`care_sdk.profiles`), stored as a JSON text under
            ``profile_key`` (parquet keeps one column type for every row); none when ``None``.
        profile_key: the ``extra_info`` key for the profile.

    Examples:
        >>> row = make_row("I lost my job today.", index=7)
        >>> row["extra_info"]["messages"], row["prompt"] == row["extra_info"]["messages"]
        ([{'role': 'user', 'content': 'I lost my job today.'}], True)
        >>> make_row("I lost my job today.", profile="A single father.")["extra_info"]["profile"]
        '{"text": "A single father.", "traits": [], "history": null}'
    """
    messages = [{"role": m.role, "content": m.content} for m in as_messages(context)]
    extra: dict[str, Any] = {context_key: messages}
    read = as_profile(profile)
    if read is not None:
        extra[profile_key] = json.dumps(read.model_dump(mode="json"), ensure_ascii=False)
    if index is not None:
        extra["index"] = index
    return {
        "data_source": data_source,
        "prompt": [dict(m) for m in prompt] if prompt is not None else messages,
        "ability": "emotional_support",
        "reward_model": {"style": "model", "ground_truth": ""},
        "extra_info": extra,
    }


def get_reward(
    backend: str | Backend | None = None,
    *,
    variant: str = "care",
    use_logprobs: bool | None = None,
    cache: str | None = None,
    add_ons: str | Sequence[str] | None = None,
) -> AdaptiveReward:
    """The process's shared :class:`AdaptiveReward` for these options, built on first use.

    ``backend`` defaults to ``$CARE_BACKEND`` or ``"default"``; ``cache`` (an SQLite file shared by
    all workers) defaults to ``$CARE_RUBRIC_CACHE`` or an in-memory cache; ``add_ons`` (opt-in add-ons
    outside the method, ``NAME[=SPEC]`` as in ``care score --add-on``, a list or one comma-separated
    string, see :func:`care_sdk.addons.add_ons`) defaults to ``$CARE_ADD_ONS`` or none (the method's
    reward on every backend).

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> backend = ScriptedBackend([])
        >>> get_reward(backend) is get_reward(backend)
        True
    """
    backend = backend if backend is not None else os.environ.get("CARE_BACKEND", "default")
    cache = cache if cache is not None else os.environ.get("CARE_RUBRIC_CACHE")
    if add_ons is None:
        add_ons = os.environ.get("CARE_ADD_ONS", "")
    asked = tuple(a.strip() for a in (add_ons.split(",") if isinstance(add_ons, str) else add_ons) if a.strip())
    spec = backend if isinstance(backend, str) else id(backend)
    key = (spec, as_variant(variant), use_logprobs, cache, asked)
    with _LOCK:
        reward = _REWARDS.get(key)
        if reward is None:
            store: Any = True
            if cache:
                from care_sdk.sqlite_cache import SqliteCache

                store = SqliteCache(cache)
            reward = _REWARDS[key] = AdaptiveReward.from_backend(
                backend,
                variant=variant,
                add_ons=asked,
                generator_options={"cache": store},
                evaluator_options={"use_logprobs": use_logprobs},
            )
        return reward


def get_audit(reference: str | Backend, options: Mapping[str, Any] | None = None) -> Audit:
    """The process's shared :class:`~care_sdk.audit.Audit` for this reference and options, built on first use.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> judge = ScriptedBackend([])
        >>> get_audit(judge, {"fraction": 0.1}) is get_audit(judge, {"fraction": 0.1})
        True
    """
    opts = dict(options or {})
    key = (reference if isinstance(reference, str) else id(reference), json.dumps(opts, sort_keys=True, default=str))
    with _LOCK:
        audit = _AUDITS.get(key)
        if audit is None:
            audit = _AUDITS[key] = Audit(reference, **opts)
        return audit


def _audit_columns(metrics: Mapping[str, float]) -> dict[str, float]:
    """The audit's metrics of one batch as row keys: ``care_audit_<key>``, NaN where the batch has none."""
    values = {name.rpartition("/audit/")[2]: value for name, value in metrics.items()}
    return {f"care_audit_{k.replace('/', '_')}": float(values.get(k, math.nan)) for k in AUDIT_KEYS}


def _context(extra_info: Any, context_key: str, where: str) -> Messages:
    """The context of a row, normalised once, where it enters from verl."""
    if not isinstance(extra_info, Mapping):
        raise InputError(f"{where}: extra_info must be a dict holding the context under {context_key!r}")
    value = extra_info.get(context_key)
    if value is None:
        raise InputError(f"{where}: extra_info[{context_key!r}] is missing; build rows with make_row()")
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: extra_info[{context_key!r}] is not valid JSON ({exc.msg})") from None
    if not isinstance(value, str):
        value = [dict(m) for m in value]  # parquet may hand back numpy arrays of dicts
    try:
        messages = as_messages(value)
    except ValueError as exc:
        raise InputError(f"{where}: extra_info[{context_key!r}] is not a list of chat messages: {exc}") from None
    if not messages:
        raise InputError(f"{where}: extra_info[{context_key!r}] is empty")
    return messages


def read_profile(extra_info: Any, profile_key: str, where: str) -> UserProfile | None:
    """The user profile of a row, normalised once, where it enters from verl: ``extra_info[profile_key]``
    as JSON text (what :func:`make_row` writes), free text, or a dict; none when absent or ``None``.

    Examples:
        >>> read_profile({"profile": '{"traits": ["shy"]}'}, "profile", "verl row").traits
        ('shy',)
        >>> read_profile({"profile": '{"traits": "shy"}'}, "profile", "verl row")
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: verl row: extra_info['profile'].traits: Input should be a valid tuple
    """
    value = extra_info.get(profile_key) if isinstance(extra_info, Mapping) else None
    here = f"{where}: extra_info[{profile_key!r}]"
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InputError(f"{here} is not valid JSON ({exc.msg})") from None
    if isinstance(value, Mapping):  # parquet may hand back numpy arrays for lists
        value = {k: v.tolist() if hasattr(v, "tolist") else v for k, v in value.items()}
    return as_profile(value, here)


def _where(data_source: Any, extra_info: Any, position: int | None = None) -> str:
    index = extra_info.get("index") if isinstance(extra_info, Mapping) else None
    parts = [f"data_source={data_source!r}"]
    if index is not None:
        parts.append(f"index={index}")
    if position is not None:
        parts.append(f"batch position {position}")
    return "verl row (" + ", ".join(parts) + ")"


def _as_dict(result: RewardResult, on_error: str | float, where: str) -> dict[str, float]:
    failed = result.reward is None
    if failed:
        if on_error == "raise":
            raise CareError(f"{where}: {result.error}")
        logger.warning("%s: no CARE reward (%s); scoring it %s", where, result.error, on_error)
    out = {"score": float(on_error) if failed else float(result.reward or 0.0), "care_failed": float(failed)}
    for dim in DIMENSIONS:
        score = result.dimension_scores.get(dim) if result.dimension_scores else None
        out[f"care_{dim.value}"] = math.nan if score is None else score
        out[f"care_weight_{dim.value}"] = result.rubric.weights[dim] if result.rubric is not None else math.nan
    out["care_context_fit"] = math.nan if result.context_fit is None else result.context_fit
    out.update(cost_metrics([result], "care_cost_"))
    made = result.provenance
    source = made.rubric_source if made is not None else None
    out["care_rubric_cached"] = {"cached": 1.0, "generated": 0.0}.get(source or "", math.nan)
    return out


def _refuse_modes(others: Mapping[str, Any]) -> None:
    """Refuse ``weights=`` / ``criteria=``: verl passes other keywords through, which are ignored, and an
    ablation asked for that way must not silently score as CARE.

    Examples:
        >>> _refuse_modes({"weights": "uniform"})
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: weights=: ablations are named by variant= (care, uniform_weights, ...
    """
    for mode in ("weights", "criteria"):
        if mode in others:
            raise ConfigError(
                f"{mode}=: ablations are named by variant= (care, uniform_weights, fixed_criteria, fixed_rubric)"
            )


def _on_error(value: str | float) -> str | float:
    if value == "raise":
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InputError(f"on_error must be 'raise' or a number, got {value!r}") from None


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any] | None = None,
    extra_infos: Sequence[Any] | None = None,
    *,
    backend: str | Backend | None = None,
    variant: str = "care",
    use_logprobs: bool | None = None,
    cache: str | None = None,
    add_ons: str | Sequence[str] | None = None,
    context_key: str = DEFAULT_CONTEXT_KEY,
    profile_key: str = DEFAULT_PROFILE_KEY,
    on_error: str | float = "raise",
    advantages: str = "weighted",
    audit: str | None = None,
    audit_options: Mapping[str, Any] | None = None,
    **others: Any,
) -> list[dict[str, float]]:
    """verl's batch reward form: one result dict per response, all judged in one batch.

    Replies to the same context share one rubric. ``ground_truths`` are ignored.

    Args:
        data_sources: verl's ``data_source`` per row.
        solution_strs: the decoded responses.
        ground_truths: unused (CARE needs no reference answer).
        extra_infos: per row, a dict with the context under ``context_key`` (see :func:`make_row`).
        backend: backend spec or object (default ``$CARE_BACKEND`` or ``"default"``).
        variant: ``"care"`` or an ablation: ``"uniform_weights"``, ``"fixed_criteria"``,
            ``"fixed_rubric"`` (see :mod:`care_sdk.variants`).
        use_logprobs: expected scores over the score tokens' probabilities (``None``: as the evaluator
            decides, on for an adapter trained to be read that way).
        cache: SQLite file for rubrics shared across workers and runs (default ``$CARE_RUBRIC_CACHE``).
        add_ons: opt-in add-ons outside the method, ``NAME[=SPEC]`` as in ``care score --add-on``
            (``weights-head``, ``expected-weights``, ``context-fit``), a list or one comma-separated
            string; default ``$CARE_ADD_ONS``, or none. With ``context-fit`` the fit is the
            ``care_context_fit`` entry (NaN without).
        context_key: the ``extra_info`` key holding the context.
        profile_key: the ``extra_info`` key holding the user's profile (see :func:`make_row`); a row
            without it is judged without a profile.
        on_error: ``"raise"`` (default: stop with the reason) or a score to give a reply that could
            not be scored; such rows carry ``care_failed=1.0`` and are logged as warnings.
        advantages: ``"weighted"`` (the reward) or ``"per_dimension"`` (``score`` is the reply's
            per-dimension advantage among the replies to its context in this batch; every row
            also carries ``care_reward``, the weighted reward).
        audit: a reference judge spec: an :class:`~care_sdk.audit.Audit` (one per process, see
            :func:`get_audit`) sees every batch; default ``$CARE_AUDIT`` or none.
        audit_options: the audit's keyword arguments (``fraction``, ``log_path``, thresholds, ...).

    Raises:
        InputError: a row without a usable context, or with a profile that is not one (the message
            names the row).
        CareError: a reply could not be scored and ``on_error="raise"``.
        ConfigError: an unknown ``variant``; ``add_ons`` names an unknown add-on, or two weight
            readers; an unknown ``advantages``; ``weights=`` or ``criteria=`` given (ablations are
            named by ``variant``).

    Examples:
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
        >>> def script(req):
        ...     if req.purpose == "rubric":
        ...         return rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
        ...     return evaluation_json([4] * 6)
        >>> backend = ScriptedBackend(script)
        >>> rows = [make_row("I lost my job today.", index=0)] * 2
        >>> out = compute_score_batch([r["data_source"] for r in rows], ["That is a blow.", "Why?"],
        ...                           [None, None], [r["extra_info"] for r in rows], backend=backend)
        >>> [o["score"] for o in out], out[0]["care_weight_affective"], len(backend.requests)
        ([0.75, 0.75], 0.5, 3)
    """
    _refuse_modes(others)
    policy = _on_error(on_error)
    if advantages not in ADVANTAGES:
        raise ConfigError(f"advantages must be one of {', '.join(ADVANTAGES)}, got {advantages!r}")
    n = len(solution_strs)
    infos: Sequence[Any] = extra_infos if extra_infos is not None else [None] * n
    if len(data_sources) != n or len(infos) != n:
        raise InputError(f"verl batch: {len(data_sources)} data_sources, {n} solution_strs, {len(infos)} extra_infos")
    wheres = [_where(ds, info, i) for i, (ds, info) in enumerate(zip(data_sources, infos, strict=True))]
    items = [
        (_context(info, context_key, w), str(s).strip())
        for info, s, w in zip(infos, solution_strs, wheres, strict=True)
    ]
    reward = get_reward(backend, variant=variant, use_logprobs=use_logprobs, cache=cache, add_ons=add_ons)
    profiles = [read_profile(info, profile_key, w) for info, w in zip(infos, wheres, strict=True)]
    results = reward.score_batch(items, profiles)
    rows = [_as_dict(r, policy, w) for r, w in zip(results, wheres, strict=True)]
    if advantages == "per_dimension":
        values = per_dimension_advantages(results, [group_key(c) for c, _ in items])
        for row, value in zip(rows, values, strict=True):
            row["care_reward"] = row["score"]
            if value is not None:
                row["score"] = value
    audit = audit if audit is not None else os.environ.get("CARE_AUDIT") or None
    if audit is not None:
        metrics: dict[str, float] = {}
        get_audit(audit, audit_options).observe(items, results, reward=reward, log_metric=metrics.__setitem__)
        columns = _audit_columns(metrics)
        for row in rows:
            row.update(columns)
    return rows


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any = None,
    extra_info: Any = None,
    **options: Any,
) -> dict[str, float]:
    """verl's per-response reward form (the ``naive`` reward manager); options as in :func:`compute_score_batch`.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
        >>> backend = ScriptedBackend([rubric_json({"cognitive": 1, "affective": 1, "proactive": 2}),
        ...                            evaluation_json([5, 5, 3, 3, 1, 1])])
        >>> row = make_row([{"role": "user", "content": "My exam is tomorrow and I'm panicking."}])
        >>> out = compute_score(row["data_source"], "Let's plan tonight together.", "", row["extra_info"],
        ...                     backend=backend)
        >>> out["score"], out["care_proactive"], out["care_failed"]
        (0.375, 0.0, 0.0)
    """
    if options.get("advantages", "weighted") != "weighted":
        raise ConfigError(
            "advantages='per_dimension' needs the whole group: use compute_score_batch (reward_manager=batch)"
        )
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **options)[0]
