"""NeMo-Gym's resources-server protocol for ``care serve``: ``/seed_session`` and ``/verify``.

A NeMo-Gym agent seeds a session on its resources server, runs the policy through the OpenAI
Responses API, then posts ``/verify`` with the run request and the policy's response
(``BaseVerifyRequest``: ``responses_create_params``, ``response`` and the task's own fields). The
answer is the request with ``reward`` added; CARE answers in the shape of NeMo-Gym's
``BaseMultiRewardVerifyResponse``:

- ``reward``: the CARE reward in [0, 1]; ``reward_components``: ``{"cognitive": ..., "affective":
  ..., "proactive": ...}`` (per-dimension normalised scores, before weighting);
- the same scores and the rubric's weights as top-level numbers (``care_<dimension>``,
  ``care_weight_<dimension>``), which NeMo-Gym's aggregate metrics read;
- ``mask_sample``, ``failure_kind``, ``failure_reason``: a reply CARE could not score is answered
  as NeMo-Gym's ``judge_failsafe`` answers a failed judge: ``reward`` 0.0 with ``mask_sample`` true,
  ``failure_kind`` ``judge_failed`` (``judge_unparseable`` when the judge's output never parsed),
  the reason, and ``_ng_failure_class`` so NeMo-Gym routes the row to its failures file and keeps
  it out of every metric.

The judged context is the request's ``input`` messages (user and assistant turns; system and
developer messages and ``instructions`` are the policy's, not judged); the reply is the text of the
response's assistant ``message`` items.

Examples:
    >>> body = {"responses_create_params": {"input": [{"role": "user", "content": "I lost my job."}]},
    ...         "response": {"output": [{"type": "message", "role": "assistant",
    ...                                  "content": [{"type": "output_text", "text": "That's a blow."}]}]}}
    >>> parse_verify(body)
    ((Message(role='user', content='I lost my job.'),), "That's a blow.")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from care_sdk.provenance import cost_metrics
from care_sdk.serve.protocol import RequestError
from care_sdk.types import DIMENSIONS, Messages, RewardResult, dialogue_turns

__all__ = ["parse_verify", "verify_body"]


def _text(content: Any, field: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError("must be a string or a list of content parts", field=field)
    parts = []
    for part in content:
        if isinstance(part, Mapping) and isinstance(part.get("text"), str):
            parts.append(part["text"])
    return "".join(parts)


def parse_verify(body: Any) -> tuple[Messages, str]:
    """Read a NeMo-Gym ``/verify`` body: the judged context (its user and assistant turns, normalised
    here, :func:`~care_sdk.types.dialogue_turns`) and the policy's reply.

    Raises:
        RequestError: ``responses_create_params`` or ``response`` is missing or of the wrong shape
            (named, e.g. ``responses_create_params.input[2].content``), or no user or assistant turn
            precedes the reply.

    Examples:
        >>> parse_verify({"responses_create_params": {"input": "I can't sleep."}, "response": {"output": []}})
        ((Message(role='user', content="I can't sleep."),), '')
        >>> parse_verify({"response": {"output": []}})
        Traceback (most recent call last):
        ...
        care_sdk.serve.protocol.RequestError: responses_create_params: is required (an object)
    """
    if not isinstance(body, Mapping):
        raise RequestError(f"the body must be a JSON object, got {type(body).__name__}", field="body")
    params = body.get("responses_create_params")
    if not isinstance(params, Mapping):
        raise RequestError("is required (an object)", field="responses_create_params")
    response = body.get("response")
    if not isinstance(response, Mapping) or not isinstance(response.get("output"), list):
        raise RequestError("is required (an object with an output list)", field="response")
    raw = params.get("input")
    if isinstance(raw, list):
        where = "responses_create_params.input[{}].content"
        raw = [
            {"role": item.get("role"), "content": _text(item.get("content"), where.format(i))}
            for i, item in enumerate(raw)
            # tool calls, their outputs and reasoning are not dialogue turns
            if isinstance(item, Mapping) and item.get("type", "message") == "message"
        ]
    elif not isinstance(raw, str):
        raise RequestError("must be a string or a list of input items", field="responses_create_params.input")
    context = dialogue_turns(raw)
    if not context:
        raise RequestError(
            "has no user or assistant turn to judge the reply against", field="responses_create_params.input"
        )
    replies = [
        _text(item.get("content"), f"response.output[{i}].content")
        for i, item in enumerate(response["output"])
        if isinstance(item, Mapping) and item.get("type") == "message" and item.get("role", "assistant") == "assistant"
    ]
    return context, "\n".join(r for r in replies if r).strip()


def verify_body(request: Mapping[str, Any], result: RewardResult) -> dict[str, Any]:
    """The ``/verify`` answer: the request with the reward, its components and NeMo-Gym's failure fields.

    Examples:
        >>> failed = verify_body({"task_id": 3}, RewardResult.failed("evaluation failed: no JSON"))
        >>> failed["reward"], failed["mask_sample"], failed["failure_kind"], failed["task_id"]
        (0.0, True, 'judge_failed', 3)
    """
    out = dict(request)
    out.update(cost_metrics([result], "care_cost_"))  # what the call cost, a failed one too
    if result.reward is None:
        kind = (
            "judge_unparseable"
            if result.failure is not None and result.failure.kind == "OutputError"
            else "judge_failed"
        )
        reason = (result.error or "no reward")[:2000]
        out.update(
            reward=0.0,
            reward_components={},
            mask_sample=True,
            failure_kind=kind,
            failure_reason=reason,
            _ng_failure_class="judge_failed",
            _ng_failure_judge_error=reason,
        )
        return out
    components = {
        dim.value: (result.dimension_scores or {}).get(dim, 0.0) for dim in DIMENSIONS if result.dimension_scores
    }
    out.update(
        reward=result.reward, reward_components=components, mask_sample=False, failure_kind=None, failure_reason=None
    )
    for dim in DIMENSIONS:
        if result.dimension_scores and dim in result.dimension_scores:
            out[f"care_{dim.value}"] = result.dimension_scores[dim]
        if result.rubric is not None:
            out[f"care_weight_{dim.value}"] = result.rubric.weights[dim]
    if result.flags:
        out["care_flags"] = list(result.flags)
    return out
