"""The reward service: a Starlette app holding one :class:`~care_sdk.AdaptiveReward`.

Endpoints:

- ``POST /get_reward``: OpenRLHF's remote reward protocol. In: ``{"query": [str], "prompts":
  [str], "labels": [...]}``. Out: ``{"rewards": [float | null], "scores": [...], "extra_logs":
  {...}, "details": [...]}``. ``rewards`` and ``scores`` are the same numbers, ``null`` where
  no reward could be computed (never 0). ``extra_logs`` holds one number per query for each key
  (OpenRLHF turns every value into a tensor): ``care_failed``, ``care_flagged`` and
  ``care_template_{chatml,llama3,plain}`` (1 for the template the query was read with).
  ``details`` holds per query the template, the judged context, the error and the guard flags.
- ``POST /v1/score``: ``{"items": [{"context": messages or text, "reply": str}], "options":
  {"detail": "full" | "reward"}}`` (options optional) answered with ``{"results": [RewardResult
  as JSON, ...]}``; ``detail: reward`` keeps only ``reward``, ``error``, ``flags`` and ``parts``.
- ``POST /verify`` and ``POST /seed_session``: NeMo-Gym's resources-server protocol (see
  :mod:`care_sdk.serve.nemo_gym`): the verify request answered with ``reward``,
  ``reward_components`` per dimension and NeMo-Gym's failure fields.
- ``POST /slime/reward``: slime's remote reward (``--rm-type remote_rm --rm-url URL``). In:
  ``{"prompt": templated text or chat messages, "response": str, "label": ...}`` (label ignored).
  Out: the reward as a JSON number (slime stores the answer as ``sample.reward``); a reply CARE could
  not score is answered 500 with the error, which slime retries and then raises: never a number.
- ``GET /health``: ``{"status": "ok", "queue_depth": n}``. ``GET /metrics``: Prometheus text.

Errors are JSON ``{"error": ..., "field": ...}``: 400 for a body that is not JSON, 422 for a
field of the wrong shape (named, e.g. ``query[3]``), 413 for a body over the size limit, 401
without the bearer token when one is configured, 429 with ``Retry-After`` when the queue is full
(503 while shutting down), 500 for an unexpected error.

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

import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from care_sdk.errors import MissingDependencyError
from care_sdk.guards import INFO_FLAGS
from care_sdk.serve.batching import Batcher, QueueFull
from care_sdk.serve.metrics import ServeMetrics
from care_sdk.serve.protocol import (
    RequestError,
    SplitQuery,
    parse_get_reward,
    parse_score,
    parse_score_options,
    split_query,
)
from care_sdk.types import RewardResult

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from care_sdk.reward import AdaptiveReward

__all__ = ["ServeConfig", "create_app"]

logger = logging.getLogger("care_sdk")

TEMPLATES = ("chatml", "llama3", "plain")


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


def _error(status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": message, "field": field}, status_code=status, headers=headers)


async def _read_json(request: Request, limit: int) -> Any:
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
    try:
        return json.loads(b"".join(chunks))
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


def _openrlhf_body(splits: list[SplitQuery], results: list[RewardResult | None]) -> dict[str, Any]:
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
    details = [
        {"template": s.template, "context": s.context, "reply_chars": len(s.reply), "error": e, "flags": fl}
        for s, e, fl in zip(splits, errors, flags, strict=True)
    ]
    return {"rewards": rewards, "scores": rewards, "extra_logs": extra_logs, "details": details}


def create_app(reward: AdaptiveReward, config: ServeConfig | None = None) -> Starlette:
    """The service's ASGI app around ``reward``; run it with uvicorn (see :func:`care_sdk.serve.serve`).

    The batcher starts and stops with the app's lifespan; stopping finishes every accepted item.

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
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    config = config or ServeConfig()
    metrics = ServeMetrics(lambda: float(batcher.depth), _cache_stats(reward))
    batcher = Batcher(
        reward.score_batch,
        window_s=config.batch_window_ms / 1000.0,
        max_batch=config.max_batch,
        max_queue=config.max_queue,
        on_batch=lambda n, _seconds: metrics.batch_items.observe(n),
    )
    expected = f"Bearer {config.token}".encode() if config.token else None

    def authorised(request: Request) -> bool:
        if expected is None:
            return True
        given = request.headers.get("authorization", "").encode()
        return hmac.compare_digest(given, expected)

    def endpoint(
        name: str, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def wrapped(request: Request) -> Response:
            started = time.perf_counter()
            if not authorised(request):
                response = _error(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})
            else:
                try:
                    response = await handler(request)
                except RequestError as exc:
                    response = _error(exc.status, exc.reason, exc.field)
                except QueueFull as exc:
                    status = 503 if exc.closing else 429
                    response = _error(status, str(exc), headers={"Retry-After": str(int(max(1, exc.retry_after)))})
                except Exception as exc:
                    logger.exception("%s: unexpected error", name)
                    response = _error(500, f"internal error: {type(exc).__name__}: {exc}")
            metrics.observe_request(name, response.status_code, time.perf_counter() - started)
            return response

        return wrapped

    async def scored(items: list[Any]) -> list[RewardResult]:
        if len(items) > config.max_queue:
            raise RequestError(f"{len(items)} items in one request; at most {config.max_queue}", status=413)
        return await batcher.submit(items)

    async def get_reward(request: Request) -> Response:
        queries, prompts = parse_get_reward(await _read_json(request, config.max_body_bytes))
        splits = [split_query(q, prompts[i] if prompts else None) for i, q in enumerate(queries)]
        todo = [i for i, s in enumerate(splits) if s.error is None]
        got = await scored([(splits[i].context, splits[i].reply) for i in todo])
        results: list[RewardResult | None] = [None] * len(splits)
        for i, result in zip(todo, got, strict=True):
            results[i] = result
        metrics.observe_results(got, input_failures=len(splits) - len(todo))
        return JSONResponse(_openrlhf_body(splits, results))

    async def score(request: Request) -> Response:
        body = await _read_json(request, config.max_body_bytes)
        items, options = parse_score(body), parse_score_options(body)
        results = await scored(items)
        metrics.observe_results(results)
        keep = {"reward", "error", "flags", "parts"} if options["detail"] == "reward" else None
        return JSONResponse({"results": [r.model_dump(mode="json", include=keep) for r in results]})

    async def verify(request: Request) -> Response:
        from care_sdk.serve.nemo_gym import parse_verify, verify_body

        body = await _read_json(request, config.max_body_bytes)
        context, reply = parse_verify(body)
        (result,) = await scored([(context, reply)])
        metrics.observe_results([result])
        return JSONResponse(verify_body(body, result))

    async def seed_session(request: Request) -> Response:
        body = await _read_json(request, config.max_body_bytes)  # CARE keeps no per-rollout state
        session = body.get("resources_session_id") if isinstance(body, dict) else None
        return JSONResponse({"resources_session_id": session} if isinstance(session, str) else {})

    async def slime_reward(request: Request) -> Response:
        from care_sdk.integrations.slime import sample_item

        body = await _read_json(request, config.max_body_bytes)
        if not isinstance(body, dict):
            raise RequestError(f"the body must be a JSON object, got {type(body).__name__}", field="body")
        prompt, response = body.get("prompt"), body.get("response")
        if not isinstance(prompt, (str, list)) or not prompt:
            raise RequestError("is required (templated text or chat messages)", field="prompt")
        if isinstance(prompt, list) and not all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt):
            raise RequestError("must be chat messages with role and content", field="prompt")
        if not isinstance(response, str):
            raise RequestError("is required (a string)", field="response")
        context, reply = sample_item(SimpleNamespace(prompt=prompt, response=response))
        (result,) = await scored([(context, reply)])
        metrics.observe_results([result])
        if result.reward is None:
            return _error(500, f"CARE could not score the reply: {result.error}")
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
        Route("/get_reward", endpoint("get_reward", get_reward), methods=["POST"]),
        Route("/v1/score", endpoint("score", score), methods=["POST"]),
        Route("/verify", endpoint("verify", verify), methods=["POST"]),
        Route("/seed_session", endpoint("seed_session", seed_session), methods=["POST"]),
        Route("/slime/reward", endpoint("slime_reward", slime_reward), methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics_text, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
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
