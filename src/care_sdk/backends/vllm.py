"""The vLLM backend: an in-process ``vllm.LLM`` engine with structured outputs.

A batch of requests becomes one ``LLM.chat`` call (a list of conversations with one
``SamplingParams`` each), so vLLM schedules them together and reuses shared prompt prefixes
(prefix caching is switched on for engines built here). Requests with a JSON schema are
decoded under it through ``SamplingParams(structured_outputs=StructuredOutputsParams(json=...))``.
Install with ``pip install "care-sdk[vllm]"`` on a machine with a GPU.

The translation to and from vLLM is kept in plain functions (:func:`sampling_kwargs`,
:func:`result_from_output`) that need no vLLM to run; they follow vLLM 0.33's
``SamplingParams``, ``StructuredOutputsParams``, ``RequestOutput``, ``CompletionOutput`` and
``Logprob`` (the structured-outputs form introduced in 0.10).

Examples:
    >>> from care_sdk.backends.vllm import VLLMBackend
    >>> backend = VLLMBackend("Qwen/Qwen2.5-0.5B-Instruct", gpu_memory_utilization=0.5)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from care_sdk.backends.base import (
    Backend,
    Completion,
    GenerationRequest,
    GenerationResult,
    TokenLogprob,
    remember_config,
)
from care_sdk.errors import BackendError, ConfigError, MissingDependencyError

__all__ = ["VLLMBackend", "chat_messages", "result_from_output", "sampling_kwargs"]


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise MissingDependencyError("vllm", extra="vllm") from exc
    return vllm


def chat_messages(request: GenerationRequest) -> list[dict[str, str]]:
    """The OpenAI-style conversation ``LLM.chat`` takes for one request.

    Examples:
        >>> from care_sdk.types import Message
        >>> chat_messages(GenerationRequest(messages=(Message(role="user", content="hi"),)))
        [{'role': 'user', 'content': 'hi'}]
    """
    return [{"role": m.role, "content": m.content} for m in request.messages]


def sampling_kwargs(request: GenerationRequest, defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The keyword arguments of ``vllm.SamplingParams`` for one request.

    ``defaults`` are extra ``SamplingParams`` fields (e.g. ``top_k``, ``repetition_penalty``)
    applied under the request's own settings. A JSON schema appears as
    ``structured_outputs={"json": schema}``: the keyword arguments of
    ``vllm.sampling_params.StructuredOutputsParams``.

    Examples:
        >>> from care_sdk.types import Message
        >>> req = GenerationRequest(messages=(Message(role="user", content="hi"),), max_tokens=8,
        ...                         json_schema={"type": "integer"}, n=2, seed=7, top_logprobs=5)
        >>> kw = sampling_kwargs(req, {"top_k": 20})
        >>> kw["structured_outputs"], kw["n"], kw["seed"], kw["logprobs"], kw["top_k"]
        ({'json': {'type': 'integer'}}, 2, 7, 5, 20)
    """
    kwargs: dict[str, Any] = dict(defaults or {})
    kwargs.update(
        n=request.n,
        temperature=request.temperature,
        top_p=request.top_p,
        max_tokens=request.max_tokens,
        seed=request.seed,
    )
    if request.top_logprobs is not None:
        kwargs["logprobs"] = request.top_logprobs
    if request.json_schema is not None:
        kwargs["structured_outputs"] = {"json": request.json_schema}
    return kwargs


def _token_logprobs(output: Any, k: int) -> tuple[TokenLogprob, ...]:
    """Map a ``CompletionOutput``'s logprobs (one ``{token_id: Logprob}`` per position) to ours."""
    entries = []
    for token_id, position in zip(output.token_ids, output.logprobs, strict=False):
        position = position or {}
        chosen = position.get(token_id)
        ranked = sorted(
            ((tid, lp) for tid, lp in position.items() if lp.rank is None or lp.rank <= k),
            key=lambda item: (item[1].rank if item[1].rank is not None else k + 1, -item[1].logprob),
        )[:k]
        entries.append(
            TokenLogprob(
                token=(chosen.decoded_token or "") if chosen is not None else "",
                logprob=float(chosen.logprob) if chosen is not None else float("nan"),
                top=tuple((lp.decoded_token or "", float(lp.logprob)) for _, lp in ranked),
            )
        )
    return tuple(entries)


def result_from_output(output: Any, top_logprobs: int | None = None) -> GenerationResult:
    """Turn one vLLM ``RequestOutput`` into a :class:`GenerationResult`.

    Reads ``outputs[*].text``, ``.finish_reason``, ``.token_ids`` and ``.logprobs`` (a sequence
    with one ``{token_id: Logprob(logprob, rank, decoded_token)}`` per generated token), and
    ``prompt_token_ids`` for usage. Completions keep vLLM's ``index`` order.

    Examples:
        >>> from types import SimpleNamespace as NS
        >>> out = NS(prompt_token_ids=[1, 2, 3], outputs=[
        ...     NS(index=0, text='{"a": 1}', finish_reason="stop", token_ids=[5, 6], logprobs=None)])
        >>> r = result_from_output(out)
        >>> r.text, r.usage["prompt_tokens"], r.usage["completion_tokens"]
        ('{"a": 1}', 3, 2)
    """
    completions = []
    for item in sorted(output.outputs, key=lambda o: o.index):
        logprobs = None
        if top_logprobs is not None and item.logprobs is not None:
            logprobs = _token_logprobs(item, top_logprobs)
        completions.append(Completion(text=item.text, finish_reason=item.finish_reason, logprobs=logprobs))
    prompt_tokens = len(output.prompt_token_ids or ())
    completion_tokens = sum(len(item.token_ids) for item in output.outputs)
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return GenerationResult(completions=tuple(completions), usage=usage)


def _error(exc: BaseException) -> BackendError:
    retryable = "out of memory" in str(exc).lower()
    return BackendError(
        f"{type(exc).__name__}: {exc}",
        provider="vllm",
        retryable=retryable,
        hint="lower batch size or max_tokens" if retryable else None,
    )


class VLLMBackend(Backend):
    """An in-process vLLM engine: batched chat generation with structured outputs.

    Args:
        model: a model id or local path (an engine is built with ``enable_prefix_caching=True``
            and ``engine_kwargs``), or a ``vllm.LLM`` you built.
        sampling_defaults: extra ``SamplingParams`` fields for every request (``top_k``,
            ``repetition_penalty``, ...); a request's own settings take precedence.
        chat_template_kwargs: passed to the chat template (e.g. ``{"enable_thinking": False}``).
        use_tqdm: show vLLM's progress bar.
        **engine_kwargs: ``vllm.LLM`` arguments (``tensor_parallel_size``, ``gpu_memory_utilization``,
            ``max_model_len``, ``dtype``, ...); only with a model id or path.

    Examples:
        >>> backend = VLLMBackend("Qwen/Qwen2.5-0.5B-Instruct", max_model_len=4096)  # doctest: +SKIP
        >>> from care_sdk import RubricGenerator
        >>> RubricGenerator(backend).generate("I lost my job today.")  # doctest: +SKIP
    """

    provider = "vllm"

    def __init__(
        self,
        model: Any,
        *,
        sampling_defaults: Mapping[str, Any] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        use_tqdm: bool = False,
        **engine_kwargs: Any,
    ) -> None:
        vllm = _import_vllm()
        if isinstance(model, str):
            options = {"sampling_defaults": sampling_defaults, "chat_template_kwargs": chat_template_kwargs}
            remember_config(self, VLLMBackend, model, use_tqdm=use_tqdm, **options, **engine_kwargs)
            engine_kwargs.setdefault("enable_prefix_caching", True)
            self.llm: Any = vllm.LLM(model=model, **engine_kwargs)
            self._owned = True
            self._name = model
        else:
            if engine_kwargs:
                raise ConfigError(f"VLLMBackend: engine options {sorted(engine_kwargs)} need a model name, not an LLM")
            self.llm = model
            self._owned = False
            config = getattr(model, "model_config", None)
            self._name = str(getattr(config, "model", None) or type(model).__name__)
        self.sampling_defaults = dict(sampling_defaults or {})
        self.chat_template_kwargs = dict(chat_template_kwargs) if chat_template_kwargs else None
        self.use_tqdm = use_tqdm

    @property
    def identity(self) -> str:
        """``vllm:`` and the model name."""
        return f"vllm:{self._name}"

    def _params(self, request: GenerationRequest) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        kwargs = sampling_kwargs(request, self.sampling_defaults)
        structured = kwargs.pop("structured_outputs", None)
        if structured is not None:
            kwargs["structured_outputs"] = StructuredOutputsParams(**structured)
        return SamplingParams(**kwargs)

    def _chat(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        outputs = self.llm.chat(
            [chat_messages(r) for r in requests],
            sampling_params=[self._params(r) for r in requests],
            use_tqdm=self.use_tqdm,
            chat_template_kwargs=self.chat_template_kwargs,
        )
        if len(outputs) != len(requests):
            raise BackendError(f"vLLM returned {len(outputs)} outputs for {len(requests)} requests", provider="vllm")
        return [result_from_output(o, r.top_logprobs) for o, r in zip(outputs, requests, strict=True)]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Run the batch as one ``LLM.chat`` call; results in input order.

        When the batch call fails (e.g. one request's schema is rejected), each request is run on
        its own so the failure stays with the request that caused it.
        """
        if not requests:
            return []
        if self.llm is None:
            raise BackendError("the backend is closed", provider=self.provider)
        try:
            return self._chat(requests)
        except Exception as exc:
            if len(requests) == 1:
                return [GenerationResult(error=_error(exc))]
        results = []
        for request in requests:
            try:
                results.extend(self._chat([request]))
            except Exception as exc:
                results.append(GenerationResult(error=_error(exc)))
        return results

    def close(self) -> None:
        """Drop the engine (and shut it down when it was built here). Safe to call twice."""
        llm, self.llm = self.llm, None
        if llm is not None and self._owned:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
