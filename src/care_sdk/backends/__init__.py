"""Backends: one module per provider behind :class:`Backend`, chosen by object or spec string.

Spec strings:

- ``default``: the bundled SmolLM2-135M-Instruct GGUF on llama.cpp (no network, no GPU), with the
  bundled LoRA adapter of the component that uses it (the rubric generator's adapter for a
  :class:`~care_sdk.RubricGenerator`, the evaluator's adapter for a :class:`~care_sdk.RubricEvaluator`)
- ``base``: the bundled SmolLM2-135M-Instruct without any adapter (the untrained base)
- ``llamacpp:PATH.gguf``: any GGUF file on llama.cpp
- ``openai:MODEL`` or ``openai:MODEL@BASE_URL``: hosted APIs and OpenAI-compatible servers
- ``vllm:MODEL``: an in-process vLLM engine
- ``hf:MODEL_OR_PATH``: transformers
"""

from __future__ import annotations

import json
from typing import Any

from care_sdk.backends.base import (
    EVALUATION,
    RUBRIC,
    Backend,
    Completion,
    ForcedReply,
    ForwardingBackend,
    GenerationRequest,
    GenerationResult,
    TokenLogprob,
    remember_config,
)
from care_sdk.errors import ConfigError

__all__ = [
    "EVALUATION",
    "RUBRIC",
    "SPEC_FORMS",
    "Backend",
    "BackendPool",
    "Completion",
    "ForcedReply",
    "ForwardingBackend",
    "GenerationRequest",
    "GenerationResult",
    "TokenLogprob",
    "is_default_spec",
    "resolve_backend",
]

SPEC_FORMS = (
    "default",
    "base",
    "llamacpp:PATH.gguf",
    "openai:MODEL",
    "openai:MODEL@BASE_URL",
    "vllm:MODEL",
    "hf:MODEL_OR_PATH",
)
"""The spec string forms :func:`resolve_backend` accepts."""


def is_default_spec(spec: Any) -> bool:
    """Whether ``spec`` is the spec string ``default``: the bundled model, which gives each role
    (generator, evaluator) its own bundled adapter.

    Examples:
        >>> is_default_spec(" Default"), is_default_spec("base"), is_default_spec(object())
        (True, False, False)
    """
    return isinstance(spec, str) and spec.strip().lower() == "default"


def _from_object(obj: Any) -> Backend | None:
    module = type(obj).__module__.split(".")[0]
    name = type(obj).__name__
    if module == "llama_cpp" and name == "Llama":
        from care_sdk.backends.llamacpp import LlamaCppBackend

        return LlamaCppBackend(obj)
    if module == "vllm" and name == "LLM":
        from care_sdk.backends.vllm import VLLMBackend

        return VLLMBackend(obj)
    if module == "openai" and name in ("OpenAI", "AsyncOpenAI"):
        raise ConfigError("an openai client needs a model name: use OpenAIBackend(model=..., client=client)")
    return None


def resolve_backend(spec: str | Backend | Any, *, role: str | None = None, **options: Any) -> Backend:
    """Turn a spec string or a user-built object into a :class:`Backend`.

    ``options`` are passed to the backend's constructor (e.g. ``n_ctx`` for llama.cpp). ``role``
    (``generator`` or ``evaluator``) selects the bundled adapter for ``default``; without a role,
    ``default`` is the base model.

    Examples:
        >>> try:
        ...     resolve_backend("nonsense")
        ... except ConfigError as exc:
        ...     print(exc)
        unknown backend spec 'nonsense'; valid forms: default, base, llamacpp:PATH.gguf, openai:MODEL, ...
    """
    if isinstance(spec, Backend):
        if options:
            raise ConfigError("backend options can only be given with a spec string, not a Backend object")
        return spec
    if not isinstance(spec, str):
        backend = _from_object(spec)
        if backend is None:
            raise ConfigError(f"cannot use a {type(spec).__name__} as a backend; pass a spec string or a Backend")
        return backend
    backend = _from_spec(spec, role, dict(options))
    # Pickles as the spec and role: the process that unpickles it resolves the spec again.
    remember_config(backend, resolve_backend, spec, role=role, **options)
    return backend


def _from_spec(spec: str, role: str | None, options: dict[str, Any]) -> Backend:
    kind, _, rest = spec.partition(":")
    kind = kind.strip().lower()
    if kind in ("default", "base") and not rest:
        from care_sdk.backends.llamacpp import LlamaCppBackend, default_model_path
        from care_sdk.bundled.adapters import bundled_adapter

        adapter = bundled_adapter(role) if kind == "default" and role is not None else None
        if adapter is not None:
            options.setdefault("adapter", adapter)
        return LlamaCppBackend(default_model_path(), **options)
    if kind == "llamacpp" and rest:
        from care_sdk.backends.llamacpp import LlamaCppBackend

        return LlamaCppBackend(rest, **options)
    if kind == "openai" and rest:
        from care_sdk.backends.openai import OpenAIBackend

        model, _, base_url = rest.partition("@")
        return OpenAIBackend(model=model, base_url=base_url or None, **options)
    if kind == "vllm" and rest:
        from care_sdk.backends.vllm import VLLMBackend

        return VLLMBackend(rest, **options)
    if kind == "hf" and rest:
        from care_sdk.backends.hf import HFBackend

        return HFBackend(rest, **options)
    raise ConfigError(f"unknown backend spec {spec!r}; valid forms: {', '.join(SPEC_FORMS)}")


class BackendPool:
    """Resolves backend specs, building each distinct (spec, options, role of ``default``) once.

    ``default`` asked with a role (``generator``, ``evaluator``) is that role's bundled adapter, so
    a command given ``default`` for both components runs each with its own adapter; every other
    spec is built once and shared by every role. Use it as a context manager to close what it built.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> pool = BackendPool({"sim": ScriptedBackend([])})
        >>> pool.get("sim") is pool.get("sim")
        True
    """

    def __init__(self, given: dict[str, Backend] | None = None) -> None:
        self._built: dict[str, Backend] = dict(given or {})

    def get(self, spec: str, options: dict[str, Any] | None = None, *, role: str | None = None) -> Backend:
        """The backend of ``spec`` (built on first use). ``role`` (``generator`` or ``evaluator``)
        gives the ``default`` spec the bundled adapter of that role, as ``resolve_backend`` does;
        a backend given for the spec itself serves every role.

        Examples:
            >>> from care_sdk.testing import ScriptedBackend
            >>> given = ScriptedBackend([])
            >>> BackendPool({"default": given}).get("default", role="evaluator") is given
            True
        """
        key = spec if not options else f"{spec}|{json.dumps(options, sort_keys=True, default=str)}"
        if role is not None and key not in self._built and is_default_spec(spec):
            key = f"{key}|role={role}"
        if key not in self._built:
            self._built[key] = resolve_backend(spec, role=role, **(options or {}))
        return self._built[key]

    def close(self) -> None:
        """Close every backend this pool built."""
        for backend in self._built.values():
            backend.close()

    def __enter__(self) -> BackendPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
