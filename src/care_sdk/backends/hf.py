"""The transformers backend: a local causal LM with JSON-schema-constrained decoding.

Requests are rendered with the tokenizer's chat template, decoded in left-padded batches with a
KV cache, and, when a request carries a JSON schema, masked token by token by an ``llguidance``
matcher so the reply always follows the schema. Install with ``pip install "care-sdk[hf]"``.

A GGUF file loads as a plain transformers copy, converted once and cached
(:func:`cache_gguf`, under :func:`default_cache_dir`); :func:`build_once` is how any such model
directory is written (whole, safely when several processes build it at once), for code that
builds its own models from the same files.

Examples:
    >>> from care_sdk.backends.hf import HFBackend
    >>> backend = HFBackend.from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")  # doctest: +SKIP
    >>> backend = HFBackend("/models/Qwen2.5-0.5B-Instruct", device="cuda")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import random
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from care_sdk.backends._hf_decode import Row, decode_rows, text_pieces
from care_sdk.backends._hf_forced import PrefixCache
from care_sdk.backends._hf_load import (
    build_once,
    cache_gguf,
    default_cache_dir,
    load_gguf,
    load_pretrained,
    require_hf,
    resolve_dtype,
)
from care_sdk.backends.base import (
    Backend,
    Completion,
    ForcedRequest,
    GenerationRequest,
    GenerationResult,
    TokenLogprob,
    remember_config,
)
from care_sdk.backends.forced import build_forced_reply, forced_completion
from care_sdk.errors import BackendError, ConfigError, ContextOverflowError
from care_sdk.types import Message

__all__ = ["JSON_FORMAT", "HFBackend", "build_once", "cache_gguf", "default_cache_dir"]

JSON_FORMAT: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""How constrained JSON is laid out: on one line, with ``json.dumps``' default separators.

Fixed separators keep small models from padding replies with whitespace until ``max_tokens``.
"""


class HFBackend(Backend):
    """A causal LM run in-process by transformers, with schema-constrained JSON through llguidance.

    Args:
        model_or_path: a local model directory, a model id already in the local Hugging Face
            cache, or a ``.gguf`` file (see :meth:`from_gguf`). Omit it when passing ``model``.
        model: a causal LM you built (``transformers.PreTrainedModel``); needs ``tokenizer``.
        tokenizer: the fast tokenizer for ``model``; it must have a chat template (or pass
            ``chat_template``).
        device: where to run (``"cpu"``, ``"cuda"``, ``"cuda:1"``). ``None``: CPU for models loaded
            here, the model's own device for a ``model`` you pass.
        dtype: weights dtype for models loaded here (``"float32"``, ``"bfloat16"``, a
            ``torch.dtype``); ``None`` is float32 on a CPU and bfloat16 on a GPU.
        batch_size: completions decoded together (``n`` samples count separately).
        seed: the seed used when a request has none; sample ``i`` of a request uses ``seed + i``.
        chat_template: a Jinja chat template overriding the tokenizer's.
        cache_dir: where a GGUF file's plain copy is kept (default ``~/.cache/care-sdk/hf``).
        n_threads: when set, ``torch.set_num_threads(n_threads)`` (process-wide). On a CPU shared
            with other work, 1 thread is often faster than several.
        local_files_only: never contact a model hub (the default; set ``False`` at your own risk).

    Examples:
        >>> from care_sdk.backends.base import GenerationRequest
        >>> from care_sdk.types import Message
        >>> backend = HFBackend("/models/SmolLM2-135M-Instruct")  # doctest: +SKIP
        >>> req = GenerationRequest(messages=(Message(role="user", content="Rate 1-5."),),
        ...                         json_schema={"type": "integer", "enum": [1, 2, 3, 4, 5]}, max_tokens=4)
        >>> backend.generate([req])[0].text in {"1", "2", "3", "4", "5"}  # doctest: +SKIP
        True
    """

    provider = "hf"

    def __init__(
        self,
        model_or_path: str | os.PathLike[str] | None = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        device: str | None = None,
        dtype: Any = None,
        batch_size: int = 8,
        seed: int | None = 0,
        chat_template: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        n_threads: int | None = None,
        local_files_only: bool = True,
    ) -> None:
        require_hf()
        if batch_size < 1:
            raise ConfigError("batch_size: must be at least 1")
        if n_threads is not None:
            if n_threads < 1:
                raise ConfigError("n_threads: must be at least 1")
            import torch

            torch.set_num_threads(n_threads)
        if (model_or_path is None) == (model is None):
            raise ConfigError("HFBackend: pass either model_or_path or model= (with tokenizer=), not both")
        if model is not None:
            if tokenizer is None:
                raise ConfigError("HFBackend: a model passed as model= needs its tokenizer= too")
            self._name = str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
            if device is not None:
                model = model.to(device)
        else:
            path = os.fspath(model_or_path)  # type: ignore[arg-type]
            options = {"device": device, "dtype": dtype, "batch_size": batch_size, "seed": seed}
            options.update(chat_template=chat_template, cache_dir=cache_dir, n_threads=n_threads)
            remember_config(self, HFBackend, path, local_files_only=local_files_only, **options)
            device = device or "cpu"
            torch_dtype = resolve_dtype(dtype, device)
            if path.endswith(".gguf"):
                model, tokenizer = load_gguf(path, dtype=torch_dtype, cache_dir=cache_dir)
            else:
                model, tokenizer = load_pretrained(path, dtype=torch_dtype, local_files_only=local_files_only)
            model = model.to(device)
            self._name = path
        if not getattr(tokenizer, "is_fast", False):
            raise ConfigError("HFBackend: the tokenizer must be a fast (Rust) tokenizer, as llguidance needs one")
        if chat_template is None and not getattr(tokenizer, "chat_template", None):
            raise ConfigError("HFBackend: the tokenizer has no chat template; pass chat_template=...")
        model.eval()
        self._model: Any = model
        self._tokenizer: Any = tokenizer
        self._device = next(model.parameters()).device
        self._chat_template = chat_template
        self.batch_size = batch_size
        self.seed = seed
        self._eos_ids = frozenset(_eos_ids(model, tokenizer))
        pad = tokenizer.pad_token_id
        self._pad_id = int(pad if pad is not None else min(self._eos_ids))
        head = model.get_output_embeddings()
        self._vocab_size = int(head.weight.shape[0] if head is not None else model.config.vocab_size)
        self._context = getattr(model.config, "max_position_embeddings", None)
        self._lltokenizer: Any = None
        self._grammars: dict[str, str] = {}
        self._lock = threading.Lock()
        self._prefix = PrefixCache(model, self._device)

    @property
    def evaluated_tokens(self) -> int:
        """Tokens run through the model for forced replies so far (what the prefix cache lacked)."""
        return self._prefix.evaluated_tokens

    @classmethod
    def from_gguf(
        cls, gguf_path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None, **options: Any
    ) -> HFBackend:
        """Load a GGUF file (e.g. the bundled SmolLM2) as a plain transformers model.

        The first call dequantises the file (about a minute for 135M parameters on a CPU) and
        caches a plain copy under ``cache_dir``; later calls load the copy in seconds.

        Examples:
            >>> from care_sdk.backends.llamacpp import default_model_path
            >>> backend = HFBackend.from_gguf(default_model_path())  # doctest: +SKIP
            >>> backend.identity  # doctest: +SKIP
            'hf:.../SmolLM2-135M-Instruct.Q4_1.gguf'
        """
        path = os.fspath(gguf_path)
        if not path.endswith(".gguf"):
            raise ConfigError(f"from_gguf: expected a .gguf file, got {path!r}")
        return cls(path, cache_dir=cache_dir, **options)

    @property
    def identity(self) -> str:
        """``hf:`` and the model's path or id."""
        return f"hf:{self._name}"

    @property
    def model(self) -> Any:
        """The underlying ``transformers`` model."""
        return self._model

    @property
    def tokenizer(self) -> Any:
        """The underlying tokenizer."""
        return self._tokenizer

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Decode every request's ``n`` completions in batches of ``batch_size``; results in input order.

        A request that cannot run (prompt longer than the context, a schema llguidance rejects)
        gets a result with ``error`` set; the others are unaffected.
        """
        import torch

        if self._model is None:
            raise BackendError("the backend is closed", provider=self.provider)
        results: list[GenerationResult | None] = [None] * len(requests)
        owners: list[tuple[int, Row]] = []
        prompt_lengths: dict[int, int] = {}
        for index, request in enumerate(requests):
            try:
                rows = self._rows(request)
            except BackendError as exc:
                results[index] = GenerationResult(error=exc)
                continue
            prompt_lengths[index] = len(rows[0].prompt_ids)
            owners.extend((index, row) for row in rows)
        ordered = sorted(owners, key=lambda pair: len(pair[1].prompt_ids))
        with self._lock, torch.inference_mode():
            for start in range(0, len(ordered), self.batch_size):
                chunk = [row for _, row in ordered[start : start + self.batch_size]]
                try:
                    decode_rows(self._model, chunk, pad_id=self._pad_id, eos_ids=self._eos_ids, device=self._device)
                except (RuntimeError, ValueError) as exc:  # e.g. out of memory, an unsupported model
                    for row in chunk:
                        row.error = f"{type(exc).__name__}: {exc}"
        for index in prompt_lengths:
            rows = [row for owner, row in owners if owner == index]
            results[index] = self._result(requests[index], rows, prompt_lengths[index])
        assert all(r is not None for r in results)
        return results  # type: ignore[return-value]

    def _overflow(self, tokens: int) -> ContextOverflowError:
        """The error for ``tokens`` that do not fit the model's context."""
        return ContextOverflowError(
            tokens, int(self._context or 0), provider=self.provider, hint="shorten the dialogue context"
        )

    def reply_logprobs(self, messages: Sequence[Message], reply: str) -> list[float]:
        """The log-probability of each token of ``reply`` after ``messages``' prompt, in one forward
        pass over what the KV cache of the previous call does not already hold.

        Examples:
            >>> backend = HFBackend("/models/SmolLM2-135M-Instruct")  # doctest: +SKIP
            >>> len(backend.reply_logprobs([Message(role="user", content="hi")], "Hello!"))  # doctest: +SKIP
            2
        """
        import torch

        if self._model is None:
            raise BackendError("the backend is closed", provider=self.provider)
        prompt = self._prompt_ids(messages)
        tokens = self._reply_tokens(reply)[0]
        if not tokens:
            return []
        if self._context is not None and len(prompt) + len(tokens) > int(self._context):
            raise self._overflow(len(prompt) + len(tokens))
        with self._lock, torch.inference_mode():
            return self._prefix.span_logprobs(prompt + tokens, len(prompt))

    def hidden_state_means(self, texts: Sequence[str], layer: int) -> list[list[float]]:
        """Each text's ``hidden_states[layer]`` averaged over its tokens, one forward pass a text
        (transformers' numbering: ``layer`` decoder layers in; the last one is after the final norm).

        Examples:
            >>> backend = HFBackend.from_gguf(default_model_path())  # doctest: +SKIP
            >>> len(backend.hidden_state_means(["I lost my job."], layer=15)[0])  # doctest: +SKIP
            576
        """
        import torch

        if self._model is None:
            raise BackendError("the backend is closed", provider=self.provider)
        layers = int(self._model.config.num_hidden_layers)
        if not 1 <= layer <= layers:
            raise ConfigError(f"hf: hidden state layer must be 1 to {layers}, got {layer}")
        out = []
        with self._lock, torch.inference_mode():
            for text in texts:
                enc = self._tokenizer(text, return_tensors="pt").to(self._device)
                if self._context is not None and enc["input_ids"].shape[1] > int(self._context):
                    raise self._overflow(int(enc["input_ids"].shape[1]))
                hidden = self._model.base_model(**enc, output_hidden_states=True).hidden_states[layer]
                out.append(hidden[0].float().mean(0).tolist())
        return out

    def close(self) -> None:
        """Drop the model and tokenizer so their memory can be freed. Safe to call twice."""
        self._model = None
        self._tokenizer = None
        self._lltokenizer = None
        self._prefix = PrefixCache(None, self._device)

    # -- requests to rows -------------------------------------------------------------------

    def _prompt_ids(self, messages: Iterable[Message]) -> list[int]:
        chat = [{"role": m.role, "content": m.content} for m in messages]
        text = self._tokenizer.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=True, chat_template=self._chat_template
        )
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    def _rows(self, request: GenerationRequest) -> list[Row]:
        import torch

        prompt_ids = self._prompt_ids(request.messages)
        max_tokens = request.max_tokens
        if self._context is not None:
            room = int(self._context) - len(prompt_ids)
            if room <= 0:
                raise self._overflow(len(prompt_ids))
            max_tokens = min(max_tokens, room)
        grammar = self._grammar(request.json_schema) if request.json_schema is not None else None
        seed = request.seed if request.seed is not None else self.seed
        if seed is None:
            seed = random.SystemRandom().randrange(2**62)
        rows = []
        for sample in range(request.n):
            generator = None
            if request.temperature > 0:
                generator = torch.Generator().manual_seed(seed + sample)
            rows.append(
                Row(
                    prompt_ids=prompt_ids,
                    max_tokens=max_tokens,
                    temperature=request.temperature,
                    top_p=request.top_p,
                    generator=generator,
                    matcher=self._matcher(grammar) if grammar is not None else None,
                    top_logprobs=request.top_logprobs,
                )
            )
        return rows

    def _llguidance_tokenizer(self) -> Any:
        if self._lltokenizer is None:
            import llguidance.hf

            self._lltokenizer = llguidance.hf.from_tokenizer(
                self._tokenizer, n_vocab=self._vocab_size, eos_token=sorted(self._eos_ids)
            )
        return self._lltokenizer

    def _grammar(self, schema: dict[str, Any]) -> str:
        import llguidance

        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            try:
                grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=JSON_FORMAT)  # type: ignore[arg-type]
            except ValueError as exc:
                raise BackendError(f"invalid JSON schema: {exc}", provider=self.provider) from exc
            is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
                grammar, self._llguidance_tokenizer()
            )
            if is_error:
                raise BackendError(
                    f"llguidance cannot compile the JSON schema: {messages[0] if messages else 'unknown error'}",
                    provider=self.provider,
                    hint="simplify the schema",
                )
            self._grammars[key] = grammar
        return self._grammars[key]

    def _matcher(self, grammar: str) -> Any:
        import llguidance

        matcher = llguidance.LLMatcher(self._llguidance_tokenizer(), grammar, log_level=0)
        if matcher.is_error():
            raise BackendError(f"llguidance: {matcher.get_error()}", provider=self.provider)
        return matcher

    # -- forced replies -------------------------------------------------------------------

    def _reply_tokens(self, text: str) -> tuple[list[int], list[int]]:
        encoded = self._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ends = [len(text[:end].encode("utf-8")) for _, end in encoded["offset_mapping"]]
        return list(encoded["input_ids"]), ends

    def forced_replies(self, requests: Sequence[ForcedRequest]) -> list[GenerationResult]:
        """Build each forced reply one request at a time, reusing the prompt's cached prefix, each
        slot read from the logits (:class:`~care_sdk.backends.base.ForcedReplies`)."""
        import torch

        if self._model is None:
            raise BackendError("the backend is closed", provider=self.provider)
        with self._lock, torch.inference_mode():
            return [self._forced(request) for request in requests]

    def _forced(self, request: ForcedRequest) -> GenerationResult:
        forced = request.reply
        prompt = self._prompt_ids(request.messages)
        reply_tokens = len(self._reply_tokens(forced.text([max(forced.choices, key=len)] * forced.slots))[0])
        if self._context is not None and len(prompt) + reply_tokens > int(self._context):
            return GenerationResult(error=self._overflow(len(prompt) + reply_tokens))
        seed = request.seed if request.seed is not None else self.seed
        completions = []
        try:
            for sample in range(request.n):
                built = build_forced_reply(
                    forced,
                    prompt,
                    self._reply_tokens,
                    self._prefix.next_logprobs,
                    temperature=request.temperature,
                    seed=None if seed is None else seed + sample,
                )
                completions.append(forced_completion(built, forced))
        except (RuntimeError, ValueError) as exc:  # out of memory, choices the tokens cannot tell apart
            return GenerationResult(error=BackendError(f"forced reply failed: {exc}", provider=self.provider))
        used = len(self._reply_tokens(completions[0].text)[0]) * request.n
        usage = {"prompt_tokens": len(prompt), "completion_tokens": used, "total_tokens": len(prompt) + used}
        return GenerationResult(completions=tuple(completions), usage=usage)

    # -- rows to results --------------------------------------------------------------------

    def _result(self, request: GenerationRequest, rows: list[Row], prompt_tokens: int) -> GenerationResult:
        failed = next((row.error for row in rows if row.error is not None), None)
        if failed is not None:
            return GenerationResult(error=BackendError(f"decoding failed: {failed}", provider=self.provider))
        completions = tuple(self._completion(row) for row in rows)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": sum(len(row.tokens) for row in rows),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return GenerationResult(completions=completions, usage=usage)

    def _decode(self, token_ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=True))

    def _completion(self, row: Row) -> Completion:
        text = self._decode(row.tokens)
        logprobs = None
        if row.top_logprobs is not None:
            pieces = text_pieces(self._decode, row.tokens)
            logprobs = tuple(
                TokenLogprob(
                    token=piece,
                    logprob=logprob,
                    top=tuple((self._decode([alt]), alt_logprob) for alt, alt_logprob in top),
                )
                for piece, (logprob, top) in zip(pieces, row.logprobs, strict=True)
            )
        return Completion(text=text, finish_reason=row.finish_reason, logprobs=logprobs)


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for value in (getattr(getattr(model, "generation_config", None), "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    if not ids:
        raise ConfigError("HFBackend: neither the tokenizer nor the generation config names an EOS token")
    return ids
