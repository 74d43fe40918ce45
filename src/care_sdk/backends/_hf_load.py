"""Loading models and tokenizers for the transformers backend, offline only.

A model id or directory loads with ``local_files_only=True`` (never a hub). A GGUF file loads
through transformers' GGUF support (dequantised, about a minute for a 135M model on a CPU); the
plain copy is saved under a cache directory so later loads take seconds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from care_sdk.errors import ConfigError, MissingDependencyError

__all__ = [
    "COMPLETE",
    "build_once",
    "cache_gguf",
    "default_cache_dir",
    "gguf_cache_path",
    "load_gguf",
    "load_pretrained",
    "require_hf",
    "resolve_dtype",
]

COMPLETE = "care-sdk-complete"
"""The file that marks a cached model directory as completely written."""


def require_hf() -> None:
    """Import the ``hf`` extra's modules, or raise :class:`MissingDependencyError` naming the extra.

    Examples:
        >>> require_hf()  # without the extra: MissingDependencyError('torch', extra='hf')
    """
    for module in ("torch", "transformers", "llguidance"):
        try:
            __import__(module)
        except ImportError as exc:
            raise MissingDependencyError(module, extra="hf") from exc


def default_cache_dir() -> Path:
    """Where plain copies of GGUF models are kept: ``$CARE_SDK_CACHE/hf`` or ``~/.cache/care-sdk/hf``.

    Examples:
        >>> default_cache_dir().name
        'hf'
    """
    root = os.environ.get("CARE_SDK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "care-sdk"
    )
    return Path(root) / "hf"


def gguf_cache_path(gguf_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The directory a GGUF file's plain copy is cached in, keyed by its path, size and mtime.

    Examples:
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "m.gguf"
        >>> _ = f.write_bytes(b"GGUF")
        >>> gguf_cache_path(f, "/tmp/c").name.startswith("m-")
        True
    """
    path = Path(gguf_path).resolve()
    if not path.is_file():
        raise ConfigError(f"GGUF file not found: {path}")
    stat = path.stat()
    key = hashlib.sha256(f"{path}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / f"{path.stem}-{key}"


def resolve_dtype(dtype: Any, device: str) -> Any:
    """Turn a dtype spec (``None``, ``"float32"``, ``"bfloat16"``, a ``torch.dtype``) into a ``torch.dtype``.

    ``None`` means float32 on a CPU and bfloat16 elsewhere.

    Examples:
        >>> resolve_dtype(None, "cpu")
        torch.float32
        >>> resolve_dtype("bfloat16", "cpu")
        torch.bfloat16
    """
    import torch

    if dtype is None:
        return torch.float32 if str(device).startswith("cpu") else torch.bfloat16
    if isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype):
        raise ConfigError(f"dtype: unknown torch dtype {dtype!r}")
    return value


def load_pretrained(name_or_path: str, *, dtype: Any, local_files_only: bool = True) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer from a directory or a locally cached model id.

    Raises:
        ConfigError: nothing loadable is there (the message names the path or id).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, local_files_only=local_files_only)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype, local_files_only=local_files_only)
    except OSError as exc:
        raise ConfigError(
            f"hf: cannot load model {name_or_path!r} from local files ({exc}); "
            "pass a directory with config.json, weights and tokenizer, or a GGUF file"
        ) from exc
    return model, tokenizer


def load_gguf(
    gguf_path: str | os.PathLike[str], *, dtype: Any, cache_dir: str | os.PathLike[str] | None = None
) -> tuple[Any, Any]:
    """Load a GGUF model as a plain transformers model, converting and caching it on first use.

    The first load dequantises the GGUF through transformers (needs the ``gguf`` package), drops
    the quantisation settings and saves a plain copy (weights, config, tokenizer) under
    :func:`gguf_cache_path`; later loads read that copy.
    """
    return load_pretrained(str(cache_gguf(gguf_path, cache_dir)), dtype=dtype, local_files_only=True)


def cache_gguf(gguf_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The plain transformers copy of a GGUF model (see :func:`load_gguf`), converted on first use.

    Examples:
        >>> (cache_gguf("SmolLM2-135M-Instruct.Q4_1.gguf") / "config.json").exists()  # doctest: +SKIP
        True
    """
    target = gguf_cache_path(gguf_path, cache_dir)
    if not (target / COMPLETE).exists():  # converting loads the whole GGUF: only when it is not cached
        _convert_gguf(Path(gguf_path).resolve(), target)
    return target


def _convert_gguf(path: Path, target: Path) -> None:
    try:
        import gguf  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("gguf", extra="hf") from exc
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"hf: cannot load GGUF file {path} ({exc})") from exc
    # The weights are dequantised already; keep no quantizer so the copy saves and loads as plain weights.
    setattr(model, "hf_quantizer", None)  # noqa: B010
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    def write(staging: Path) -> None:
        staging.chmod(0o755)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)

    build_once(target, str(path), write)


def build_once(target: Path, marker: str, write: Callable[[Path], object]) -> Path:
    """``target``, written by ``write`` into a staging directory beside it and moved into place whole,
    unless a complete one is there already; safe when several processes build it at once.

    A complete directory holds the file ``care-sdk-complete`` (its text: ``marker``).

    Examples:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> built = build_once(root / "x", "made once", lambda d: (d / "a").write_text("1"))
        >>> sorted(p.name for p in built.iterdir()), build_once(root / "x", "again", print) == built
        (['a', 'care-sdk-complete'], True)
    """
    if (target / COMPLETE).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        write(staging)
        (staging / COMPLETE).write_text(marker + "\n", encoding="utf-8")
        try:
            os.replace(staging, target)
        except OSError:
            if not (target / COMPLETE).exists():  # another process did not finish it either
                shutil.rmtree(target, ignore_errors=True)
                os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
