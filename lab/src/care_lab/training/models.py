"""The models a recipe names: :func:`resolve_model` turns a ``model`` setting (``tiny``, ``bundled``,
``bundled:generator``, ``bundled:evaluator`` or a directory) into a transformers or PEFT adapter
directory; :func:`tiny_model_dir` builds a tiny random SmolLM2-shaped model for tests and smoke
runs; :func:`bundled_model_dir` the bundled SmolLM2 as a plain transformers directory;
:func:`bundled_adapter_dir` a shipped adapter as a PEFT adapter directory on it;
:func:`adapter_chain` the adapters a LoRA run's model is made of, for export.

The built models are made from the bundled SmolLM2-135M-Instruct GGUF and adapters (no hub, no
network) and cached on disk, so every recipe test can share them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from care_sdk.backends.hf import build_once, cache_gguf, default_cache_dir
from care_sdk.errors import MissingDependencyError

__all__ = [
    "adapter_chain",
    "bundled_adapter_dir",
    "bundled_model_dir",
    "require_train",
    "resolve_model",
    "tiny_grpo_trainer",
    "tiny_model_dir",
]


def require_train() -> None:
    """Import the ``train`` extra's modules, or raise :class:`MissingDependencyError` naming the extra.

    Examples:
        >>> require_train()  # without the extra: MissingDependencyError('trl', extra='train')
    """
    for module in ("torch", "transformers", "trl", "peft", "datasets"):
        try:
            __import__(module)
        except ImportError as exc:
            raise MissingDependencyError(module, extra="train") from exc


def _cache_root(cache_dir: str | os.PathLike[str] | None, kind: str = "tiny") -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    return default_cache_dir().parent / kind


def bundled_model_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """SmolLM2-135M-Instruct (the bundled GGUF, dequantised) as a transformers directory.

    The first call converts the GGUF (about a minute on a CPU) and caches it beside the
    transformers backend's copies; later calls return the cached directory at once.

    Examples:
        >>> path = bundled_model_dir()  # doctest: +SKIP
        >>> (path / "config.json").exists()  # doctest: +SKIP
        True
    """
    require_train()
    from care_sdk.backends.llamacpp import default_model_path

    return cache_gguf(default_model_path(), cache_dir)


def tiny_model_dir(
    *,
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    seed: int = 0,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """A tiny randomly initialised model with SmolLM2's architecture, tokenizer and chat template.

    SmolLM2-135M's config (from the bundled GGUF) shrunk to ``layers`` x ``hidden``, initialised
    from ``seed``, saved with SmolLM2's tokenizer. Built once per setting and cached (a few
    seconds); safe to call from several processes.

    Args:
        layers: decoder layers.
        hidden: hidden size.
        heads: attention heads (must divide ``hidden``).
        kv_heads: key/value heads (must divide ``heads``).
        intermediate: MLP size.
        seed: initialisation seed.
        cache_dir: where to keep it (default ``~/.cache/care-sdk/tiny`` or ``$CARE_SDK_CACHE/tiny``).

    Returns:
        A directory ``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load.

    Examples:
        >>> from transformers import AutoModelForCausalLM  # doctest: +SKIP
        >>> model = AutoModelForCausalLM.from_pretrained(tiny_model_dir())  # doctest: +SKIP
        >>> model.config.num_hidden_layers  # doctest: +SKIP
        2
    """
    require_train()
    from care_sdk.backends.llamacpp import default_model_path

    gguf = default_model_path()
    settings = {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "intermediate": intermediate,
        "seed": seed,
        "gguf": gguf.name,
    }
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    target = _cache_root(cache_dir) / f"smollm2-tiny-{layers}x{hidden}-{key}"

    def write(staging: Path) -> None:  # called only when no complete copy is cached
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
        config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
        config.num_hidden_layers = layers
        config.hidden_size = hidden
        config.num_attention_heads = heads
        config.num_key_value_heads = kv_heads
        config.intermediate_size = intermediate
        config.head_dim = hidden // heads
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)

    return build_once(target, json.dumps(settings), write)


def bundled_adapter_dir(role: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The adapter shipped for ``role`` as a PEFT adapter directory on the bundled model.

    What a recipe's ``model: bundled:generator`` (or ``bundled:evaluator``) loads: the bundled
    model with the shipped adapter merged, to train on from there. The GGUF adapter is converted
    once (:func:`~care_lab.training.export_adapter.import_lora_gguf`) and cached by its contents.

    Args:
        role: ``generator`` or ``evaluator``.
        cache_dir: where to keep it (default ``~/.cache/care-sdk/adapters`` or ``$CARE_SDK_CACHE/adapters``).

    Raises:
        ConfigError: this build ships no adapter for ``role``.

    Examples:
        >>> path = bundled_adapter_dir("generator")  # doctest: +SKIP
        >>> (path / "adapter_config.json").exists()  # doctest: +SKIP
        True
    """
    require_train()
    from care_lab.training.export_adapter import import_lora_gguf
    from care_sdk.bundled.adapters import bundled_adapter
    from care_sdk.errors import ConfigError

    gguf = bundled_adapter(role)
    if gguf is None:
        raise ConfigError(f"model: bundled:{role}: this build ships no {role} adapter (roles: generator, evaluator)")
    key = hashlib.sha256(gguf.read_bytes()).hexdigest()[:12]
    base = bundled_model_dir()
    target = _cache_root(cache_dir, "adapters") / f"{role}-{key}"

    def write(staging: Path) -> None:
        import_lora_gguf(gguf, staging, base_model=base)

    return build_once(target, json.dumps({"adapter": gguf.name, "sha256": key}), write)


def resolve_model(name: str) -> Path:
    """Resolve a recipe's ``model`` setting: ``tiny``, ``bundled``, ``bundled:generator`` or
    ``bundled:evaluator`` (the bundled model with the shipped adapter, as a PEFT adapter directory:
    :func:`bundled_adapter_dir`), or a directory.

    A training output directory resolves to its ``merged/`` model when it has one.

    Raises:
        ConfigError: the directory does not exist.

    Examples:
        >>> resolve_model("/nonexistent")
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: model: no such directory: /nonexistent
    """
    from care_sdk.errors import ConfigError

    if name == "tiny":
        return tiny_model_dir()
    if name == "bundled":
        return bundled_model_dir()
    if name.startswith("bundled:"):
        return bundled_adapter_dir(name.removeprefix("bundled:"))
    path = Path(name)
    if not path.is_dir():
        raise ConfigError(f"model: no such directory: {name}")
    if (path / "merged" / "config.json").exists():
        return path / "merged"
    return path


def adapter_chain(model: str, adapter_dir: str | Path) -> list[Path]:
    """The adapters that make a LoRA run's model out of the bundled base: the run's ``adapter_dir``,
    after the adapter its ``model`` setting started from, when that was one.

    A run from ``bundled`` is its own adapter; a run from ``bundled:generator`` (or any PEFT adapter
    directory: an SFT run's ``adapter/``) trained on that adapter merged, so the two are written
    together (:func:`~care_lab.training.export_adapter.export_lora_gguf`).

    Raises:
        ConfigError: the run started from a full model (a merged directory, another base), which a
            GGUF adapter of the bundled base cannot hold, or it saved no adapter.

    Examples:
        >>> [p.name for p in adapter_chain("bundled", "runs/generator_sft/adapter")]
        ['adapter']
    """
    from care_sdk.errors import ConfigError

    adapter_dir = Path(adapter_dir)
    if model == "bundled":
        return [adapter_dir]
    if not (adapter_dir / "adapter_config.json").is_file():
        raise ConfigError(f"{adapter_dir}: the run saved no LoRA adapter (finetune: lora writes one)")
    start = resolve_model(model)
    if not (start / "adapter_config.json").is_file():
        raise ConfigError(
            f"model: {model}: the run started from a full model, not the bundled base or a LoRA adapter of it; "
            "a GGUF adapter of the bundled base cannot hold it"
        )
    return [start, adapter_dir]


def tiny_grpo_trainer(
    reward_funcs: Any,
    rows: list[dict[str, Any]],
    output_dir: str | os.PathLike[str],
    *,
    max_steps: int = 2,
    batch: int = 4,
    generations: int = 4,
    completion_tokens: int = 24,
    learning_rate: float = 1e-2,
    model: Any = None,
) -> Any:
    """A TRL ``GRPOTrainer`` on CPU over ``rows`` (each with a ``prompt``) for a tiny random policy
    (:func:`tiny_model_dir`; ``model``: that policy already loaded), logging every step, saving nothing:
    what the tests and benchmarks that run real GRPO steps against a reward share.

    Examples:
        >>> trainer = tiny_grpo_trainer(lambda completions, **_: [0.0] * len(completions),  # doctest: +SKIP
        ...                             [{"prompt": [{"role": "user", "content": "Hi."}]}], "/tmp/out")
        >>> trainer.train()  # doctest: +SKIP
    """
    require_train()
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.grpo_config import GRPOConfig
    from trl.trainer.grpo_trainer import GRPOTrainer

    policy = tiny_model_dir()
    config = GRPOConfig(
        output_dir=str(output_dir),
        max_steps=max_steps,
        per_device_train_batch_size=batch,
        num_generations=generations,
        max_completion_length=completion_tokens,
        learning_rate=learning_rate,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
    )
    return GRPOTrainer(
        model=model if model is not None else AutoModelForCausalLM.from_pretrained(policy),
        processing_class=AutoTokenizer.from_pretrained(policy),
        reward_funcs=reward_funcs if isinstance(reward_funcs, list) else [reward_funcs],
        args=config,
        train_dataset=Dataset.from_list(rows),
    )
