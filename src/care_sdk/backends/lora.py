"""care-sdk LoRA adapter files: GGUF LoRA adapters and what each records about its training.

An adapter is a GGUF LoRA file that llama.cpp applies on top of its base model (``lora_path``;
:class:`~care_sdk.backends.llamacpp.LlamaCppBackend`'s ``adapter``). Besides llama.cpp's own keys it
records, under ``care.*``:

- ``care.role``: ``generator`` (or ``evaluator``);
- ``care.prompt_version``: the prompt version it was trained with (a mismatch is a
  :class:`~care_sdk.errors.ConfigError`, since the adapter only works with that prompt);
- ``care.max_context_messages``: how far back the context was cut in training (0: not cut), used
  as the inference setting too;
- ``care.base_model``: the base model file it was trained on; ``care.training``: a JSON summary of
  the run that made it.

``care train export-adapter`` writes such files; the package's own are in the bundled area.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from care_sdk.errors import ConfigError

__all__ = ["AdapterInfo", "gguf_metadata", "read_adapter"]

# GGUF value types: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _read(fh: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = fh.read(size)
    if len(data) != size:
        raise ValueError("file ends inside its header")
    return struct.unpack(fmt, data)[0]


def _string(fh: BinaryIO) -> str:
    n = _read(fh, "<Q")
    return fh.read(n).decode("utf-8", errors="replace")


def _value(fh: BinaryIO, kind: int) -> Any:
    if kind in _SCALARS:
        return _read(fh, _SCALARS[kind])
    if kind == 8:
        return _string(fh)
    if kind == 9:
        item_kind = _read(fh, "<I")
        return [_value(fh, item_kind) for _ in range(_read(fh, "<Q"))]
    raise ValueError(f"unknown GGUF value type {kind}")


def gguf_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The key-value metadata of a GGUF file (its header only; tensors are not read).

    Raises:
        ConfigError: the file is missing or not a GGUF file.

    Examples:
        >>> meta = gguf_metadata("generator.gguf")  # doctest: +SKIP
        >>> meta["adapter.type"]  # doctest: +SKIP
        'lora'
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            if fh.read(4) != b"GGUF":
                raise ValueError("not a GGUF file")
            _read(fh, "<I")  # version
            _read(fh, "<Q")  # tensor count
            return {_string(fh): _value(fh, _read(fh, "<I")) for _ in range(_read(fh, "<Q"))}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read adapter: {exc.strerror or exc}") from None
    except (ValueError, struct.error) as exc:
        raise ConfigError(f"{path}: not a readable GGUF file: {exc}") from None


@dataclass(frozen=True)
class AdapterInfo:
    """A LoRA adapter file and what it records about its training.

    Examples:
        >>> info = AdapterInfo(path=Path("g.gguf"), role="generator", prompt_version="v2", max_context_messages=6)
        >>> info.require(role="generator", prompt_version="v2")
        >>> info.require(role="generator", prompt_version="v3")
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: g.gguf: adapter trained with generator prompt v2, but ... uses v3; ...
    """

    path: Path
    """The GGUF adapter file."""
    role: str
    """``generator`` or ``evaluator``."""
    prompt_version: str
    """The prompt version the adapter was trained with."""
    max_context_messages: int | None = None
    """How many context messages training kept (``None``: all)."""
    base_model: str = ""
    """The base model file it was trained on."""
    training: dict[str, Any] = field(default_factory=dict)
    """A summary of the training run (data, steps, time, loss)."""

    @property
    def expected_scores(self) -> bool:
        """Whether the evaluator was trained to be read as expected scores (its training summary says
        ``"scores": "expected"``): the probability-weighted mean of ``1``-``5`` at each score's position,
        which :class:`~care_sdk.RubricEvaluator` then reads by default (``use_logprobs``).

        Examples:
            >>> AdapterInfo(Path("e.gguf"), "evaluator", "v2", training={"scores": "expected"}).expected_scores
            True
        """
        return self.training.get("scores") == "expected"

    def require(self, *, role: str, prompt_version: str) -> None:
        """Check that the adapter serves ``role`` with ``prompt_version``.

        Raises:
            ConfigError: the adapter was trained for another role or prompt version.
        """
        if self.role != role:
            article = "an" if self.role[:1] in "aeiou" else "a"
            raise ConfigError(f"{self.path.name}: {article} {self.role} adapter cannot serve as the {role}")
        if self.prompt_version != prompt_version:
            raise ConfigError(
                f"{self.path.name}: adapter trained with {role} prompt {self.prompt_version}, but this version "
                f"of care-sdk uses {prompt_version}; use an adapter trained with {prompt_version}, or the "
                "untrained base (spec 'base')"
            )


def read_adapter(path: str | os.PathLike[str]) -> AdapterInfo:
    """Read a care-sdk LoRA adapter's records.

    Raises:
        ConfigError: the file is missing, not GGUF, not a LoRA adapter, or lacks the ``care.*`` keys.

    Examples:
        >>> read_adapter("generator.gguf").role  # doctest: +SKIP
        'generator'
    """
    path = Path(path)
    meta = gguf_metadata(path)
    if meta.get("general.type") != "adapter" or meta.get("adapter.type") != "lora":
        raise ConfigError(f"{path}: not a LoRA adapter (general.type={meta.get('general.type')!r})")
    missing = [k for k in ("care.role", "care.prompt_version") if k not in meta]
    if missing:
        raise ConfigError(f"{path}: adapter lacks {', '.join(missing)}; export it with `care train export-adapter`")
    keep = int(meta.get("care.max_context_messages", 0))
    return AdapterInfo(
        path=path,
        role=str(meta["care.role"]),
        prompt_version=str(meta["care.prompt_version"]),
        max_context_messages=keep or None,
        base_model=str(meta.get("care.base_model", "")),
        training=json.loads(meta.get("care.training", "{}")),
    )
