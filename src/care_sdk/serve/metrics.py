"""Prometheus metrics of the reward service, on a registry of its own (one per app).

Names: ``care_serve_requests_total{endpoint,status}``, ``care_serve_request_seconds{endpoint}``
(histogram), ``care_serve_queue_depth`` (items accepted and not yet answered),
``care_serve_batch_items`` (histogram of items per scoring call), ``care_serve_items_total``,
``care_serve_failures_total{stage}`` (``input``, ``rubric``, ``evaluation``, ``context_fit``,
``other``), ``care_serve_rubric_cache_{hits,misses}`` (the generator's rubric cache, when it
counts), and from each result's provenance (:mod:`care_sdk.provenance`):
``care_serve_backend_calls_total``, ``care_serve_backend_seconds_total``,
``care_serve_tokens_total{kind}`` (``prompt``, ``completion``: what the backend reported) and
``care_serve_rubrics_total{source}`` (``generated``, ``cached``, ``fixed``).

Examples:
    >>> metrics = ServeMetrics()  # doctest: +SKIP
    >>> b"care_serve_requests_total" in metrics.render()[0]  # doctest: +SKIP
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from care_sdk.errors import MissingDependencyError
from care_sdk.types import Provenance, RewardResult

__all__ = ["ServeMetrics"]


class ServeMetrics:
    """The service's counters, histograms and gauges.

    Args:
        queue_depth: read when metrics are scraped: items accepted and not yet answered.
        cache_stats: read when metrics are scraped: the rubric cache's ``(hits, misses)``, or ``None``.

    Examples:
        >>> metrics = ServeMetrics(queue_depth=lambda: 3.0)  # doctest: +SKIP
        >>> b"care_serve_queue_depth 3.0" in metrics.render()[0]  # doctest: +SKIP
        True
    """

    def __init__(
        self,
        queue_depth: Callable[[], float] = lambda: 0.0,
        cache_stats: Callable[[], tuple[int, int] | None] = lambda: None,
    ) -> None:
        try:
            import prometheus_client as prom
        except ModuleNotFoundError as exc:
            raise MissingDependencyError("prometheus_client", extra="serve") from exc
        self._prom = prom
        self.registry = prom.CollectorRegistry()
        self.requests = prom.Counter(
            "care_serve_requests",
            "HTTP requests by endpoint and status",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.latency = prom.Histogram(
            "care_serve_request_seconds",
            "Request latency in seconds",
            ["endpoint"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=self.registry,
        )
        depth = prom.Gauge("care_serve_queue_depth", "Items accepted and not yet answered", registry=self.registry)
        depth.set_function(queue_depth)
        self.batch_items = prom.Histogram(
            "care_serve_batch_items",
            "Items per scoring call",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=self.registry,
        )
        self.items = prom.Counter("care_serve_items", "Items scored", registry=self.registry)
        self.failures = prom.Counter(
            "care_serve_failures", "Items without a reward, by stage", ["stage"], registry=self.registry
        )
        hits = prom.Gauge("care_serve_rubric_cache_hits", "Rubric cache hits", registry=self.registry)
        misses = prom.Gauge("care_serve_rubric_cache_misses", "Rubric cache misses", registry=self.registry)
        hits.set_function(lambda: float((cache_stats() or (0, 0))[0]))
        misses.set_function(lambda: float((cache_stats() or (0, 0))[1]))
        self.backend_calls = prom.Counter(
            "care_serve_backend_calls", "Backend calls made for the scored items", registry=self.registry
        )
        self.backend_seconds = prom.Counter(
            "care_serve_backend_seconds",
            "Wall time of the backend calls made for the scored items",
            registry=self.registry,
        )
        self.tokens = prom.Counter(
            "care_serve_tokens", "Tokens the backend reported, by kind", ["kind"], registry=self.registry
        )
        self.rubrics = prom.Counter(
            "care_serve_rubrics", "Scored items by where their rubric came from", ["source"], registry=self.registry
        )
        self._per_request: dict[tuple[str, int], tuple[Any, Any]] = {}  # label children, looked up once

    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        """Count one answered request and its latency."""
        children = self._per_request.get((endpoint, status))
        if children is None:
            children = (
                self.requests.labels(endpoint=endpoint, status=str(status)),
                self.latency.labels(endpoint=endpoint),
            )
            self._per_request[endpoint, status] = children
        children[0].inc()
        children[1].observe(seconds)

    def observe_results(self, results: Sequence[RewardResult | None], *, input_failures: int = 0) -> None:
        """Count scored items and the failed ones by stage."""
        self.items.inc(len(results) + input_failures)
        if input_failures:
            self.failures.labels(stage="input").inc(input_failures)
        for result in results:
            if result is not None and result.reward is None:
                stage = result.failure.stage if result.failure is not None else "other"
                self.failures.labels(stage=stage).inc()
            if result is not None and result.provenance is not None:
                self._observe_cost(result.provenance)

    def _observe_cost(self, made: Provenance) -> None:
        cost = made.cost
        self.backend_calls.inc(cost.calls)
        self.backend_seconds.inc(cost.seconds)
        if cost.prompt_tokens is not None:
            self.tokens.labels(kind="prompt").inc(cost.prompt_tokens)
        if cost.completion_tokens is not None:
            self.tokens.labels(kind="completion").inc(cost.completion_tokens)
        if made.rubric_source is not None:
            self.rubrics.labels(source=made.rubric_source).inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        content_type: Any = self._prom.CONTENT_TYPE_LATEST
        return self._prom.generate_latest(self.registry), str(content_type)
