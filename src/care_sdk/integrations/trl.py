"""How :class:`~care_sdk.AdaptiveReward` talks to TRL's ``GRPOTrainer``.

TRL calls a reward function as ``f(prompts=..., completions=..., completion_ids=..., **columns,
trainer_state=..., log_extra=..., log_metric=...)`` where ``columns`` are the dataset's other
columns, repeated once per generation. :func:`trl_items` turns such a call into ``(context,
reply)`` pairs and :func:`report_to_trainer` reports each batch's explanation through the two
logging hooks. TRL itself is not imported.

Examples:
    >>> items = trl_items(["I failed."], [[{"role": "assistant", "content": "Oh no."}]], {})
    >>> items[0][1]
    'Oh no.'
"""

from __future__ import annotations

from care_sdk._calls import METRIC_PREFIX, completion_text, report_to_trainer, trl_items

__all__ = ["METRIC_PREFIX", "completion_text", "report_to_trainer", "trl_items"]
