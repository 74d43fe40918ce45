"""``care train export-adapter``: trained PEFT LoRA adapters as a GGUF adapter file for llama.cpp, and back.

llama.cpp applies GGUF LoRA adapters on top of a (quantised) base model (``lora_path``). The file
holds llama.cpp's adapter keys (``general.type = adapter``, ``adapter.type = lora``,
``adapter.lora.alpha``) and one ``lora_a``/``lora_b`` tensor pair per adapted weight, named as the
base GGUF names that weight (``blk.N.attn_q.weight.lora_a``), plus the ``care.*`` records that
:func:`care_sdk.bundled.adapters.read_adapter` reads (role, prompt version, context cut, base model,
training summary).

Llama-architecture GGUF files store the query and key projections with their rows permuted for
llama.cpp's rotary layout; the ``lora_b`` factors of those projections get the same permutation,
so the adapter reproduces the transformers model it was trained as.

Several adapters trained one on top of another (a pref-GRPO LoRA trained on the merged SFT model)
are written as one: their products add up, so the file holds each tensor's factors side by side
(ranks concatenated, each ``lora_b`` scaled by its adapter's ``alpha / r``).

:func:`import_lora_gguf` reads such a file back into a PEFT adapter directory, so training can go
on from a shipped adapter (the recipes' ``model: bundled:generator``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from care_sdk.backends.lora import gguf_metadata, read_adapter
from care_sdk.errors import ConfigError, InputError, MissingDependencyError

__all__ = ["GGUF_NAMES", "export_lora_gguf", "import_lora_gguf"]

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
_GGUF_KEY = re.compile(r"^blk\.(\d+)\.(\w+)\.weight\.lora_([ab])$")
CARE_ADAPTER = "care_adapter.json"
"""The file of an imported adapter directory that keeps the GGUF adapter's ``care.*`` records."""


def _permute(weights: Any, n_head: int) -> Any:
    """llama.cpp's rotary row order for a query/key output dimension (as its converter writes it)."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _unpermute(weights: Any, n_head: int) -> Any:
    """The inverse of :func:`_permute`: transformers' row order back from llama.cpp's."""
    return (
        weights.reshape(n_head, weights.shape[0] // n_head // 2, 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _heads(base_gguf: str | Path) -> tuple[str, int, int]:
    base = gguf_metadata(base_gguf)
    arch = base.get("general.architecture")
    if arch != "llama":
        raise ConfigError(f"{base_gguf}: expected a llama-architecture GGUF, got {arch!r}")
    return arch, int(base["llama.attention.head_count"]), int(base["llama.attention.head_count_kv"])


def _paired(factors: Iterable[tuple[int, str, bool, Any]], location: str) -> dict[tuple[int, str], tuple[Any, Any]]:
    """``(layer, module, is_b, value)`` factors as ``(layer, module) -> (A, B)``; a lone factor is an error."""
    pairs: dict[tuple[int, str], list[Any]] = {}
    for layer, module, is_b, value in factors:
        pairs.setdefault((layer, module), [None, None])[is_b] = value
    for (layer, module), (a, b) in pairs.items():
        if a is None or b is None:
            raise InputError(f"layer {layer} {module}: its LoRA A or B factor is missing", location=location)
    return {key: (a, b) for key, (a, b) in pairs.items()}


def _peft_factors(adapter_dir: Path) -> tuple[dict[tuple[int, str], tuple[Any, Any]], float]:
    """One PEFT adapter's ``(layer, module) -> (A, B · scaling)`` in float32, and its ``lora_alpha``."""
    import numpy as np
    from safetensors.numpy import load_file

    config_path, weights_path = adapter_dir / "adapter_config.json", adapter_dir / "adapter_model.safetensors"
    for path in (config_path, weights_path):
        if not path.is_file():
            raise InputError("missing adapter file", location=str(path))
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if config.get("use_rslora") or config.get("use_dora"):
        raise InputError("rsLoRA and DoRA adapters cannot be written as llama.cpp LoRA", location=str(config_path))
    alpha = float(config["lora_alpha"])
    alpha_pattern: dict[str, float] = config.get("alpha_pattern") or {}

    def factors() -> Iterator[tuple[int, str, bool, Any]]:
        for key, value in load_file(str(weights_path)).items():
            match = _KEY.search(key)
            if match is None or match.group(2) not in GGUF_NAMES:
                raise InputError(f"adapter tensor of an unknown module: {key}", location=str(weights_path))
            layer, module, factor = match.groups()
            yield int(layer), module, factor == "B", value.astype(np.float32)

    out = {}
    for (layer, module), (a, b) in _paired(factors(), str(weights_path)).items():
        name = f"model.layers.{layer}.{module}"
        own = [v for k, v in alpha_pattern.items() if name == k or name.endswith("." + k)]
        out[(layer, module)] = (a, b * ((own[0] if own else alpha) / a.shape[0]))  # PEFT's scaling, alpha / r
    return out, alpha


def export_lora_gguf(
    adapter_dir: str | Path | Sequence[str | Path],
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
        adapter_dir: a PEFT adapter directory (``adapter_config.json``, ``adapter_model.safetensors``),
            or several, each trained on the model the ones before it merged into (base first): they
            are written as one adapter whose change to the base is the sum of theirs.
        out: the GGUF file to write.
        base_gguf: the GGUF base model the adapter applies to (read for its architecture and heads).
        role: ``generator`` or ``evaluator``.
        prompt_version: the prompt version the adapter was trained with.
        max_context_messages: the context cut used in training (``None``: none).
        training: a JSON-serialisable summary of the training run.

    Returns:
        The written file.

    Raises:
        InputError: an adapter directory is incomplete or holds tensors of an unknown module.
        ConfigError: the base model is not a Llama-architecture GGUF.

    Examples:
        >>> export_lora_gguf("runs/generator_sft/adapter", "generator.gguf",  # doctest: +SKIP
        ...                  base_gguf=default_model_path(), role="generator", prompt_version="v2",
        ...                  max_context_messages=6)
        >>> export_lora_gguf(["runs/sft/adapter", "runs/pref_grpo/adapter"], "g.gguf", ...)  # doctest: +SKIP
    """
    try:
        import gguf
        import numpy as np
    except ImportError as exc:
        raise MissingDependencyError(exc.name or "gguf", extra="train") from exc
    dirs = [Path(adapter_dir)] if isinstance(adapter_dir, (str, Path)) else [Path(d) for d in adapter_dir]
    if not dirs:
        raise ConfigError("export_lora_gguf: no adapter directory given")
    out = Path(out)
    arch, n_head, n_kv = _heads(base_gguf)
    adapters = [_peft_factors(directory) for directory in dirs]
    alpha = adapters[0][1]  # the file's alpha: the first adapter's (every B already holds its own scale)
    stacked: dict[tuple[int, str], tuple[list[Any], list[Any]]] = {}
    for factors, _ in adapters:
        for key, (a, b) in factors.items():
            both = stacked.setdefault(key, ([], []))
            both[0].append(a)
            both[1].append(b)
    writer = gguf.GGUFWriter(str(out), arch=arch)
    writer.add_string(gguf.Keys.General.TYPE, gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    writer.add_string("care.role", role)
    writer.add_string("care.prompt_version", prompt_version)
    writer.add_uint32("care.max_context_messages", max_context_messages or 0)
    writer.add_string("care.base_model", Path(base_gguf).name)
    writer.add_string("care.training", json.dumps(training or {}, sort_keys=True))
    for layer, module in sorted(stacked):
        a_parts, b_parts = stacked[(layer, module)]
        lora_a, lora_b = np.concatenate(a_parts, axis=0), np.concatenate(b_parts, axis=1)
        # llama.cpp scales each tensor's product by alpha / rank: undo it, the scaling is in lora_b
        lora_b = lora_b * (lora_a.shape[0] / alpha)
        if module == "self_attn.q_proj":
            lora_b = _permute(lora_b, n_head)
        elif module == "self_attn.k_proj":
            lora_b = _permute(lora_b, n_kv)
        name = f"blk.{layer}.{GGUF_NAMES[module]}.weight"
        writer.add_tensor(f"{name}.lora_a", np.ascontiguousarray(lora_a).astype(np.float16))
        writer.add_tensor(f"{name}.lora_b", np.ascontiguousarray(lora_b).astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    read_adapter(out)  # the records read back
    return out


def import_lora_gguf(
    path: str | Path, out_dir: str | Path, *, base_gguf: str | Path | None = None, base_model: str | Path | None = None
) -> Path:
    """A GGUF LoRA adapter file, as :func:`export_lora_gguf` writes it, as a PEFT adapter directory.

    Training can then go on from a shipped adapter: the directory loads with
    ``AutoPeftModelForCausalLM`` (and as a recipe's ``model``), its base being the transformers copy of
    ``base_gguf``. The rotary row order of the query and key factors is undone, each module keeps
    the rank it has in the file, and the ``care.*`` records go to ``care_adapter.json``.

    Args:
        path: the GGUF adapter file.
        out_dir: the directory to write (``adapter_config.json``, ``adapter_model.safetensors``, the
            tokenizer, ``care_adapter.json``).
        base_gguf: the GGUF base model the adapter applies to (default: the bundled one).
        base_model: its transformers directory (default: ``base_gguf`` dequantised into the
            transformers backend's cache, :func:`~care_lab.training.models.bundled_model_dir` for the
            bundled one).

    Returns:
        ``out_dir``.

    Raises:
        ConfigError: the file is not a LoRA adapter, or the base is not a Llama-architecture GGUF.
        InputError: a tensor of a module transformers' Llama does not have.

    Examples:
        >>> from care_sdk.bundled.adapters import bundled_adapter
        >>> adapter = import_lora_gguf(bundled_adapter("generator"), "runs/generator_import")  # doctest: +SKIP
        >>> sorted(p.name for p in adapter.glob("*.json"))[:2]  # doctest: +SKIP
        ['adapter_config.json', 'care_adapter.json']
    """
    try:
        import gguf
        import numpy as np
        from peft import LoraConfig
        from safetensors.numpy import save_file
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise MissingDependencyError(exc.name or "gguf", extra="train") from exc
    from care_sdk.backends.hf import cache_gguf
    from care_sdk.backends.llamacpp import default_model_path

    path, out_dir = Path(path), Path(out_dir)
    meta = gguf_metadata(path)
    if meta.get("general.type") != "adapter" or meta.get("adapter.type") != "lora":
        raise ConfigError(f"{path}: not a GGUF LoRA adapter (general.type={meta.get('general.type')!r})")
    _, n_head, n_kv = _heads(base_gguf or default_model_path())
    alpha = float(meta.get("adapter.lora.alpha") or 0.0)
    modules = {name: module for module, name in GGUF_NAMES.items()}

    def factors() -> Iterator[tuple[int, str, bool, Any]]:
        for tensor in gguf.GGUFReader(str(path)).tensors:
            match = _GGUF_KEY.match(tensor.name)
            if match is None or match.group(2) not in modules:
                raise InputError(f"adapter tensor of an unknown module: {tensor.name}", location=str(path))
            layer, name, factor = match.groups()
            yield int(layer), modules[name], factor == "b", np.array(tensor.data, dtype=np.float32)

    tensors: dict[str, Any] = {}
    ranks: dict[str, int] = {}
    for (layer, module), (lora_a, lora_b) in sorted(_paired(factors(), str(path)).items()):
        if module == "self_attn.q_proj":
            lora_b = _unpermute(lora_b, n_head)
        elif module == "self_attn.k_proj":
            lora_b = _unpermute(lora_b, n_kv)
        full = f"model.layers.{layer}.{module}"
        ranks[full] = lora_a.shape[0]
        tensors[f"base_model.model.{full}.lora_A.weight"] = np.ascontiguousarray(lora_a)
        tensors[f"base_model.model.{full}.lora_B.weight"] = np.ascontiguousarray(lora_b)
    if not tensors:
        raise InputError("the adapter holds no LoRA tensors", location=str(path))
    rank = max(set(ranks.values()), key=list(ranks.values()).count)
    base_dir = Path(base_model) if base_model is not None else cache_gguf(base_gguf or default_model_path())
    lora_alpha: Any = (int(alpha) if alpha.is_integer() else alpha) if alpha else rank  # llama.cpp: 0 is scale 1
    config = LoraConfig(
        r=rank,
        lora_alpha=lora_alpha,
        lora_dropout=0.0,
        target_modules=sorted(ranks),
        rank_pattern={name: r for name, r in ranks.items() if r != rank},
        alpha_pattern={} if alpha else {name: r for name, r in ranks.items() if r != rank},
        task_type="CAUSAL_LM",
        base_model_name_or_path=str(base_dir),
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(out_dir))
    save_file(tensors, str(out_dir / "adapter_model.safetensors"), metadata={"format": "pt"})
    AutoTokenizer.from_pretrained(str(base_dir), local_files_only=True).save_pretrained(str(out_dir))
    records = {key.removeprefix("care."): value for key, value in meta.items() if key.startswith("care.")}
    records["source"] = str(path)
    (out_dir / CARE_ADAPTER).write_text(json.dumps(records, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out_dir
