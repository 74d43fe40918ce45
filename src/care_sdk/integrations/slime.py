"""CARE rewards for slime: a per-sample and a group custom reward function.

slime calls a custom reward model (``--custom-rm-path``) as ``await rm(args, sample)`` for each
sample, or, with ``--group-rm``, as ``await rm(args, samples)`` for the samples of one prompt.
``sample.prompt`` is the chat-templated prompt text (``--apply-chat-template``) or the chat
messages; ``sample.response`` is the decoded reply. slime itself is not imported::

    --custom-rm-path care_sdk.integrations.slime.rm                  # per sample
    --group-rm --custom-rm-path care_sdk.integrations.slime.group_rm # per prompt group

Options come from ``$CARE_BACKEND``, ``$CARE_RUBRIC_CACHE`` and ``$CARE_ADD_ONS`` (one reward per
process). Each function returns the CARE reward as a float and writes its explanation to
``sample.metadata["care"]``: ``reward``, the per-dimension scores, the rubric's ``weights``, its ``cost``, and
``error``. A sample CARE could not score gets ``sample.remove_sample = True`` (slime masks its loss
and its filters read it as having no reward) and 0.0 as the number slime requires; never a score the
policy is trained on. Concurrent per-sample calls for one prompt share one rubric.

Examples:
    >>> import asyncio
    >>> from types import SimpleNamespace
    >>> from care_sdk import AdaptiveReward
    >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
    >>> backend = ScriptedBackend(lambda req: rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
    ...                           if req.purpose == "rubric" else evaluation_json([5, 5, 5, 5, 1, 1]))
    >>> use_reward(AdaptiveReward.from_backend(backend))
    >>> sample = SimpleNamespace(prompt=[{"role": "user", "content": "I lost my job."}], response="That hurts.",
    ...                          label=None, remove_sample=False, metadata={})
    >>> asyncio.run(rm(SimpleNamespace(), sample)), sample.metadata["care"]["weights"]["affective"]
    (0.75, 0.5)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from care_sdk.integrations._group import GroupScorer
from care_sdk.provenance import cost_metrics
from care_sdk.reward import AdaptiveReward
from care_sdk.serve.protocol import split_query
from care_sdk.types import DIMENSIONS, Messages, RewardResult, dialogue_turns

__all__ = ["group_rm", "rm", "sample_item", "use_reward"]

_SCORER: list[GroupScorer] = []
_LOCK = threading.Lock()


def use_reward(reward: AdaptiveReward | None) -> None:
    """Use ``reward`` for every later call in this process (``None``: build it again from the environment).

    Examples:
        >>> use_reward(None)
    """
    with _LOCK:
        _SCORER.clear()
        if reward is not None:
            _SCORER.append(GroupScorer(reward))


def _scorer() -> GroupScorer:
    with _LOCK:
        if not _SCORER:
            from care_sdk.integrations.verl import get_reward

            _SCORER.append(GroupScorer(get_reward()))
        return _SCORER[0]


def sample_item(sample: Any) -> tuple[Messages, str]:
    """The ``(context, reply)`` CARE judges for a slime sample, the context normalised once, here.

    Chat messages keep their user and assistant turns; a chat-templated prompt (ChatML, Llama 3) is
    read back into turns; any other text is one user message. The reply loses trailing special tokens.

    Examples:
        >>> from types import SimpleNamespace
        >>> s = SimpleNamespace(prompt="<|im_start|>system\\nBe kind.<|im_end|>\\n<|im_start|>user\\nI'm sad."
        ...                            "<|im_end|>\\n<|im_start|>assistant\\n", response="Why?<|im_end|>")
        >>> sample_item(s)[0][0].content, sample_item(s)[1]
        ("I'm sad.", 'Why?')
    """
    prompt, response = sample.prompt, str(sample.response or "")
    if isinstance(prompt, str):
        split = split_query(prompt + response, prompt)
        return dialogue_turns(split.context), split.reply
    return dialogue_turns([m for m in prompt if isinstance(m, Mapping)]), response.strip()


def _record(sample: Any, result: RewardResult) -> float:
    info: dict[str, Any] = {"reward": result.reward, "error": result.error}
    for dim in DIMENSIONS:
        info[dim.value] = result.dimension_scores.get(dim) if result.dimension_scores else None
    info["weights"] = {d.value: w for d, w in result.rubric.weights.items()} if result.rubric is not None else None
    info["cost"] = cost_metrics([result], "")
    metadata = getattr(sample, "metadata", None)
    if isinstance(metadata, dict):
        metadata["care"] = info
    if result.reward is None:
        sample.remove_sample = True  # slime masks the sample's loss; its filters read it as no reward
        return 0.0
    return result.reward


async def rm(args: Any, sample: Any, **kwargs: Any) -> float:
    """slime's per-sample custom reward: the CARE reward of ``sample.response`` (see the module docs).

    Examples:
        >>> import inspect
        >>> list(inspect.signature(rm).parameters)
        ['args', 'sample', 'kwargs']
    """
    context, reply = sample_item(sample)
    return _record(sample, await _scorer().score(context, reply))


async def group_rm(args: Any, samples: Sequence[Any], **kwargs: Any) -> list[float]:
    """slime's group custom reward (``--group-rm``): the rewards of one prompt's samples, one rubric.

    Examples:
        >>> import inspect
        >>> inspect.iscoroutinefunction(group_rm)
        True
    """
    items = [sample_item(s) for s in samples]
    results = await _scorer().reward.ascore_batch(items)
    return [_record(s, r) for s, r in zip(samples, results, strict=True)]
