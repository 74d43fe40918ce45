"""OpenAI-compatible backend: hosted APIs and any server that speaks ``/v1/chat/completions``.

Works with the OpenAI API, DeepSeek and other hosted providers, ``vllm serve``, and
``python -m llama_cpp.server``. Requests are sent concurrently (bounded by ``max_concurrency``)
and results come back in input order. There is one scheduler, the async one: one
``openai.AsyncOpenAI`` client and one semaphore per event loop. The sync
:meth:`OpenAIBackend.generate` runs it on the package's one sync runner
(:func:`care_sdk.backends.base.run_sync`), whose loop lives as long as the process: its client,
connections and concurrency bound are shared by every sync call, from any thread. Retries live
in one layer (:mod:`care_sdk.backends._retry`): the ``openai`` client itself is built with ``max_retries=0``.

Structured output asks for ``response_format={"type": "json_schema", ...}``. When a server
rejects that, the backend falls back once, for its lifetime, to ``{"type": "json_object",
"schema": ...}`` (llama.cpp server, Together, Anyscale), then to plain JSON mode, then to no
``response_format``; every reply is validated by the caller either way.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar
from urllib.parse import urlsplit, urlunsplit

from care_sdk._runner import PerLoop, runner_loop
from care_sdk.backends._retry import RetryPolicy, call_with_retries, parse_retry_after
from care_sdk.backends.base import (
    Backend,
    Completion,
    GenerationRequest,
    GenerationResult,
    TokenLogprob,
    remember_config,
    run_sync,
)
from care_sdk.errors import BackendError, ConfigError, MissingDependencyError

if TYPE_CHECKING:
    from openai import AsyncOpenAI, OpenAI

__all__ = ["DEFAULT_BASE_URL", "OpenAIBackend"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""Where requests go when neither ``base_url`` nor ``OPENAI_BASE_URL`` says otherwise."""

logger = logging.getLogger("care_sdk")

_PLACEHOLDER_KEY = "no-key"
_RETRYABLE_STATUS = frozenset({408, 409, 429})
_FORMAT_MODES = ("json_schema", "json_object_schema", "json_object", "none")
_HINTS = {
    400: "the server rejected the request parameters; check max_tokens against the model's context length",
    401: "check the API key: pass api_key=... or set OPENAI_API_KEY",
    403: "the API key is not allowed to use this model or endpoint",
    404: "check the model name, and that base_url ends in /v1",
    422: "the server could not process the request parameters",
}
_MAX_MESSAGE_CHARS = 500

Call = Callable[[dict[str, Any]], Awaitable[Any]]
N = TypeVar("N", int, float)


class _LoopState(NamedTuple):
    """What one event loop sends with: the call, the concurrency bound, and the client to close (if ours)."""

    call: Call
    semaphore: asyncio.Semaphore
    owned: Any


async def _close_state(state: _LoopState) -> None:
    if state.owned is not None:
        await state.owned.close()


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise MissingDependencyError("openai", extra="openai") from exc
    return openai


def _redact_url(url: str) -> str:
    """Drop any user:password from a URL so it can be shown."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def _setting(value: N | None, variable: str, default: N, kind: Callable[[str], N]) -> N:
    """An explicit argument, else the environment variable, else the default."""
    if value is not None:
        return value
    raw = os.environ.get(variable)
    if raw is None or not raw.strip():
        return default
    try:
        return kind(raw.strip())
    except ValueError:
        raise ConfigError(f"{variable}={raw!r} is not a valid {kind.__name__}") from None


def _schema_name(schema: Mapping[str, Any]) -> str:
    title = schema.get("title")
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", title) if isinstance(title, str) else ""
    return (name or "care_output")[:64]


class OpenAIBackend(Backend):
    """A backend that talks to an OpenAI-compatible chat completions endpoint.

    Args:
        model: The model name the server knows (e.g. ``"gpt-4o-mini"``, ``"deepseek-chat"``,
            or any name for a single-model llama.cpp server).
        base_url: The API root, usually ending in ``/v1``. Defaults to ``OPENAI_BASE_URL``,
            then the OpenAI API.
        api_key: The API key. Defaults to ``OPENAI_API_KEY``. A server at a non-default
            ``base_url`` may need none; the OpenAI API itself does.
        client: An ``openai.OpenAI`` or ``openai.AsyncOpenAI`` you built; its base URL, key and
            headers are kept, its own retries are turned off (retries happen here).
        max_concurrency: How many requests may be in flight at once. Defaults to
            ``CARE_OPENAI_MAX_CONCURRENCY``, then 16.
        max_retries: Retries after the first attempt for retryable failures (429, 408, 409, 5xx,
            timeouts, dropped connections, unreadable bodies). Defaults to ``CARE_OPENAI_MAX_RETRIES``,
            then 4.
        timeout: Seconds before one HTTP request is abandoned (and retried). Defaults to
            ``CARE_OPENAI_TIMEOUT``, then 120.
        retry_policy: Full retry settings; overrides ``max_retries`` when given.
        structured_output: The first ``response_format`` to try: ``"json_schema"`` (default),
            ``"json_object_schema"``, ``"json_object"`` or ``"none"``.
        max_tokens_param: The request field for the token limit; some models want
            ``"max_completion_tokens"``.
        extra_body: Extra JSON fields sent with every request (server-specific options).

    Examples:
        >>> backend = OpenAIBackend(model="smollm2", base_url="http://127.0.0.1:8000/v1")
        >>> backend.identity
        'openai:smollm2@http://127.0.0.1:8000/v1'
    """

    provider = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: OpenAI | AsyncOpenAI | None = None,
        max_concurrency: int | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        retry_policy: RetryPolicy | None = None,
        structured_output: Literal["json_schema", "json_object_schema", "json_object", "none"] = "json_schema",
        max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        openai = _import_openai()
        max_concurrency = _setting(max_concurrency, "CARE_OPENAI_MAX_CONCURRENCY", 16, int)
        max_retries = _setting(max_retries, "CARE_OPENAI_MAX_RETRIES", 4, int)
        timeout = _setting(timeout, "CARE_OPENAI_TIMEOUT", 120.0, float)
        if not model or not isinstance(model, str):
            raise ConfigError("OpenAIBackend: model must be a non-empty string, e.g. openai:gpt-4o-mini")
        if max_concurrency < 1:
            raise ConfigError(f"OpenAIBackend: max_concurrency must be >= 1, got {max_concurrency}")
        if not timeout > 0:
            raise ConfigError(f"OpenAIBackend: timeout must be > 0 seconds, got {timeout}")
        if structured_output not in _FORMAT_MODES:
            raise ConfigError(f"OpenAIBackend: structured_output must be one of {', '.join(_FORMAT_MODES)}")
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ConfigError("OpenAIBackend: max_tokens_param must be 'max_tokens' or 'max_completion_tokens'")
        try:
            self.retry_policy = retry_policy or RetryPolicy(max_retries=max_retries)
        except ValueError as exc:
            raise ConfigError(f"OpenAIBackend: {exc}") from exc
        self.model = model
        self.max_concurrency = max_concurrency
        self.timeout = float(timeout)
        self.max_tokens_param = max_tokens_param
        self.extra_body = dict(extra_body or {})
        self._format_mode: str = structured_output
        self._format_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self._states: PerLoop[_LoopState] = PerLoop(self._new_state, _close_state)
        self._sync_client: Any = None
        self._user_async_client: Any = None
        self._owns_clients = client is None

        if client is not None:
            if base_url is not None or api_key is not None:
                raise ConfigError("OpenAIBackend: give either client= or base_url=/api_key=, not both")
            if isinstance(client, openai.AsyncOpenAI):
                self._user_async_client = client.with_options(max_retries=0, timeout=self.timeout)
            elif isinstance(client, openai.OpenAI):
                self._sync_client = client.with_options(max_retries=0, timeout=self.timeout)
            else:
                raise ConfigError(
                    f"OpenAIBackend: client must be openai.OpenAI or openai.AsyncOpenAI, not {type(client).__name__}"
                )
            self.base_url = str(client.base_url).rstrip("/")
            self._api_key = str(getattr(client, "api_key", "") or "")
        else:
            self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
            key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
            if not key:
                if self.base_url == DEFAULT_BASE_URL:
                    raise ConfigError(
                        f"OpenAIBackend: no API key for {DEFAULT_BASE_URL}; set OPENAI_API_KEY or pass api_key=..."
                    )
                key = _PLACEHOLDER_KEY
            self._api_key = key
            # Pickles as its settings; the other process builds its own clients (max_retries=0) on first use.
            remember_config(
                self,
                OpenAIBackend,
                model,
                base_url=self.base_url,
                api_key=api_key,
                max_concurrency=max_concurrency,
                timeout=self.timeout,
                retry_policy=self.retry_policy,
                structured_output=structured_output,
                max_tokens_param=max_tokens_param,
                extra_body=self.extra_body,
            )

    # -- identity and secrets -------------------------------------------------------------

    @property
    def identity(self) -> str:
        """``openai:MODEL@BASE_URL`` (never the key)."""
        return f"openai:{self.model}@{_redact_url(self.base_url)}"

    def _redact(self, text: str) -> str:
        key = self._api_key
        if key and key != _PLACEHOLDER_KEY and len(key) >= 4:
            text = text.replace(key, "***")
        return text

    # -- clients ----------------------------------------------------------------------------

    def _new_client_kwargs(self) -> dict[str, Any]:
        return {"api_key": self._api_key, "base_url": self.base_url, "max_retries": 0, "timeout": self.timeout}

    def _new_state(self) -> _LoopState:
        """The running loop's client and semaphore: a client of ours, or the user's async client (a
        copy with its own connection pool on the sync runner's loop, since the original's connections
        belong to the user's loop); a user's sync client is called in worker threads."""
        semaphore = asyncio.Semaphore(self.max_concurrency)
        if self._sync_client is not None:
            return _LoopState(self._threaded_call(), semaphore, None)
        owned = None
        client = self._user_async_client
        if self._owns_clients:
            client = owned = _import_openai().AsyncOpenAI(**self._new_client_kwargs())
        elif asyncio.get_running_loop() is runner_loop():
            client = owned = client.with_options(http_client=_import_openai().DefaultAsyncHttpxClient())

        async def call(kwargs: dict[str, Any]) -> Any:
            return await client.chat.completions.create(**kwargs)

        return _LoopState(call, semaphore, owned)

    def _threaded_call(self) -> Call:
        sync_client = self._sync_client
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix="care-sdk-openai")
            executor = self._executor

        async def call_in_thread(kwargs: dict[str, Any]) -> Any:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(executor, lambda: sync_client.chat.completions.create(**kwargs))

        return call_in_thread

    @property
    def structured_output(self) -> str:
        """The ``response_format`` mode in use; it moves down a step each time a server rejects one."""
        return self._format_mode

    def request_body(self, request: GenerationRequest) -> dict[str, Any]:
        """The keyword arguments sent to ``client.chat.completions.create`` for ``request`` (first attempt).

        Examples:
            >>> backend = OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1")
            >>> body = backend.request_body(GenerationRequest(messages=(), max_tokens=8, seed=1))
            >>> body["max_tokens"], body["seed"]
            (8, 1)
        """
        return self._kwargs(request, request.n, request.seed, self._format_mode)

    # -- the Backend interface ----------------------------------------------------------------

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Send every request concurrently (at most ``max_concurrency`` in flight); results in input order.

        Examples:
            >>> import asyncio
            >>> backend = OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=2)
            >>> [result] = asyncio.run(backend.agenerate([GenerationRequest(messages=())]))
            >>> result.error.retryable
            True
        """
        call, semaphore, _ = self._states.get()
        return list(await asyncio.gather(*(self._one(request, call, semaphore) for request in requests)))

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Blocking form of :meth:`agenerate` (run on the sync runner), usable from sync code and from
        inside an event loop.

        Examples:
            >>> backend = OpenAIBackend(model="m", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=2)
            >>> backend.generate([GenerationRequest(messages=())])[0].error.status_code is None
            True
        """
        return run_sync(self.agenerate(requests))

    def close(self) -> None:
        """Close the HTTP clients this backend created (each on its event loop) and its worker threads.
        Safe to call twice."""
        self._states.close()
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    async def aclose(self) -> None:
        """Async form of :meth:`close`: the running loop's client is closed here and now."""
        await self._states.aclose()
        self.close()

    # -- one request ------------------------------------------------------------------------

    async def _one(self, request: GenerationRequest, call: Call, semaphore: asyncio.Semaphore) -> GenerationResult:
        """All ``n`` completions of one request, or the error that stopped them."""
        if request.n < 1:
            return GenerationResult(error=self._error(f"n must be >= 1, got {request.n}", status=None, retryable=False))
        completions: list[Completion] = []
        usage: dict[str, int] = {}
        sent = 0
        try:
            while len(completions) < request.n and sent < request.n:
                want = request.n - len(completions)
                seed = None if request.seed is None else request.seed + sent
                sent += 1
                # The reply is read inside the retried call: a body without choices is retried too.
                response, received = await call_with_retries(
                    functools.partial(self._exchange, request, want, seed, call, semaphore),
                    self.retry_policy,
                    what=f"{self.identity} request",
                )
                completions.extend(received)
                for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
                    value = getattr(getattr(response, "usage", None), name, None)
                    if isinstance(value, int):
                        usage[name] = usage.get(name, 0) + value
        except BackendError as exc:
            return GenerationResult(error=exc, usage=usage)
        if len(completions) < request.n:
            error = self._error(
                f"asked for n={request.n} completions, got {len(completions)} after {sent} requests",
                status=None,
                retryable=True,
            )
            return GenerationResult(error=error, usage=usage)
        return GenerationResult(completions=tuple(completions[: request.n]), usage=usage)

    def _kwargs(self, request: GenerationRequest, n: int, seed: int | None, mode: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            self.max_tokens_param: request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
        }
        if n != 1:
            kwargs["n"] = n
        if seed is not None:
            kwargs["seed"] = seed
        if request.top_logprobs:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = request.top_logprobs
        schema = request.json_schema
        if schema is not None and mode != "none":
            if mode == "json_schema":
                kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": _schema_name(schema), "schema": schema, "strict": True},
                }
            elif mode == "json_object_schema":
                kwargs["response_format"] = {"type": "json_object", "schema": schema}
            else:
                kwargs["response_format"] = {"type": "json_object"}
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        return kwargs

    async def _exchange(
        self, request: GenerationRequest, n: int, seed: int | None, call: Call, semaphore: asyncio.Semaphore
    ) -> tuple[Any, list[Completion]]:
        """One attempt: send, then read the completions (either may raise a retryable error)."""
        response = await self._send(request, n, seed, call, semaphore)
        return response, self._completions(response, request)

    async def _send(
        self, request: GenerationRequest, n: int, seed: int | None, call: Call, semaphore: asyncio.Semaphore
    ) -> Any:
        """One HTTP exchange (plus any response_format fallbacks), errors mapped to BackendError."""
        openai = _import_openai()
        while True:
            try:
                async with semaphore:
                    mode = self._format_mode  # read late: an earlier request may have moved it on
                    response = await call(self._kwargs(request, n, seed, mode))
            except openai.APIStatusError as exc:
                if request.json_schema is not None and self._rejects_format(exc) and self._downgrade(mode):
                    continue
                raise self._status_error(exc) from None
            except openai.APITimeoutError:
                raise self._error(
                    f"no response within {self.timeout:g}s",
                    status=None,
                    retryable=True,
                    hint="raise timeout=, or lower max_tokens or max_concurrency",
                ) from None
            except openai.APIConnectionError as exc:
                cause = exc.__cause__ or exc
                raise self._error(
                    f"connection failed: {type(cause).__name__}: {cause}",
                    status=None,
                    retryable=True,
                    hint=f"is the server running at {_redact_url(self.base_url)}?",
                ) from None
            except (openai.APIResponseValidationError, json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise self._invalid_body(f"{type(exc).__name__}: {exc}") from None
            return response

    def _rejects_format(self, exc: Any) -> bool:
        """Whether an error says the server does not take this ``response_format``.

        Servers answer 400 or 422; llama.cpp's server answers 500 with the validation error.
        """
        if exc.status_code not in (400, 422, 500):
            return False
        return "response_format" in f"{exc.message} {exc.body}".lower()

    def _downgrade(self, failed_mode: str) -> bool:
        """Move to the next structured-output mode after ``failed_mode`` was rejected; log once per step."""
        with self._format_lock:
            if self._format_mode != failed_mode:
                return True  # another request already moved on
            index = _FORMAT_MODES.index(failed_mode)
            if index + 1 >= len(_FORMAT_MODES):
                return False
            self._format_mode = _FORMAT_MODES[index + 1]
        logger.warning(
            "%s rejected response_format mode %r; falling back to %r (replies are still validated)",
            self.identity,
            failed_mode,
            self._format_mode,
        )
        return True

    # -- responses and errors ---------------------------------------------------------------

    def _completions(self, response: Any, request: GenerationRequest) -> list[Completion]:
        choices = getattr(response, "choices", None)
        if isinstance(response, (str, bytes)) or not isinstance(choices, list) or not choices:
            raise self._invalid_body("the response has no choices")
        out: list[tuple[int, Completion]] = []
        for position, choice in enumerate(choices):
            message = getattr(choice, "message", None)
            text = getattr(message, "content", None)
            if message is None or not (text is None or isinstance(text, str)):
                raise self._invalid_body(f"choice {position} has no message")
            logprobs = self._logprobs(choice, request.top_logprobs) if request.top_logprobs else None
            index = getattr(choice, "index", position)
            completion = Completion(
                text=text or "", finish_reason=getattr(choice, "finish_reason", None), logprobs=logprobs
            )
            out.append((index if isinstance(index, int) else position, completion))
        out.sort(key=lambda item: item[0])
        return [completion for _, completion in out]

    def _logprobs(self, choice: Any, k: int) -> tuple[TokenLogprob, ...] | None:
        """Map a choice's logprobs; ``top`` keeps the ``k`` most likely alternatives, most likely first.

        (llama.cpp's server appends the sampled token to the top list when it is not among them.)
        """
        content = getattr(getattr(choice, "logprobs", None), "content", None)
        if not content:
            return None
        tokens = []
        for item in content:
            top = [(str(t.token), float(t.logprob)) for t in (getattr(item, "top_logprobs", None) or ())]
            top.sort(key=lambda pair: -pair[1])
            tokens.append(TokenLogprob(token=str(item.token), logprob=float(item.logprob), top=tuple(top[:k])))
        return tuple(tokens)

    def _error(
        self,
        message: str,
        *,
        status: int | None,
        retryable: bool,
        hint: str | None = None,
        retry_after: float | None = None,
    ) -> BackendError:
        message = self._redact(message)
        if len(message) > _MAX_MESSAGE_CHARS:
            message = message[:_MAX_MESSAGE_CHARS] + "..."
        return BackendError(
            message,
            retryable=retryable,
            status_code=status,
            provider=self.provider,
            hint=hint,
            retry_after=retry_after,
        )

    def _invalid_body(self, detail: str) -> BackendError:
        return self._error(
            f"the server returned an unreadable response ({detail})",
            status=None,
            retryable=True,
            hint="a proxy or server in between may be failing",
        )

    def _status_error(self, exc: Any) -> BackendError:
        status = int(exc.status_code)
        retryable = status in _RETRYABLE_STATUS or status >= 500
        headers = dict(exc.response.headers) if getattr(exc, "response", None) is not None else {}
        retry_after = parse_retry_after(headers) if retryable else None
        hint = _HINTS.get(status)
        if hint is None:
            hint = "the server is overloaded or failing; retry later or lower max_concurrency" if retryable else None
        message = re.sub(r"^Error code: \d+ - ", "", str(exc.message))
        return self._error(message, status=status, retryable=retryable, hint=hint, retry_after=retry_after)
