"""CARE as a judge in a verifiers environment (``verifiers.v1``: tasks, traces, weighted rewards).

verifiers scores every rollout with its task's ``@vf.reward`` functions, config-plugged reward
functions and judges, each called as ``fn(task=TaskData, trace=Trace)``. Two forms:

- :func:`care_reward`: a module-level reward function a task config plugs by import path, with no
  code (options from ``$CARE_BACKEND``, ``$CARE_RUBRIC_CACHE``, ``$CARE_ADD_ONS``)::

      --env.taskset.task.rewards.care.fn care_sdk.integrations.verifiers:care_reward

- :class:`CareJudge`: a :class:`verifiers.v1.Judge` with its own :class:`CareJudgeConfig`, called
  from a ``@vf.reward`` method or returned by a task's ``plugged_judges()``.

The reward is recorded as ``trace.rewards["care"]`` (a ``vf.Reward`` with its weight); the
explanation as unweighted metrics: ``care/<dimension>`` (the dimension's normalised score) and
``care/weight/<dimension>`` (the rubric's weight), plus ``care/context_fit`` with that add-on. A
reply that cannot be scored raises :class:`~care_sdk.errors.CareError`, which verifiers records on
the trace as a ``TaskError`` (``trace.ok`` false, the reward left unscored): never a 0.

The judged context is the trace's last branch before its final reply (user and assistant turns;
system and tool messages dropped), or a task-data field named by ``context_field``. Rollouts of
one task scored at the same time share one rubric (see :mod:`care_sdk.integrations._group`).

Examples:
    >>> import asyncio
    >>> import verifiers.v1 as vf
    >>> from verifiers.v1.trace import AgentInfo, TraceTask
    >>> from care_sdk import AdaptiveReward
    >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
    >>> backend = ScriptedBackend(lambda req: rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
    ...                           if req.purpose == "rubric" else evaluation_json([5, 5, 5, 5, 1, 1]))
    >>> judge = CareJudge(reward=AdaptiveReward.from_backend(backend))
    >>> data = vf.TaskData(prompt=[vf.UserMessage(content="I lost my job today.")])
    >>> trace = vf.Trace(task=TraceTask(type="SupportTask", data=data), agent=AgentInfo(config=vf.AgentConfig()),
    ...     nodes=[vf.MessageNode(message=vf.UserMessage(content="I lost my job today.")),
    ...            vf.MessageNode(parent=0, message=vf.AssistantMessage(content="That's a hard blow."), sampled=True)])
    >>> asyncio.run(judge.score(data, trace)), trace.metrics["care/affective"], trace.metrics["care/weight/affective"]
    (0.75, 1.0, 0.5)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import Any

from care_sdk.errors import CareError, InputError, MissingDependencyError
from care_sdk.integrations._group import GroupScorer
from care_sdk.provenance import cost_metrics
from care_sdk.reward import AdaptiveReward
from care_sdk.types import DIMENSIONS, Messages, RewardResult, as_messages, dialogue_turns

try:
    import verifiers.v1 as vf  # type: ignore[import-untyped]  # verifiers ships no type information
    from verifiers.v1.types import content_text  # type: ignore[import-untyped]
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is installed wherever this module is used
    raise MissingDependencyError("verifiers", extra="verifiers") from exc

__all__ = ["CareJudge", "CareJudgeConfig", "care_reward", "judged_context", "record_result"]


class CareJudgeConfig(vf.JudgeConfig):  # type: ignore[misc]  # verifiers ships no type information
    """:class:`CareJudge`'s options, as verifiers config (``--...judges`` entries, TOML, Python).

    The OpenAI client fields inherited from ``vf.JudgeConfig`` are unused: CARE reaches its models
    through ``backend``. ``weight`` is the reward's weight in ``trace.reward``.

    Examples:
        >>> CareJudgeConfig(backend="openai:judge@http://127.0.0.1:8000/v1").name
        'care'
    """

    name: str = "care"
    """The reward key in ``trace.rewards`` and the prefix of the metrics."""
    backend: str = ""
    """CARE backend spec for generator and evaluator; empty: ``$CARE_BACKEND`` or ``default``."""
    variant: str = "care"
    """``care`` or an ablation: ``uniform_weights``, ``fixed_criteria``, ``fixed_rubric`` (:mod:`care_sdk.variants`)."""
    cache: str = ""
    """SQLite file for rubrics shared by workers and runs; empty: ``$CARE_RUBRIC_CACHE`` or in memory."""
    add_ons: str = ""
    """Opt-in add-ons outside the method, ``NAME[=SPEC]`` comma-separated; empty: ``$CARE_ADD_ONS`` or none."""
    context_field: str = ""
    """Task-data field holding the judged context (chat messages or text); empty: the trace's own turns."""
    window_ms: float = 20.0
    """How long a batch of concurrent rollouts waits for more to arrive before it is scored."""


def judged_context(task: Any, trace: Any, context_field: str = "") -> Messages:
    """The dialogue CARE judges a trace's final reply against, normalised here (:data:`~care_sdk.types.Messages`).

    Without ``context_field``, the trace's last branch up to (not including) its final assistant
    message, user and assistant turns only; with it, that task-data field (messages or text).

    Raises:
        InputError: the field is missing or empty, or the trace has no turn before its reply.

    Examples:
        >>> import verifiers.v1 as vf
        >>> from verifiers.v1.trace import AgentInfo, TraceTask
        >>> data = vf.TaskData(prompt="I can't sleep.")
        >>> trace = vf.Trace(task=TraceTask(type="T", data=data), agent=AgentInfo(config=vf.AgentConfig()),
        ...     nodes=[vf.MessageNode(message=vf.SystemMessage(content="Be kind.")),
        ...            vf.MessageNode(parent=0, message=vf.UserMessage(content="I can't sleep.")),
        ...            vf.MessageNode(parent=1, message=vf.AssistantMessage(content="Since when?"), sampled=True)])
        >>> judged_context(data, trace)
        (Message(role='user', content="I can't sleep."),)
    """
    if context_field:
        value = getattr(task, context_field, None)
        if value is None and isinstance(task, Mapping):
            value = task.get(context_field)
        if not value:
            raise InputError(f"verifiers task: no judged context in task field {context_field!r}")
        if isinstance(value, str):
            return as_messages(value)
        return as_messages([m for m in map(_as_dict, value) if m["role"] in ("user", "assistant", "system")])
    messages = [_as_dict(m) for m in trace.messages]
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=len(messages))
    context = dialogue_turns(messages[:last])
    if not context:
        raise InputError("verifiers trace: no user or assistant turn before the reply to judge")
    return context


def _as_dict(message: Any) -> dict[str, str]:
    if isinstance(message, Mapping):
        return {"role": str(message.get("role", "")), "content": content_text(message.get("content"))}
    return {"role": str(message.role), "content": content_text(message.content)}


def record_result(trace: Any, result: RewardResult, name: str = "care") -> float:
    """Record a result's explanation as trace metrics and return its reward; raise when there is none.

    Metrics: ``<name>/<dimension>`` and ``<name>/weight/<dimension>`` for each dimension,
    ``<name>/context_fit`` when the reward read it, and what the reward cost (``<name>/cost/calls``,
    ``<name>/cost/seconds``, ``<name>/cost/prompt_tokens``, ``<name>/cost/completion_tokens``; see
    :func:`care_sdk.provenance.cost_metrics`).

    Raises:
        CareError: the result has no reward (the error says why); verifiers records it on the trace.

    Examples:
        >>> record_result(None, RewardResult.failed("evaluation failed: no JSON"))
        Traceback (most recent call last):
        ...
        care_sdk.errors.CareError: CARE could not score the reply: evaluation failed: no JSON
    """
    if result.reward is None:
        raise CareError(f"CARE could not score the reply: {result.error}")
    metrics: dict[str, float] = {}
    for dim in DIMENSIONS:
        score = result.dimension_scores.get(dim) if result.dimension_scores else None
        metrics[f"{name}/{dim.value}"] = math.nan if score is None else score
        metrics[f"{name}/weight/{dim.value}"] = result.rubric.weights[dim] if result.rubric is not None else math.nan
    if result.context_fit is not None:
        metrics[f"{name}/context_fit"] = result.context_fit
    if result.provenance is not None:
        metrics.update(cost_metrics([result], f"{name}/cost/"))
    trace.record_metrics(metrics)
    return result.reward


class CareJudge(vf.Judge):  # type: ignore[misc]  # verifiers ships no type information
    """CARE's reward as a verifiers judge: ``await judge.score(task, trace) -> float``.

    Args:
        config: the options (default: every option from the environment, as :func:`care_reward`).
        reward: an :class:`~care_sdk.AdaptiveReward` to use instead of building one from ``config``
            (a reward on a backend object, say a scripted one in tests).

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> judge = CareJudge(reward=AdaptiveReward.from_backend(ScriptedBackend([])))
        >>> judge.reward_name, judge.config.window_ms
        ('care', 20.0)
    """

    def __init__(self, config: CareJudgeConfig | None = None, *, reward: AdaptiveReward | None = None) -> None:
        super().__init__(config or CareJudgeConfig())
        if reward is None:
            from care_sdk.integrations.verl import get_reward

            c = self.config
            reward = get_reward(c.backend or None, variant=c.variant, cache=c.cache or None, add_ons=c.add_ons)
        self.scorer = GroupScorer(reward, window_s=self.config.window_ms / 1000.0)

    @property
    def reward_name(self) -> str:
        """The reward key: the config's ``name`` (``care``)."""
        return str(self.config.name or "care")

    async def score(self, task: Any, trace: Any) -> float:
        """Score the trace's final reply against its context; record the explanation as metrics.

        Raises:
            CareError: no reward could be computed (verifiers records it on the trace).
        """
        context = judged_context(task, trace, self.config.context_field)
        result = await self.scorer.score(context, trace.last_reply)
        return record_result(trace, result, self.reward_name)


_JUDGE: list[CareJudge] = []
_LOCK = threading.Lock()


async def care_reward(task: Any, trace: Any) -> float:
    """A reward function to plug by import path (``care_sdk.integrations.verifiers:care_reward``).

    Builds one :class:`CareJudge` per process from ``$CARE_BACKEND``, ``$CARE_RUBRIC_CACHE`` and
    ``$CARE_ADD_ONS``; its metrics carry the ``care/`` prefix whatever name the reward is plugged under.

    Examples:
        >>> import inspect
        >>> inspect.iscoroutinefunction(care_reward), list(inspect.signature(care_reward).parameters)
        (True, ['task', 'trace'])
    """
    with _LOCK:
        if not _JUDGE:
            _JUDGE.append(CareJudge())
        judge = _JUDGE[0]
    return await judge.score(task, trace)
