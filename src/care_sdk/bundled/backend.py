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

__all__ = ["BundledEvaluatorBackend", "is_default_spec", "open_base", "open_default", "shared_context_fit"]


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
    return open_base(
        rest, role, options, backend_class=BundledEvaluatorBackend if role == "evaluator" else LlamaCppBackend
    )


_CONTEXT_FIT: dict[tuple[int, int] | None, Any] = {}


def shared_context_fit(threads: tuple[int, int] | None = None) -> Any:
    """The bundled default's context-fit term (:class:`~care_sdk.bundled.context_fit.ContextFit` on the
    base model, :data:`~care_sdk.bundled.context_fit.BUNDLED_GATE`), opened once per process for each
    ``threads`` (decoding and prompt threads; ``None``: the base model's defaults).

    Examples:
        >>> shared_context_fit() is shared_context_fit()  # doctest: +SKIP
        True
    """
    if threads not in _CONTEXT_FIT:
        from care_sdk.backends import resolve_backend
        from care_sdk.bundled.context_fit import ContextFit

        options: dict[str, Any] = {} if threads is None else {"n_threads": threads[0], "n_threads_batch": threads[1]}
        _CONTEXT_FIT[threads] = ContextFit(resolve_backend("default", **options))
    return _CONTEXT_FIT[threads]


class BundledEvaluatorBackend(LlamaCppBackend):
    """The bundled evaluator: llama.cpp with the evaluator adapter, read as expected scores. Its documented
    reward carries context fit (:class:`~care_sdk.addons.OwnContextFit`): the adapter alone ranks a real reply
    above a dismissive, harm-validating or off-topic one, but not often enough above another conversation's
    reply (``benchmarks/results/contrast.json``).

    Examples:
        >>> from care_sdk.addons import OwnContextFit
        >>> issubclass(BundledEvaluatorBackend, OwnContextFit)
        True
    """

    def own_context_fit(self) -> Any:
        """The shared context-fit term (:func:`shared_context_fit`), read on as many threads as this
        backend's model uses (one in a Ray actor that holds one CPU)."""
        llama: Any = self.llama
        return shared_context_fit((int(llama.n_threads), int(llama.n_threads_batch)))


def open_base(
    rest: str, role: str | None, options: dict[str, Any], *, backend_class: type[LlamaCppBackend] = LlamaCppBackend
) -> Backend:
    """The ``base`` spec: the bundled SmolLM2-135M-Instruct GGUF on llama.cpp, without an adapter
    (``backend_class``: the llama.cpp backend class that opens it).

    Examples:
        >>> open_base("", None, {}).adapter is None  # doctest: +SKIP
        True
    """
    from care_sdk.backends.llamacpp import default_model_path

    return backend_class(default_model_path(), **options)
