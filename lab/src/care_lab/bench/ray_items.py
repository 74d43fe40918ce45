"""Scoring the lab's benchmark items on a Ray cluster: the batch scorer of ``care bench quality --ray``.

Examples:
    >>> score = ray_item_batches(lambda: None, address=None)
    >>> callable(score)
    True
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from care_sdk.ray_scoring import connect, require_ray

if TYPE_CHECKING:
    from care_lab.bench.quality import BatchScorer
    from care_lab.bench.variants import Item, VariantScorer

__all__ = ["ray_item_batches"]


class _ItemScorer:
    """The Ray Data actor of :func:`ray_item_batches`: builds its scorer once, then scores items by index."""

    def __init__(self, make_scorer: Callable[[], VariantScorer], items: Sequence[Item]) -> None:
        os.environ["OMP_NUM_THREADS"] = "1"
        self.scorer = make_scorer()
        self.items = items

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        indices = [int(i) for i in batch["index"]]
        out: dict[str, list[Any]] = {"index": [], "records": []}
        for scored in self.scorer.score_batches([self.items[i] for i in indices]):
            for position, by_variant in scored:
                out["index"].append(indices[position])
                out["records"].append(json.dumps(by_variant, ensure_ascii=False))
        return out


def ray_item_batches(
    make_scorer: Callable[[], VariantScorer],
    *,
    address: str | None = "auto",
    workers: int = 2,
    batch_size: int = 8,
) -> BatchScorer:
    """A :data:`~care_lab.bench.quality.BatchScorer` for :class:`~care_lab.bench.quality.QualityRunner`
    that scores the items on a Ray cluster: ``workers`` actors (one CPU each) each build a
    :class:`~care_lab.bench.variants.VariantScorer` with ``make_scorer`` (picklable) and score
    ``batch_size`` items a call; the records come back to the caller, which keeps them.

    Examples:
        >>> score = ray_item_batches(lambda: None, address=None)
        >>> callable(score)
        True
    """

    def score(items: Sequence[Item]) -> Iterator[list[tuple[int, dict[str, dict[str, Any]]]]]:
        if not items:
            return
        ray = require_ray()
        connect(address)
        scored = ray.data.from_items([{"index": i} for i in range(len(items))]).map_batches(
            _ItemScorer,
            fn_constructor_args=(make_scorer, list(items)),
            batch_size=max(1, batch_size),
            batch_format="default",
            compute=ray.data.ActorPoolStrategy(size=max(1, workers)),
            num_cpus=1,
            runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
        )
        for batch in scored.iter_batches(batch_size=None, batch_format="default"):
            yield [(int(i), json.loads(r)) for i, r in zip(batch["index"], batch["records"], strict=True)]

    return score
