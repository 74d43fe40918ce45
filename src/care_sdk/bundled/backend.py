"""The bundled models as backend specs: ``default`` (the base model with each role's adapter) and ``base``.

:func:`care_sdk.backends.resolve_backend` reaches these openers through its scheme table
(:data:`care_sdk.backends.SPEC_SCHEMES`); no transport imports this module.

Examples:
    >>> is_default_spec(" Default"), is_default_spec("base"), is_default_spec(object())
    (True, False, False)
"""

from __future__ import annotations

from typing import Any

from care_sdk.backends.base import Backend
from care_sdk.backends.llamacpp import LlamaCppBackend

__all__ = ["is_default_spec", "open_base", "open_default"]


def is_default_spec(spec: Any) -> bool:
    """Whether ``spec`` is the spec string ``default``: the bundled model, which gives each role
    (generator, evaluator) its own bundled adapter.

    Examples:
        >>> is_default_spec("default"), is_default_spec("llamacpp:m.gguf")
        (True, False)
    """
    return isinstance(spec, str) and spec.strip().lower() == "default"


def open_default(rest: str, role: str | None, options: dict[str, Any]) -> Backend:
    """The ``default`` spec: the bundled SmolLM2-135M-Instruct GGUF on llama.cpp with the bundled
    adapter of ``role`` (``generator`` or ``evaluator``; none without a role, or for a role this
    build ships no adapter for). An ``adapter`` in ``options`` wins.

    Examples:
        >>> open_default("", "generator", {"n_ctx": 2048}).adapter.role  # doctest: +SKIP
        'generator'
    """
    from care_sdk.bundled.adapters import bundled_adapter

    adapter = bundled_adapter(role) if role is not None else None
    if adapter is not None:
        options.setdefault("adapter", adapter)
    return open_base(rest, role, options)


def open_base(rest: str, role: str | None, options: dict[str, Any]) -> Backend:
    """The ``base`` spec: the bundled SmolLM2-135M-Instruct GGUF on llama.cpp, without an adapter.

    Examples:
        >>> open_base("", None, {}).adapter is None  # doctest: +SKIP
        True
    """
    from care_sdk.backends.llamacpp import default_model_path

    return LlamaCppBackend(default_model_path(), **options)
