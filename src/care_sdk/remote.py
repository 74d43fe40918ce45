"""RemoteReward: the reward of a running ``care serve``, as a TRL reward function.

Switching a TRL script from the in-process reward to the service is one line::

    reward = AdaptiveReward.from_backend("default")          # in process
    reward = RemoteReward("http://127.0.0.1:8000")           # through care serve

Requests go to ``/v1/score``; connection errors, 408, 429 and 5xx answers are retried in the
package's one retry layer (:mod:`care_sdk.backends._retry`), honouring the server's
``Retry-After``. The service keeps no state a client depends on, so a retried request gets the
same rewards, and several replicas behind a load balancer serve one client. Needs ``httpx``
(the ``serve`` extra). Used as a context manager (``with`` or ``async with``), it closes its
connections on the way out; :meth:`RemoteReward.close` does the same.

Examples:
    >>> reward = RemoteReward("http://127.0.0.1:8000", name="empathy")
    >>> reward.__name__, reward.metric_prefix
    ('empathy', 'empathy')
    >>> with RemoteReward("http://127.0.0.1:8000") as reward:  # doctest: +SKIP
    ...     reward(["I failed my exam."], ["That sounds hard."])
    [0.62]
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from care_sdk._calls import METRIC_PREFIX, report_to_trainer, trl_items, trl_profiles
from care_sdk._runner import PerLoop, run_sync
from care_sdk.backends._retry import RetryPolicy, call_with_retries, parse_retry_after
from care_sdk.errors import BackendError, ConfigError, MissingDependencyError, OutputError
from care_sdk.profiles import ProfileLike, UserProfile, as_profiles
from care_sdk.reward import DEFAULT_NAME
from care_sdk.types import Context, RewardResult, as_messages

if TYPE_CHECKING:
    import httpx

__all__ = ["RemoteReward"]

_RETRYABLE = {408, 409, 425, 429, 500, 502, 503, 504}


def _httpx() -> Any:
    try:
        import httpx
    except ModuleNotFoundError as exc:
        raise MissingDependencyError("httpx", extra="serve") from exc
    return httpx


def _jsonable(context: Context) -> Any:
    if isinstance(context, str):
        return context
    return [m.model_dump() for m in as_messages(context)]


class RemoteReward:
    """A TRL reward function that scores through a ``care serve`` service.

    ``reward(prompts, completions, **kwargs)`` returns one reward per completion, ``None`` where
    the service could not compute one, exactly as :class:`~care_sdk.AdaptiveReward` does (the
    same ``context`` and ``profile`` dataset columns, the same ``log_metric`` / ``log_extra``
    reporting, under the same metric prefix: ``care`` for the default name, else the name).

    Args:
        url: the service's base address, e.g. ``http://10.0.0.5:8000``.
        token: the bearer token the service asks for (``care serve --token-env``), or ``None``.
        name: the function name TRL logs the reward under, and the prefix of its metrics unless it
            is the default ``care_reward`` (then ``care``); non-empty, without ``/``, not ``care``.
        timeout: seconds one HTTP request may take (a batch waits for the service's queue).
        retry: how often and how patiently failed requests are retried.

    Raises:
        ConfigError: ``name`` is empty, has a ``/`` or is ``care``.

    Examples:
        >>> import pickle
        >>> reward = RemoteReward("http://127.0.0.1:8000/", token="s3cret")
        >>> reward.url, "s3cret" in repr(reward)
        ('http://127.0.0.1:8000', False)
        >>> pickle.loads(pickle.dumps(reward)).url
        'http://127.0.0.1:8000'
    """

    context_column: str | None = "context"
    """Dataset column whose value is the judged context when present (else the prompt is)."""
    profile_column: str | None = "profile"
    """Dataset column whose value is the user's profile when present (sent with each item)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        name: str = "care_reward",
        timeout: float = 600.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not name or "/" in name or name == METRIC_PREFIX:
            raise ConfigError(f"name: {name!r} must be non-empty, without '/', and not {METRIC_PREFIX!r}")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retry = retry or RetryPolicy(max_retries=8, initial_delay=0.5, max_delay=10.0)
        self.__name__ = name
        self.last_results: Sequence[RewardResult] = ()
        """The explained results of this instance's latest TRL call, one per completion."""
        self._clients = self._new_clients()

    # -- pickling: by configuration, never a live connection ----------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_clients=None, last_results=())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._clients = self._new_clients()

    def _new_clients(self) -> PerLoop[httpx.AsyncClient]:
        """One HTTP client per event loop (its connections belong to the loop), closed on that loop."""
        return PerLoop(lambda: _httpx().AsyncClient(timeout=self.timeout), lambda client: client.aclose())

    def __repr__(self) -> str:
        token = ", token=<set>" if self.token else ""
        return f"RemoteReward({self.url!r}{token}, name={self.__name__!r})"

    @property
    def metric_prefix(self) -> str:
        """The prefix of the metrics this reward logs: ``care`` for the default name, else the name.

        Examples:
            >>> RemoteReward("http://127.0.0.1:8000").metric_prefix
            'care'
            >>> RemoteReward("http://127.0.0.1:8000", name="care_remote").metric_prefix
            'care_remote'
        """
        return METRIC_PREFIX if self.__name__ == DEFAULT_NAME else self.__name__

    # -- HTTP ----------------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _check(self, response: httpx.Response) -> list[RewardResult]:
        status = response.status_code
        if status != 200:
            try:
                message = str(response.json().get("error") or response.text)
            except (ValueError, AttributeError):
                message = response.text[:500]
            raise BackendError(
                message,
                retryable=status in _RETRYABLE,
                status_code=status,
                provider="care-serve",
                retry_after=parse_retry_after(dict(response.headers)),
            )
        try:
            results = response.json()["results"]
            return [RewardResult.model_validate(r) for r in results]
        except (ValueError, KeyError, TypeError) as exc:
            raise OutputError(f"{self.url}/v1/score answered a body that is not a score response: {exc}") from exc

    def _transport_error(self, exc: Exception) -> BackendError:
        return BackendError(f"{type(exc).__name__}: {exc}", retryable=True, provider="care-serve")

    def _payload(self, items: Sequence[tuple[Context, str]], profiles: Sequence[UserProfile | None]) -> bytes:
        """The ``/v1/score`` body: each item, with ``profile`` only where it has one.

        Examples:
            >>> from care_sdk.profiles import UserProfile
            >>> reward = RemoteReward("http://127.0.0.1:8000")
            >>> body = reward._payload([("Sad.", "Why?")] * 2, [UserProfile(text="Shy."), None])
            >>> [item.get("profile") for item in json.loads(body)["items"]]
            [{'text': 'Shy.', 'traits': [], 'history': None}, None]
        """
        body = {
            "items": [
                {"context": _jsonable(c), "reply": r, **({"profile": p.model_dump(mode="json")} if p else {})}
                for (c, r), p in zip(items, profiles, strict=True)
            ]
        }
        return json.dumps(body).encode()

    async def ascore_batch(
        self, items: Sequence[tuple[Context, str]], profiles: Sequence[ProfileLike] | None = None
    ) -> list[RewardResult]:
        """Async form of :meth:`score_batch`."""
        httpx = _httpx()
        client = self._clients.get()
        payload = self._payload(items, as_profiles(profiles, len(items)))
        headers = {**self._headers(), "Content-Type": "application/json"}

        async def attempt() -> list[RewardResult]:
            try:
                response = await client.post(f"{self.url}/v1/score", content=payload, headers=headers)
            except httpx.TransportError as exc:
                raise self._transport_error(exc) from exc
            return self._check(response)

        return await call_with_retries(attempt, self.retry, what=f"POST {self.url}/v1/score")

    def score_batch(
        self, items: Sequence[tuple[Context, str]], profiles: Sequence[ProfileLike] | None = None
    ) -> list[RewardResult]:
        """Score ``(context, reply)`` pairs on the service; a failed item has ``reward=None`` and ``error``.

        ``profiles``, when given, holds one user profile (or ``None``) per item, sent with it.
        Runs :meth:`ascore_batch` on the package's sync runner (:func:`care_sdk.backends.base.run_sync`),
        whose client and connections are kept from one call to the next.

        Raises:
            InputError: ``profiles`` has another length than ``items``, or an entry is not a profile.
            BackendError: the service could not be reached or refused the request after every retry.

        Examples:
            >>> RemoteReward("http://127.0.0.1:8000").score_batch([("I'm sad.", "Why?")])  # doctest: +SKIP
            [RewardResult(reward=0.5, ...)]
        """
        return run_sync(self.ascore_batch(items, profiles))

    # -- TRL -----------------------------------------------------------------------------------------

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """TRL reward signature: one reward per completion, ``None`` where none could be computed."""
        items = trl_items(prompts, completions, kwargs, self.context_column)
        results = self.score_batch(items, trl_profiles(kwargs, len(items), self.profile_column))
        self.last_results = results
        report_to_trainer(results, kwargs, self.metric_prefix)
        return [r.reward for r in results]

    async def acall(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Async form of :meth:`__call__`."""
        items = trl_items(prompts, completions, kwargs, self.context_column)
        results = await self.ascore_batch(items, trl_profiles(kwargs, len(items), self.profile_column))
        self.last_results = results
        report_to_trainer(results, kwargs, self.metric_prefix)
        return [r.reward for r in results]

    def as_async(self) -> Callable[..., Coroutine[Any, Any, list[float | None]]]:
        """This reward as a plain ``async def`` function, named like this instance, for TRL's async rewards.

        Examples:
            >>> import inspect
            >>> fn = RemoteReward("http://127.0.0.1:8000", name="care_remote").as_async()
            >>> inspect.iscoroutinefunction(fn), fn.__name__
            (True, 'care_remote')
        """
        reward = self

        async def care_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
            return await reward.acall(prompts, completions, **kwargs)

        care_reward.__name__ = care_reward.__qualname__ = self.__name__
        return care_reward

    # -- closing -------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP connections (they are opened again when needed).

        Examples:
            >>> reward = RemoteReward("http://127.0.0.1:8000")
            >>> reward.close()  # nothing open yet: nothing to do
        """
        self._clients.close()

    async def aclose(self) -> None:
        """Async form of :meth:`close`.

        Examples:
            >>> import asyncio
            >>> asyncio.run(RemoteReward("http://127.0.0.1:8000").aclose())
        """
        await self._clients.aclose()

    def __enter__(self) -> RemoteReward:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> RemoteReward:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()
