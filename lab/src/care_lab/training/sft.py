"""``care train sft``: supervised fine-tuning of the rubric generator on (context → target rubric JSON).

TRL's ``SFTTrainer`` on prompt-completion records in conversational form: the prompt is the
generator prompt of :mod:`care_sdk.prompts` (rendered with the model's chat template), the
completion is the target rubric JSON; the loss covers the completion only. LoRA through PEFT by
default, full fine-tuning as an option. Saves ``adapter/`` (LoRA) and ``merged/``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from care_lab.training._common import (
    evaluator_prompt_messages,
    load_model,
    make_trainer,
    prompt_messages,
    read_records,
    save_outputs,
    stage_setup,
    write_run_files,
)
from care_lab.training.config import SFTStageConfig

if TYPE_CHECKING:
    from care_sdk.generator import RubricGenerator

__all__ = ["SFT_DEFAULTS", "SFTResult", "load_trained_generator", "run_sft", "sft_rows"]

SFT_DEFAULTS: dict[str, Any] = {
    "report_to": "none",
    "save_strategy": "no",
    "logging_steps": 1,
    "max_length": 1536,
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "learning_rate": 2e-4,
    "num_train_epochs": 1,
    "completion_only_loss": True,
    "dataloader_num_workers": 0,
    "gradient_checkpointing": False,
    "seed": 0,
}
"""SFTConfig values used unless the recipe's ``trl`` section sets them."""


@dataclass
class SFTResult:
    """What an SFT run produced.

    Examples:
        >>> SFTResult(output_dir="runs/sft", losses=[2.0, 1.5]).final_loss
        1.5
    """

    output_dir: str
    """The stage's output directory."""
    losses: list[float] = field(default_factory=list)
    """Training loss at every logged step."""
    saved: dict[str, str] = field(default_factory=dict)
    """Written model directories: ``adapter`` and/or ``merged``."""
    examples: int = 0
    """Training records used."""

    @property
    def final_loss(self) -> float | None:
        """The last logged loss."""
        return self.losses[-1] if self.losses else None


def sft_rows(
    records: list[dict[str, Any]], *, keep: int | None, criteria_per_dimension: int, role: str = "generator"
) -> list[dict[str, Any]]:
    """Turn build-data SFT records into TRL prompt-completion rows (conversational).

    ``role="evaluator"`` records carry ``rubric`` and ``reply`` too, and get the evaluator prompt,
    rendered as :class:`~care_sdk.RubricEvaluator` renders it with ``max_context_messages=keep``.

    Examples:
        >>> rows = sft_rows([{"context": [{"role": "user", "content": "hi"}], "target": "{}"}],
        ...                 keep=8, criteria_per_dimension=2)
        >>> rows[0]["completion"]
        [{'role': 'assistant', 'content': '{}'}]
        >>> from care_sdk.types import Rubric
        >>> record = {"context": [{"role": "user", "content": "hi"}], "reply": "Hello!", "target": "{}",
        ...           "rubric": Rubric.uniform_fixed().model_dump(mode="json")}
        >>> row = sft_rows([record], keep=4, criteria_per_dimension=2, role="evaluator")[0]
        >>> "Hello!" in row["prompt"][1]["content"]
        True
    """
    from care_sdk.errors import InputError

    needed = ("context", "rubric", "reply", "target") if role == "evaluator" else ("context", "target")
    rows = []
    for i, record in enumerate(records):
        missing = [k for k in needed if k not in record]
        if missing:
            raise InputError(
                f"a {role} SFT record needs {', '.join(needed)}; missing {', '.join(missing)}", location=f"record {i}"
            )
        if role == "evaluator":
            prompt = evaluator_prompt_messages(record["context"], record["rubric"], record["reply"], keep=keep)
        else:
            prompt = prompt_messages(record["context"], keep=keep, criteria_per_dimension=criteria_per_dimension)
        rows.append({"prompt": prompt, "completion": [{"role": "assistant", "content": record["target"]}]})
    return rows


def run_sft(config: SFTStageConfig, *, source: str = "sft config", log: Callable[[str], None] = print) -> SFTResult:
    """Run the SFT stage and save its outputs under ``config.output_dir``.

    A run whose TRL config saves checkpoints (``save_strategy: steps``) resumes from the latest
    checkpoint under ``output_dir/trainer`` when it is started again after an interruption.

    Raises:
        MissingDependencyError: the ``train`` extra is missing.
        ConfigError: an invalid ``trl`` key or value (named).
        InputError: the data file is missing or malformed.
    """
    out, args = stage_setup("sft", config, SFT_DEFAULTS, source)
    records = read_records(config.data, "sft", "train", config.max_examples)
    rows = sft_rows(
        records,
        keep=config.max_context_messages,
        criteria_per_dimension=config.criteria_per_dimension,
        role=config.role,
    )
    eval_rows = None
    if config.eval_data:
        eval_records = read_records(config.eval_data, "sft", "valid")
        eval_rows = sft_rows(
            eval_records,
            keep=config.max_context_messages,
            criteria_per_dimension=config.criteria_per_dimension,
            role=config.role,
        )
    model, tokenizer, model_path = load_model(config.model, config.dtype)
    log(f"sft: {len(rows)} records, model {model_path}, {config.finetune}")
    trainer = make_trainer("sft", config, model, tokenizer, args, rows, eval_rows=eval_rows)
    checkpoints = sorted(Path(args.output_dir).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    if checkpoints:
        log(f"sft: resuming from {checkpoints[-1]}")
    trainer.train(resume_from_checkpoint=str(checkpoints[-1]) if checkpoints else None)
    losses = [float(h["loss"]) for h in trainer.state.log_history if "loss" in h]
    if any(not math.isfinite(x) for x in losses):
        log(f"sft: warning: non-finite loss logged: {losses}")
    saved = save_outputs(trainer, tokenizer, out, merge=config.merge, log=log)
    metrics = {"losses": losses, "saved": saved, "examples": len(rows), "base_model": str(model_path)}
    write_run_files(out, metrics, trainer.state.log_history)
    return SFTResult(output_dir=str(out), losses=losses, saved=saved, examples=len(rows))


def load_trained_generator(path: str | Path, **generator_options: Any) -> RubricGenerator:
    """A :class:`~care_sdk.RubricGenerator` on a trained generator, through the transformers backend.

    ``path`` is a merged model directory, a LoRA adapter directory (loaded onto its base model),
    or a training output directory (its ``merged/``, else its ``adapter/``).

    Examples:
        >>> gen = load_trained_generator("runs/sft/adapter")  # doctest: +SKIP
        >>> gen.generate("I lost my job.").top_dimension  # doctest: +SKIP
    """
    from care_sdk.backends.hf import HFBackend
    from care_sdk.generator import RubricGenerator

    path = Path(path)
    if not (path / "config.json").exists() and not (path / "adapter_config.json").exists():
        path = path / "merged" if (path / "merged" / "config.json").exists() else path / "adapter"
    backend_options = {k: generator_options.pop(k) for k in ("device", "batch_size") if k in generator_options}
    if (path / "adapter_config.json").exists() and not (path / "config.json").exists():
        model, tokenizer, _ = load_model(str(path), "float32")
        backend = HFBackend(model=model, tokenizer=tokenizer, **backend_options)
    else:
        backend = HFBackend(str(path), **backend_options)
    return RubricGenerator(backend, **generator_options)
