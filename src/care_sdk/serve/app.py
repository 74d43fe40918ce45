"""The reward service: a Starlette app holding one :class:`~care_sdk.AdaptiveReward`.

Endpoints:

- ``POST /get_reward``: OpenRLHF's remote reward protocol. In: ``{"query": [str], "prompts":
  [str], "labels": [...]}``. Out: ``{"rewards": [float | null], "scores": [...], "extra_logs":
  {...}, "details": [...]}``. ``rewards`` and ``scores`` are the same numbers, ``null`` where
  no reward could be computed (never 0). ``extra_logs`` holds one number per query for each key
  (OpenRLHF turns every value into a tensor): ``care_failed``, ``care_flagged``,
  ``care_template_{chatml,llama3,plain}`` (1 for the template the query was read with), and the
  query's share of the cost (:mod:`care_sdk.provenance`): ``care_cost_calls``,
  ``care_cost_seconds`` and, when the backend reports tokens, ``care_cost_prompt_tokens`` and
  ``care_cost_completion_tokens``. ``details`` holds per query the template, the judged context,
  the error, the guard flags and the reward's provenance.
- ``POST /v1/score``: ``{"items": [{"context": messages or text, "reply": str, "profile": text or
  {"text", "traits", "history"}}], "options": {"detail": "full" | "reward"}}`` (profile and options
  optional; a profile is the user's, see :mod:`care_sdk.profiles`) answered with ``{"results":
  [RewardResult as JSON, ...]}``, each with its ``provenance`` (the rubric's hash and source, the
  generator's and the evaluator's identity and prompt version, calls, tokens, seconds);
  ``detail: reward`` keeps only ``reward``, ``error``, ``flags`` and ``parts``.
- ``POST /verify`` and ``POST /seed_session``: NeMo-Gym's resources-server protocol (see
  :mod:`care_sdk.serve.nemo_gym`): the verify request answered with ``reward``,
  ``reward_components`` per dimension and NeMo-Gym's failure fields.
- ``POST /slime/reward``: slime's remote reward (``--rm-type remote_rm --rm-url URL``). In:
  ``{"prompt": templated text or chat messages, "response": str, "label": ...}`` (label ignored).
  Out: the reward as a JSON number (slime stores the answer as ``sample.reward``); a reply CARE could
  not score is answered 500 with the error, which slime retries and then raises: never a number.
- ``GET /health``: ``{"status": "ok", "queue_depth": n}``. ``GET /metrics``: Prometheus text.

The bodies are the pydantic models of :mod:`care_sdk.serve.protocol`. Errors are JSON
``{"error": ..., "field": ...}``: 400 for a body that is not JSON, 422 for a field of the wrong
shape (named, e.g. ``query[3]``), 413 for a body over the size limit, 401 without the bearer token
when one is configured (Starlette's ``AuthenticationMiddleware``), 429 with ``Retry-After`` when
the queue is full (503 while shutting down), 500 for an unexpected error: the answer names an error
id, and the service's log line with that id holds the error's text. Items are scored by awaiting
the reward's ``ascore_batch``, one cross-request batch at a time (:mod:`care_sdk.serve.batching`).

Examples:
    >>> from care_sdk.testing import ScriptedBackend, evaluation_json
    >>> from care_sdk import AdaptiveReward, Rubric
    >>> reward = AdaptiveReward.from_backend(ScriptedBackend([evaluation_json([5] * 6)]), rubric=Rubric.uniform_fixed())
    >>> from starlette.testclient import TestClient  # doctest: +SKIP
    >>> with TestClient(create_app(reward)) as client:  # doctest: +SKIP
    ...     answer = client.post("/v1/score", json={"items": [{"context": "hi", "reply": "hello"}]})
    >>> answer.json()["results"][0]["reward"]  # doctest: +SKIP
    1.0
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from care_sdk.errors import MissingDependencyError
from care_sdk.guards import INFO_FLAGS
from care_sdk.profiles import UserProfile
from care_sdk.provenance import Cost
from care_sdk.serve.batching import Batcher, QueueFull
from care_sdk.serve.metrics import ServeMetrics
from care_sdk.serve.protocol import (
    GetRewardRequest,
    GetRewardResponse,
    QueryDetail,
    RequestError,
    ScoreRequest,
    ScoreResponse,
    SlimeRewardRequest,
    SplitQuery,
    parse_body,
)
from care_sdk.types import Messages, RewardResult, as_messages

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from care_sdk.reward import AdaptiveReward

__all__ = ["ServeConfig", "create_app"]

logger = logging.getLogger("care_sdk")

TEMPLATES = ("chatml", "llama3", "plain")

ENDPOINTS = {
    "/get_reward": "get_reward",
    "/v1/score": "score",
    "/verify": "verify",
    "/seed_session": "seed_session",
    "/slime/reward": "slime_reward",
}
"""The scoring routes (``POST``, bearer token when configured) and their names in the metrics."""


class ServeConfig(BaseModel):
    """Limits of the service.

    Examples:
        >>> ServeConfig().max_batch
        64
        >>> "s3cret" in repr(ServeConfig(token="s3cret"))
        False
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_window_ms: float = Field(10.0, ge=0)
    """How long to wait after a batch's first item for more to arrive."""
    max_batch: int = Field(64, ge=1)
    """The most items scored in one call."""
    max_queue: int = Field(256, ge=1)
    """The most items accepted and not yet answered; beyond it requests get 429."""
    max_body_bytes: int = Field(1_000_000, ge=1)
    """The largest request body accepted; larger ones get 413."""
    token: str | None = Field(None, repr=False)
    """The bearer token every scoring request must carry, or ``None`` for none (never shown in ``repr``)."""


def _require_starlette() -> None:
    try:
        import starlette  # noqa: F401
    except ModuleNotFoundError as exc:
        raise MissingDependencyError("starlette", extra="serve") from exc


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(f"the body has {declared} bytes; at most {limit} are accepted", field="body", status=413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(f"the body is over {limit} bytes", field="body", status=413)
        chunks.append(chunk)
    return b"".join(chunks)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"the body is not JSON: {exc}", field="body", status=400) from exc


def _cache_stats(reward: AdaptiveReward) -> Callable[[], tuple[int, int] | None]:
    def read() -> tuple[int, int] | None:
        cache = reward.generator.cache if reward.generator is not None else None
        stats = getattr(cache, "stats", None)
        if stats is None:
            return None
        return int(stats.hits), int(stats.misses)

    return read


def _cost_logs(results: list[RewardResult | None]) -> dict[str, list[float]]:
    """Each query's share of the cost (see :mod:`care_sdk.provenance`) as ``extra_logs``: calls and seconds
    always (0 for a query that was not scored), tokens when the backend reports them."""
    costs = [r.provenance.cost if r is not None and r.provenance is not None else Cost() for r in results]
    logs = {"care_cost_calls": [c.calls for c in costs], "care_cost_seconds": [c.seconds for c in costs]}
    for name in ("prompt_tokens", "completion_tokens"):
        values = [getattr(c, name) for c in costs]
        if any(v is not None for v in values):
            logs[f"care_cost_{name}"] = [v or 0.0 for v in values]
    return logs


def _openrlhf_answer(splits: list[SplitQuery], results: list[RewardResult | None]) -> GetRewardResponse:
    rewards = [r.reward if r is not None else None for r in results]
    errors = [
        s.error if s.error else (r.error if r is not None else None) for s, r in zip(splits, results, strict=True)
    ]
    flags = [list(r.flags) if r is not None else [] for r in results]
    extra_logs: dict[str, list[float]] = {
        "care_failed": [float(x is None) for x in rewards],
        "care_flagged": [float(any(f not in INFO_FLAGS for f in fl)) for fl in flags],
    }
    for name in TEMPLATES:
        extra_logs[f"care_template_{name}"] = [float(s.template == name) for s in splits]
    extra_logs.update(_cost_logs(results))
    details = [
        QueryDetail.model_construct(
            template=s.template,
            context=s.context,
            reply_chars=len(s.reply),
            error=e,
            flags=fl,
            provenance=r.provenance if r is not None else None,
        )
        for s, e, fl, r in zip(splits, errors, flags, results, strict=True)
    ]
    return GetRewardResponse.model_construct(rewards=rewards, scores=rewards, extra_logs=extra_logs, details=details)


def create_app(reward: AdaptiveReward, config: ServeConfig | None = None) -> Starlette:
    """The service's ASGI app around ``reward``; run it with uvicorn (see :func:`care_sdk.serve.serve`).

    The batcher starts and stops with the app's lifespan; stopping finishes every accepted item.
    Authentication (Starlette's ``AuthenticationMiddleware`` with a bearer-token backend), request
    metrics and the error answers (exception handlers) wrap every route; the routes read their
    bodies into the models of :mod:`care_sdk.serve.protocol` and await the reward's ``ascore_batch``
    through the batcher.

    Raises:
        MissingDependencyError: the ``serve`` extra is not installed.

    Examples:
        >>> from care_sdk import AdaptiveReward, Rubric
        >>> from care_sdk.testing import ScriptedBackend
        >>> app = create_app(AdaptiveReward.from_backend(ScriptedBackend([]), rubric=Rubric.uniform_fixed()))
        >>> sorted(route.path for route in app.routes)
        ['/get_reward', '/health', '/metrics', '/seed_session', '/slime/reward', '/v1/score', '/verify']
    """
    _require_starlette()
    from starlette.applications import Starlette
    from starlette.authentication import requires
    from starlette.middleware import Middleware
    from starlette.middleware.authentication import AuthenticationMiddleware
    from starlette.middleware.exceptions import ExceptionMiddleware
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from care_sdk.serve import _http

    config = config or ServeConfig()
    metrics = ServeMetrics(lambda: float(batcher.depth), _cache_stats(reward))

    async def score_items(items: list[tuple[Messages, str, UserProfile | None]]) -> list[RewardResult]:
        return await reward.ascore_batch([(c, r) for c, r, _ in items], [p for _, _, p in items])

    batcher = Batcher(
        score_items,
        window_s=config.batch_window_ms / 1000.0,
        max_batch=config.max_batch,
        max_queue=config.max_queue,
        on_batch=lambda n, _seconds: metrics.batch_items.observe(n),
    )
    scoring = requires(_http.SCORE_SCOPE, status_code=401)

    async def read(request: Request) -> bytes:
        return await _read_body(request, config.max_body_bytes)

    async def scored(items: list[tuple[Messages, str, UserProfile | None]]) -> list[RewardResult]:
        if len(items) > config.max_queue:
            raise RequestError(f"{len(items)} items in one request; at most {config.max_queue}", status=413)
        return await batcher.submit(items)

    @scoring
    async def get_reward(request: Request) -> Response:
        splits = parse_body(GetRewardRequest, await read(request)).splits()
        todo = [i for i, s in enumerate(splits) if s.error is None]
        got = await scored([(as_messages(splits[i].context), splits[i].reply, None) for i in todo])
        results: list[RewardResult | None] = [None] * len(splits)
        for i, result in zip(todo, got, strict=True):
            results[i] = result
        metrics.observe_results(got, input_failures=len(splits) - len(todo))
        return Response(_openrlhf_answer(splits, results).body(), media_type="application/json")

    @scoring
    async def score(request: Request) -> Response:
        body = parse_body(ScoreRequest, await read(request))
        results = await scored([(*item.pair, item.profile) for item in body.items])
        metrics.observe_results(results)
        answer = ScoreResponse.model_construct(results=results)
        return Response(answer.body(body.options.detail), media_type="application/json")

    @scoring
    async def verify(request: Request) -> Response:
        from care_sdk.serve.nemo_gym import parse_verify, verify_body

        body = _json(await read(request))
        context, reply = parse_verify(body)
        (result,) = await scored([(context, reply, None)])
        metrics.observe_results([result])
        return JSONResponse(verify_body(body, result))

    @scoring
    async def seed_session(request: Request) -> Response:
        body = _json(await read(request))  # CARE keeps no per-rollout state
        session = body.get("resources_session_id") if isinstance(body, dict) else None
        return JSONResponse({"resources_session_id": session} if isinstance(session, str) else {})

    @scoring
    async def slime_reward(request: Request) -> Response:
        from care_sdk.integrations.slime import sample_item

        body = parse_body(SlimeRewardRequest, await read(request))
        context, reply = sample_item(SimpleNamespace(prompt=body.prompt, response=body.response))
        (result,) = await scored([(context, reply, None)])
        metrics.observe_results([result])
        if result.reward is None:  # slime retries a 500 and then raises: never a number for it
            return _http.error_response(500, f"CARE could not score the reply: {result.error}")
        return JSONResponse(result.reward)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "queue_depth": batcher.depth})

    async def metrics_text(request: Request) -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await batcher.start()
        try:
            yield
        finally:
            await batcher.stop()  # finish every accepted item

    routes = [
        Route("/get_reward", get_reward, methods=["POST"]),
        Route("/v1/score", score, methods=["POST"]),
        Route("/verify", verify, methods=["POST"]),
        Route("/seed_session", seed_session, methods=["POST"]),
        Route("/slime/reward", slime_reward, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics_text, methods=["GET"]),
    ]
    middleware = [
        Middleware(_http.RequestMetrics, metrics=metrics, endpoints=ENDPOINTS),
        # Starlette hands an app-level Exception handler to ServerErrorMiddleware, which raises the
        # exception again after answering (the server then logs it twice and drops the connection):
        # this ExceptionMiddleware answers it and is done.
        Middleware(ExceptionMiddleware, handlers={Exception: _http.internal_error}),
        Middleware(AuthenticationMiddleware, backend=_http.BearerToken(config.token)),
    ]
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            401: _http.unauthorised,
            RequestError: _http.request_error,
            QueueFull: _http.queue_full,
        },
        lifespan=lifespan,
    )
    app.state.batcher = batcher
    app.state.metrics = metrics
    return app


def serve(
    reward: AdaptiveReward,
    config: ServeConfig | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
) -> None:
    """Run the service under uvicorn until SIGINT/SIGTERM; accepted requests are finished first.

    Raises:
        MissingDependencyError: the ``serve`` extra is not installed.

    Examples:
        >>> serve(AdaptiveReward.from_backend("default"), ServeConfig(token="s3cret"), port=8000)  # doctest: +SKIP
    """
    try:
        import uvicorn
    except ModuleNotFoundError as exc:
        raise MissingDependencyError("uvicorn", extra="serve") from exc
    app = create_app(reward, config)
    logger.info("care serve: listening on http://%s:%d", host, port)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
