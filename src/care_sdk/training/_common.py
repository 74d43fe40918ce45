"""Shared trainer wiring: reading build-data records, prompts, models, TRL configs, saving."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from care_sdk.errors import ConfigError, InputError
from care_sdk.prompts import generator_messages
from care_sdk.training.tiny import require_train, resolve_model
from care_sdk.types import Message

__all__ = ["build_trl_config", "load_model", "prompt_messages", "read_records", "save_outputs"]


def read_records(path: str | Path, kind: str, split: str = "train", limit: int | None = None) -> list[dict[str, Any]]:
    """Read build-data records: a JSONL file, or ``<dir>/<kind>/<split>.jsonl`` under a build-data output.

    Raises:
        InputError: the file is missing, a line is not JSON, or it holds no records.
    """
    path = Path(path)
    if path.is_dir():
        path = path / kind / f"{split}.jsonl"
    if not path.is_file():
        raise InputError("no such file (run `care train build-data` first?)", location=str(path))
    records = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputError(f"not valid JSON: {exc.msg}", location=f"{path}:line {number}") from None
            if limit is not None and len(records) >= limit:
                break
    if not records:
        raise InputError("no records", location=str(path))
    return records


def prompt_messages(
    context: list[dict[str, Any]], *, keep: int | None, criteria_per_dimension: int
) -> list[dict[str, str]]:
    """The generator prompt for a context (its last ``keep`` messages) as chat message dicts.

    Examples:
        >>> msgs = prompt_messages([{"role": "user", "content": "hi"}], keep=8, criteria_per_dimension=2)
        >>> [m["role"] for m in msgs]
        ['system', 'user']
    """
    messages = [Message.model_validate(m) for m in context]
    if keep is not None:
        messages = messages[-keep:]
    return [m.model_dump() for m in generator_messages(messages, criteria_per_dimension)]


def load_model(name: str, dtype: str) -> tuple[Any, Any, Path]:
    """Load a causal LM and tokenizer for training: ``tiny``, ``bundled``, a model directory, a
    training output (its ``merged/``), or a LoRA adapter directory (merged into its base).
    """
    require_train()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(name)
    torch_dtype = getattr(torch, dtype)
    if (path / "adapter_config.json").exists() and not (path / "config.json").exists():
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype, local_files_only=True)
        model = model.merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer, path


def build_trl_config(cls: type[Any], defaults: dict[str, Any], overrides: dict[str, Any], source: str) -> Any:
    """Build a TRL config (``SFTConfig`` / ``GRPOConfig``) from defaults and the recipe's ``trl`` section.

    Raises:
        ConfigError: a key TRL does not know, or a value it rejects (the message names it).
    """
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"{source}: trl.{unknown[0]}: unknown key for {cls.__name__}")
    try:
        return cls(**{**defaults, **overrides})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: trl: {exc}") from exc


def lora_config(settings: Any) -> Any:
    """A PEFT ``LoraConfig`` for causal LMs from :class:`~care_sdk.training.config.LoraSettings`."""
    from peft import LoraConfig

    targets = settings.target_modules if isinstance(settings.target_modules, str) else list(settings.target_modules)
    layers = list(settings.layers_to_transform) if settings.layers_to_transform is not None else None
    return LoraConfig(
        layers_to_transform=layers,
        task_type="CAUSAL_LM",
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets,
    )


def save_outputs(
    trainer: Any, tokenizer: Any, output_dir: Path, *, merge: bool, log: Callable[[str], None]
) -> dict[str, str]:
    """Save the adapter (LoRA) and/or the merged model; returns the written directories by kind."""
    model = trainer.model
    written: dict[str, str] = {}
    if hasattr(model, "peft_config"):
        adapter = output_dir / "adapter"
        model.save_pretrained(str(adapter))
        tokenizer.save_pretrained(str(adapter))
        written["adapter"] = str(adapter)
        if merge:
            merged_model = model.merge_and_unload()
            merged = output_dir / "merged"
            merged_model.save_pretrained(str(merged))
            tokenizer.save_pretrained(str(merged))
            written["merged"] = str(merged)
    else:
        merged = output_dir / "merged"
        model.save_pretrained(str(merged))
        tokenizer.save_pretrained(str(merged))
        written["merged"] = str(merged)
    for kind, where in written.items():
        log(f"saved {kind}: {where}")
    return written


def check_dir(path: str, field: str) -> Path:
    """The output directory of a stage (created)."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{field}: cannot create {path}: {exc}") from exc
    return out
