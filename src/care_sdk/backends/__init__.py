"""Backends: one module per provider behind :class:`Backend`, chosen by object or spec string.

Spec strings (``SCHEME:REST``, or a bare name), each opened through :data:`SPEC_SCHEMES`:

- ``default``: the bundled SmolLM2-135M-Instruct GGUF on llama.cpp (no network, no GPU), with the
  bundled LoRA adapter of the component that uses it (the rubric generator's adapter for a
  :class:`~care_sdk.RubricGenerator`, the evaluator's adapter for a :class:`~care_sdk.RubricEvaluator`)
- ``base``: the bundled SmolLM2-135M-Instruct without any adapter (the untrained base)
- ``llamacpp:PATH.gguf``: any GGUF file on llama.cpp
- ``openai:MODEL`` or ``openai:MODEL@BASE_URL``: hosted APIs and OpenAI-compatible servers
- ``vllm:MODEL``: an in-process vLLM engine
- ``hf:MODEL_OR_PATH``: transformers

The transports never know about the bundled models: ``default`` and ``base`` are opened by the
bundled area, which this module reaches only through the scheme table, by name, on first use.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from care_sdk._targets import load_target
from care_sdk.backends.base import (
    EVALUATION,
    RUBRIC,
    Backend,
    Completion,
    ForcedReplies,
    ForcedReply,
    ForcedRequest,
    ForwardingBackend,
    GenerationRequest,
    GenerationResult,
    HiddenStates,
    ReplyLogprobs,
    TokenLogprob,
    TrainedAdapter,
    remember_config,
)
from care_sdk.errors import ConfigError

__all__ = [
    "EVALUATION",
    "RUBRIC",
    "SPEC_FORMS",
    "SPEC_SCHEMES",
    "Backend",
    "BackendPool",
    "Completion",
    "ForcedReplies",
    "ForcedReply",
    "ForcedRequest",
    "ForwardingBackend",
    "GenerationRequest",
    "GenerationResult",
    "HiddenStates",
    "ReplyLogprobs",
    "SpecScheme",
    "TokenLogprob",
    "TrainedAdapter",
    "register_spec_scheme",
    "resolve_backend",
    "spec_per_role",
]


@dataclass(frozen=True)
class SpecScheme:
    """How :func:`resolve_backend` opens the specs of one scheme.

    ``target`` names a function ``open(rest, role, options) -> Backend`` as ``"module:function"``;
    the module is imported the first time a spec of the scheme is resolved, so an unused scheme costs
    nothing. ``rest`` is what follows ``SCHEME:`` (``""`` for a bare name), ``role`` the component
    that asks (``"generator"``, ``"evaluator"`` or ``None``), ``options`` the backend's keyword options.

    Examples:
        >>> SPEC_SCHEMES["openai"].form
        'openai:MODEL[@BASE_URL]'
        >>> SPEC_SCHEMES["default"].per_role, SPEC_SCHEMES["openai"].per_role
        (True, False)
    """

    target: str
    """``"module:function"`` of the opener, imported on first use."""
    form: str
    """The spec's form, shown in errors (``llamacpp:PATH.gguf``)."""
    bare: bool = False
    """The spec is the scheme's name alone (``default``), not ``SCHEME:REST``."""
    per_role: bool = False
    """The backend depends on the component that asks for it: a generator and an evaluator given the
    same spec each get their own backend (``default``: one bundled adapter per role)."""


SPEC_SCHEMES: dict[str, SpecScheme] = {
    "default": SpecScheme(
        "care_sdk.bundled.backend:open_default", form="default", bare=True, per_role=True
    ),  # the bundled area: the one place `default` means anything
    "base": SpecScheme("care_sdk.bundled.backend:open_base", form="base", bare=True),
    "llamacpp": SpecScheme("care_sdk.backends:_open_llamacpp", form="llamacpp:PATH.gguf"),
    "openai": SpecScheme("care_sdk.backends:_open_openai", form="openai:MODEL[@BASE_URL]"),
    "vllm": SpecScheme("care_sdk.backends:_open_vllm", form="vllm:MODEL"),
    "hf": SpecScheme("care_sdk.backends:_open_hf", form="hf:MODEL_OR_PATH"),
}
"""The spec schemes :func:`resolve_backend` knows, by name: the built-in transports, the bundled
models (``default``, ``base``), and any added with :func:`register_spec_scheme`."""

SPEC_FORMS = (
    "default",
    "base",
    "llamacpp:PATH.gguf",
    "openai:MODEL",
    "openai:MODEL@BASE_URL",
    "vllm:MODEL",
    "hf:MODEL_OR_PATH",
)
"""The spec string forms of the built-in schemes."""


def register_spec_scheme(
    name: str, target: str, *, form: str | None = None, bare: bool = False, per_role: bool = False
) -> None:
    """Teach :func:`resolve_backend` a spec scheme of your own (see :class:`SpecScheme`).

    Raises:
        ConfigError: the name is taken or malformed, or ``target`` is not ``"module:function"``.

    Examples:
        >>> register_spec_scheme("mine", "my_package.backends:open_mine", per_role=True)
        >>> SPEC_SCHEMES["mine"].form, spec_per_role("mine:model-a")
        ('mine:...', True)
        >>> del SPEC_SCHEMES["mine"]
    """
    key = name.strip().lower()
    if not key or ":" in key or key != name:
        raise ConfigError(f"spec scheme {name!r}: a lower-case name without ':'")
    if key in SPEC_SCHEMES:
        raise ConfigError(f"spec scheme {name!r} is already registered (to {SPEC_SCHEMES[key].target})")
    if target.count(":") != 1:
        raise ConfigError(f"spec scheme {name!r}: target {target!r} must be 'module:function'")
    SPEC_SCHEMES[key] = SpecScheme(target, form=form or (name if bare else f"{name}:..."), bare=bare, per_role=per_role)


def _scheme_of(spec: str) -> tuple[SpecScheme | None, str]:
    kind, colon, rest = spec.strip().partition(":")
    scheme = SPEC_SCHEMES.get(kind.strip().lower())
    if scheme is None or scheme.bare == bool(colon) or (colon and not rest):
        return None, rest
    return scheme, rest


def spec_per_role(spec: Any) -> bool:
    """Whether ``spec`` is a spec string whose backend depends on the component that asks for it
    (a scheme registered ``per_role``, such as ``default``: one bundled adapter per role).

    Factories resolve such a spec once per role instead of sharing one backend.

    Examples:
        >>> spec_per_role(" Default"), spec_per_role("base"), spec_per_role("openai:m"), spec_per_role(object())
        (True, False, False, False)
    """
    if not isinstance(spec, str):
        return False
    scheme, _ = _scheme_of(spec)
    return scheme is not None and scheme.per_role


def _load(target: str) -> Callable[..., Any]:
    return load_target(target, what="spec scheme target")


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
    (``generator`` or ``evaluator``) is passed to the scheme's opener: ``default`` gives each role
    its bundled adapter, and is the base model without a role. A spec string is opened by its
    scheme in :data:`SPEC_SCHEMES`.

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
    scheme, rest = _scheme_of(spec)
    if scheme is None:
        built_in = {form.split(":")[0] for form in SPEC_FORMS}
        forms = [*SPEC_FORMS, *(s.form for name, s in SPEC_SCHEMES.items() if name not in built_in)]
        raise ConfigError(f"unknown backend spec {spec!r}; valid forms: {', '.join(forms)}")
    opened: Backend = _load(scheme.target)(rest, role, dict(options))
    # Pickles as the spec and role: the process that unpickles it resolves the spec again.
    remember_config(opened, resolve_backend, spec, role=role, **options)
    return opened


def _open_llamacpp(rest: str, role: str | None, options: dict[str, Any]) -> Backend:
    from care_sdk.backends.llamacpp import LlamaCppBackend

    return LlamaCppBackend(rest, **options)


def _open_openai(rest: str, role: str | None, options: dict[str, Any]) -> Backend:
    from care_sdk.backends.openai import OpenAIBackend

    model, _, base_url = rest.partition("@")
    return OpenAIBackend(model=model, base_url=base_url or None, **options)


def _open_vllm(rest: str, role: str | None, options: dict[str, Any]) -> Backend:
    from care_sdk.backends.vllm import VLLMBackend

    return VLLMBackend(rest, **options)


def _open_hf(rest: str, role: str | None, options: dict[str, Any]) -> Backend:
    from care_sdk.backends.hf import HFBackend

    return HFBackend(rest, **options)


class BackendPool:
    """Resolves backend specs, building each distinct (spec, options, role of a per-role spec) once.

    A per-role spec (:func:`spec_per_role`: ``default``) asked with a role (``generator``,
    ``evaluator``) is built once per role, so a command given ``default`` for both components runs
    each with its own adapter; every other spec is built once and shared by every role. Use it as a
    context manager to close what it built.

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
        gives a per-role spec (``default``) the backend of that role, as ``resolve_backend`` does;
        a backend given for the spec itself serves every role.

        Examples:
            >>> from care_sdk.testing import ScriptedBackend
            >>> given = ScriptedBackend([])
            >>> BackendPool({"default": given}).get("default", role="evaluator") is given
            True
        """
        key = spec if not options else f"{spec}|{json.dumps(options, sort_keys=True, default=str)}"
        if role is not None and key not in self._built and spec_per_role(spec):
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


_MOVED = {"is_default_spec": "care_sdk.bundled.backend:is_default_spec"}
"""Names that moved to the bundled area, still importable from here (loaded on first use)."""


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        return _load(_MOVED[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
