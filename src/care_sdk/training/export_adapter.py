"""``care train export-adapter``: a trained PEFT LoRA adapter as a GGUF adapter file for llama.cpp.

llama.cpp applies GGUF LoRA adapters on top of a (quantised) base model (``lora_path``). The file
holds llama.cpp's adapter keys (``general.type = adapter``, ``adapter.type = lora``,
``adapter.lora.alpha``) and one ``lora_a``/``lora_b`` tensor pair per adapted weight, named as the
base GGUF names that weight (``blk.N.attn_q.weight.lora_a``), plus the ``care.*`` records that
:func:`care_sdk.adapters.read_adapter` reads (role, prompt version, context cut, base model,
training summary).

Llama-architecture GGUF files store the query and key projections with their rows permuted for
llama.cpp's rotary layout; the ``lora_b`` factors of those projections get the same permutation,
so the adapter reproduces the transformers model it was trained as.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from care_sdk.adapters import gguf_metadata, read_adapter
from care_sdk.errors import ConfigError, InputError, MissingDependencyError

__all__ = ["GGUF_NAMES", "export_lora_gguf"]

GGUF_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
"""PEFT module paths of a Llama decoder layer → llama.cpp's tensor names."""

_KEY = re.compile(r"layers\.(\d+)\.(.+)\.lora_([AB])\.weight$")


def _permute(weights: Any, n_head: int) -> Any:
    """llama.cpp's rotary row order for a query/key output dimension (as its converter writes it)."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def export_lora_gguf(
    adapter_dir: str | Path,
    out: str | Path,
    *,
    base_gguf: str | Path,
    role: str,
    prompt_version: str,
    max_context_messages: int | None,
    training: dict[str, Any] | None = None,
) -> Path:
    """Write the PEFT LoRA adapter in ``adapter_dir`` as a GGUF adapter file for ``base_gguf``.

    Args:
        adapter_dir: a PEFT adapter directory (``adapter_config.json``, ``adapter_model.safetensors``).
        out: the GGUF file to write.
        base_gguf: the GGUF base model the adapter applies to (read for its architecture and heads).
        role: ``generator`` or ``evaluator``.
        prompt_version: the prompt version the adapter was trained with.
        max_context_messages: the context cut used in training (``None``: none).
        training: a JSON-serialisable summary of the training run.

    Returns:
        The written file.

    Raises:
        InputError: the adapter directory is incomplete or holds tensors of an unknown module.
        ConfigError: the base model is not a Llama-architecture GGUF.

    Examples:
        >>> export_lora_gguf("runs/generator_sft/adapter", "generator.gguf",  # doctest: +SKIP
        ...                  base_gguf=default_model_path(), role="generator", prompt_version="v2",
        ...                  max_context_messages=6)
    """
    try:
        import gguf
        import numpy as np
        from safetensors.numpy import load_file
    except ImportError as exc:
        raise MissingDependencyError(exc.name or "gguf", extra="train") from exc
    adapter_dir, out = Path(adapter_dir), Path(out)
    config_path, weights_path = adapter_dir / "adapter_config.json", adapter_dir / "adapter_model.safetensors"
    for path in (config_path, weights_path):
        if not path.is_file():
            raise InputError("missing adapter file", location=str(path))
    config = json.loads(config_path.read_text(encoding="utf-8"))
    base = gguf_metadata(base_gguf)
    arch = base.get("general.architecture")
    if arch != "llama":
        raise ConfigError(f"{base_gguf}: expected a llama-architecture GGUF, got {arch!r}")
    n_head, n_kv = int(base["llama.attention.head_count"]), int(base["llama.attention.head_count_kv"])
    tensors = load_file(str(weights_path))
    writer = gguf.GGUFWriter(str(out), arch=arch)
    writer.add_string(gguf.Keys.General.TYPE, gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(config["lora_alpha"]))
    writer.add_string("care.role", role)
    writer.add_string("care.prompt_version", prompt_version)
    writer.add_uint32("care.max_context_messages", max_context_messages or 0)
    writer.add_string("care.base_model", Path(base_gguf).name)
    writer.add_string("care.training", json.dumps(training or {}, sort_keys=True))
    for key in sorted(tensors, key=lambda k: (int(m.group(1)) if (m := _KEY.search(k)) else -1, k)):
        match = _KEY.search(key)
        if match is None or match.group(2) not in GGUF_NAMES:
            raise InputError(f"adapter tensor of an unknown module: {key}", location=str(weights_path))
        layer, module, factor = match.groups()
        value = tensors[key].astype(np.float32)
        if factor == "B" and module == "self_attn.q_proj":
            value = _permute(value, n_head)
        elif factor == "B" and module == "self_attn.k_proj":
            value = _permute(value, n_kv)
        name = f"blk.{layer}.{GGUF_NAMES[module]}.weight.lora_{factor.lower()}"
        writer.add_tensor(name, np.ascontiguousarray(value).astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    read_adapter(out)  # the records read back
    return out
