"""Hidden states of a llama.cpp model: a decoder layer's output averaged over a text's tokens.

llama.cpp computes a graph of named tensors (``l_out-K`` is the output of decoder layer ``K``,
0-based). :class:`LayerMeans` opens a second context on a loaded model with an evaluation callback
that asks for one such tensor, sums it over the tokens and stops the computation there, so the
layers above it and the output head are not computed. The context carries no LoRA adapter (an
adapter on layers above the one read would not change it anyway).

:meth:`LayerMeans.read` computes a text whole.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

from care_sdk.errors import ConfigError, ContextOverflowError

__all__ = ["LayerMeans"]


def _ggml() -> Any:
    from llama_cpp._ggml import libggml

    libggml.ggml_get_name.restype = ctypes.c_char_p
    libggml.ggml_get_name.argtypes = [ctypes.c_void_p]
    libggml.ggml_nelements.restype = ctypes.c_int64
    libggml.ggml_nelements.argtypes = [ctypes.c_void_p]
    libggml.ggml_get_data_f32.restype = ctypes.POINTER(ctypes.c_float)
    libggml.ggml_get_data_f32.argtypes = [ctypes.c_void_p]
    return libggml


class LayerMeans:
    """Reads ``hidden_states[layer]`` (the output of the first ``layer`` decoder layers, the
    transformers numbering) of a loaded ``llama_cpp.Llama``, averaged over a text's tokens.

    Args:
        llama: the loaded model (its weights are shared, not copied).
        n_ctx: the longest text in tokens.
        n_threads: CPU threads.

    Examples:
        >>> from care_sdk.backends.llamacpp import default_model_path, open_llama
        >>> llm = open_llama(default_model_path(), n_ctx=256, verbose=False)  # doctest: +SKIP
        >>> means = LayerMeans(llm, n_ctx=256, n_threads=1)  # doctest: +SKIP
        >>> len(means.read("I lost my job today.", layer=15))  # doctest: +SKIP
        576
    """

    def __init__(self, llama: Any, *, n_ctx: int, n_threads: int) -> None:
        from llama_cpp import llama_cpp as api

        self._api = api
        self._llama = llama
        self._lib = _ggml()
        self._lock = threading.Lock()
        self.n_embd = int(api.llama_model_n_embd(llama.model))
        self.n_layer = int(api.llama_model_n_layer(llama.model))
        self._target = b""
        self._sum: Any = 0.0
        self._count = 0
        self._callback = api.ggml_backend_sched_eval_callback(self._on_tensor)  # kept alive with the context
        params = api.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = n_ctx
        params.n_threads = params.n_threads_batch = n_threads
        params.cb_eval = self._callback
        self._ctx = api.llama_init_from_model(llama.model, params)
        if not self._ctx:
            raise ConfigError("llamacpp: could not open a context to read hidden states")
        self.n_ctx = n_ctx

    def _on_tensor(self, tensor: int, ask: bool, _: Any) -> bool:
        name = self._lib.ggml_get_name(tensor)
        if ask:
            return bool(name == self._target)
        if name != self._target:
            return True
        import numpy as np  # installed with llama-cpp-python

        n = int(self._lib.ggml_nelements(tensor))
        rows = np.ctypeslib.as_array(self._lib.ggml_get_data_f32(tensor), shape=(n,)).reshape(-1, self.n_embd)
        self._sum = self._sum + rows.sum(0, dtype=np.float64)
        self._count += rows.shape[0]
        return False  # the layer is read: the rest of the graph is not computed

    def _tokens(self, text: str, layer: int) -> list[int]:
        """The text's tokens, checked against the layer and the context size."""
        if not 1 <= layer <= self.n_layer:
            raise ConfigError(f"llamacpp: hidden state layer must be 1 to {self.n_layer}, got {layer}")
        tokens = self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        if not tokens:
            raise ConfigError("llamacpp: no hidden state for an empty text")
        if len(tokens) > self.n_ctx:
            raise ContextOverflowError(len(tokens), self.n_ctx, provider="llamacpp")
        return list(tokens)

    def _compute(self, tokens: list[int], layer: int) -> list[float]:
        """The mean over ``tokens``, computed from an empty cache. Called with the lock held."""
        api = self._api
        memory = api.llama_get_memory(self._ctx)
        api.llama_memory_clear(memory, True)
        self._target = f"l_out-{layer - 1}".encode()
        self._sum = 0.0
        self._count = 0
        ids = (api.llama_token * len(tokens))(*tokens)
        status = api.llama_decode(self._ctx, api.llama_batch_get_one(ids, len(tokens)))
        if status < 0 or self._count != len(tokens):
            api.llama_memory_clear(memory, True)
            raise ConfigError(f"llamacpp: reading layer {layer} failed (decode status {status})")
        return [float(s) for s in self._sum / self._count]

    def read(self, text: str, layer: int) -> list[float]:
        """The mean over ``text``'s tokens (no BOS, no template) of ``hidden_states[layer]``.

        Raises:
            ConfigError: ``layer`` is not one of the model's (1 to its number of layers).
            ContextOverflowError: the text has more tokens than ``n_ctx``.
        """
        tokens = self._tokens(text, layer)
        with self._lock:
            return self._compute(tokens, layer)

    def read_many(self, texts: Sequence[str], layer: int) -> list[list[float]]:
        """:meth:`read` for each text, in order."""
        return [self.read(t, layer) for t in texts]

    def close(self) -> None:
        """Free the context (the model stays with its owner)."""
        if self._ctx:
            self._api.llama_free(self._ctx)
            self._ctx = None
