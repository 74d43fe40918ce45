"""Shared trainer wiring: reading build-data records, prompts, models, TRL configs, reward logs, saving."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from care_lab.data.roles import require_role
from care_lab.training.models import require_train, resolve_model
from care_sdk.errors import ConfigError, InputError
from care_sdk.jsonl import read_jsonl
from care_sdk.prompts import evaluator_messages, generator_messages
from care_sdk.types import Rubric, as_messages

__all__ = [
    "GRPO_DEFAULTS",
    "GRPORunResult",
    "TrainerStage",
    "build_trl_config",
    "evaluator_prompt_messages",
    "load_model",
    "make_trainer",
    "prompt_messages",
    "read_records",
    "reward_log",
    "save_outputs",
    "stage_setup",
    "with_train_sampler",
    "write_run_files",
]

GRPO_DEFAULTS: dict[str, Any] = {
    "report_to": "none",
    "save_strategy": "no",
    "logging_steps": 1,
    "num_generations": 4,
    "per_device_train_batch_size": 4,
    "max_completion_length": 256,
    "learning_rate": 1e-5,
    "temperature": 1.0,
    "beta": 0.0,
    "dataloader_num_workers": 0,
    "gradient_checkpointing": False,
    "seed": 0,
}
"""GRPOConfig values both GRPO stages (preference and policy) use unless the recipe's ``trl`` section
sets them."""


class TrainerStage(Protocol):
    """What :func:`stage_setup` and :func:`make_trainer` read from a trainer stage's config."""

    @property
    def output_dir(self) -> str:
        """Where the stage writes."""
        ...

    @property
    def dtype(self) -> str:
        """Model weights dtype."""
        ...

    @property
    def trl(self) -> dict[str, Any]:
        """The TRL config overrides."""
        ...

    @property
    def finetune(self) -> str:
        """``lora`` or ``full``."""
        ...

    @property
    def lora(self) -> Any:
        """The :class:`~care_lab.training.config.LoraSettings`."""
        ...


@dataclass
class GRPORunResult:
    """What a GRPO run produced; pref-GRPO's and policy-GRPO's results extend it.

    Examples:
        >>> GRPORunResult(output_dir="runs/grpo", rewards=[{"step": 1.0, "reward": 0.5}]).rewards[0]["reward"]
        0.5
    """

    output_dir: str
    """The run's output directory."""
    rewards: list[dict[str, float]] = field(default_factory=list)
    """Per logged step: ``step``, the mean of each reward term, TRL's ``reward`` (see the run's own result)."""
    saved: dict[str, str] = field(default_factory=dict)
    """Written model directories: ``adapter`` and/or ``merged``."""


def read_records(path: str | Path, kind: str, split: str = "train", limit: int | None = None) -> list[dict[str, Any]]:
    """Read build-data records: a JSONL file, or ``<dir>/<kind>/<split>.jsonl`` under a build-data output.

    Every read goes through the role guard (:func:`~care_lab.data.roles.require_role`): with
    ``split="train"`` the records are about to be fitted on (``train`` only); any other split
    (``valid``: SFT's ``eval_data``, for early stopping and choosing a checkpoint) is a selection
    read (``train`` or ``selection``). ``test`` and ``eval-only`` data are refused either way.

    Raises:
        InputError: the file is missing, a line is not JSON, it holds no records, or its role
            (or a record's) does not allow the read (or is not declared at all).
    """
    path = Path(path)
    if path.is_dir():
        path = path / kind / f"{split}.jsonl"
    if not path.is_file():
        raise InputError("no such file (run `care train build-data` first?)", location=str(path))
    records = read_jsonl(path, limit=limit)
    if not records:
        raise InputError("no records", location=str(path))
    if split == "train":
        require_role(path, "fit", records=records, what="training data")
    else:
        require_role(path, "select", records=records, what="selection data")
    return records


def prompt_messages(
    context: list[dict[str, Any]], *, keep: int | None, criteria_per_dimension: int
) -> list[dict[str, str]]:
    """The generator prompt for a context cut to its last ``keep`` messages (the prompt still states
    the reply's position), as chat message dicts: exactly what :class:`~care_sdk.RubricGenerator`
    sends with ``max_context_messages=keep``.

    Examples:
        >>> msgs = prompt_messages([{"role": "user", "content": "hi"}], keep=8, criteria_per_dimension=2)
        >>> [m["role"] for m in msgs]
        ['system', 'user']
    """
    messages = as_messages(context)
    return [m.model_dump() for m in generator_messages(messages, criteria_per_dimension, max_context_messages=keep)]


def evaluator_prompt_messages(
    context: list[dict[str, Any]], rubric: dict[str, Any], reply: str, *, keep: int | None
) -> list[dict[str, str]]:
    """The evaluator prompt for ``reply`` under ``rubric``, the context cut to its last ``keep``
    messages, as chat message dicts: exactly what :class:`~care_sdk.RubricEvaluator` sends with
    ``max_context_messages=keep``.

    Examples:
        >>> from care_sdk.types import Rubric
        >>> msgs = evaluator_prompt_messages([{"role": "user", "content": "hi"}],
        ...                                  Rubric.uniform_fixed().model_dump(mode="json"), "Hello!", keep=4)
        >>> [m["role"] for m in msgs]
        ['system', 'user']
    """
    messages = as_messages(context)
    parsed = Rubric.model_validate(rubric)
    return [m.model_dump() for m in evaluator_messages(messages, parsed, reply, max_context_messages=keep)]


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
    """A PEFT ``LoraConfig`` for causal LMs from :class:`~care_lab.training.config.LoraSettings`."""
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


def stage_setup(
    trainer: Literal["sft", "grpo"], config: TrainerStage, defaults: Mapping[str, Any], source: str
) -> tuple[Path, Any]:
    """Check the ``train`` extra, create the stage's output directory and build its TRL config.

    The config is ``SFTConfig`` or ``GRPOConfig`` (by ``trainer``) from ``defaults``, the output
    and dtype settings, and the stage's ``trl`` section; returns the output directory and the config.

    Raises:
        MissingDependencyError: the ``train`` extra is missing.
        ConfigError: the output directory cannot be created, or an invalid ``trl`` key or value (named).
    """
    require_train()
    config_class: type[Any]
    if trainer == "sft":
        from trl.trainer.sft_config import SFTConfig

        config_class = SFTConfig
    else:
        from trl.trainer.grpo_config import GRPOConfig

        config_class = GRPOConfig
    out = check_dir(config.output_dir, "output_dir")
    values = {**defaults, "output_dir": str(out / "trainer"), "bf16": config.dtype == "bfloat16"}
    return out, build_trl_config(config_class, values, config.trl, source)


def with_train_sampler(trainer_class: type[Any], make_sampler: Callable[[Any, Any], Any]) -> type[Any]:
    """A subclass of a TRL trainer whose training sampler is ``make_sampler(trainer, dataset)``.

    It overrides ``_get_train_sampler``, the one method ``GRPOTrainer`` builds its ``RepeatSampler``
    in; everything else (generation, reuse across iterations, the loss) is TRL's.

    Examples:
        >>> class Base:
        ...     train_dataset = [1, 2]
        ...     def _get_train_sampler(self, dataset=None): return "repeat"
        >>> Sub = with_train_sampler(Base, lambda trainer, dataset: f"boundary over {len(dataset)}")
        >>> Sub()._get_train_sampler(), Sub.__name__
        ('boundary over 2', 'Base')
    """

    def _get_train_sampler(self: Any, dataset: Any = None) -> Any:
        return make_sampler(self, dataset if dataset is not None else self.train_dataset)

    return type(trainer_class.__name__, (trainer_class,), {"_get_train_sampler": _get_train_sampler})


def make_trainer(
    trainer: Literal["sft", "grpo"],
    config: TrainerStage,
    model: Any,
    tokenizer: Any,
    args: Any,
    rows: list[dict[str, Any]],
    *,
    eval_rows: list[dict[str, Any]] | None = None,
    **options: Any,
) -> Any:
    """TRL's ``SFTTrainer`` or ``GRPOTrainer`` (by ``trainer``) on ``rows`` (and ``eval_rows``, when
    any), with the stage's LoRA adapters under ``finetune: lora``; ``options`` go to the trainer as they
    are, except ``train_sampler``: ``make(trainer, dataset)`` building the training sampler (see
    :func:`with_train_sampler`)."""
    from datasets import Dataset

    train_sampler = options.pop("train_sampler", None)

    if eval_rows:
        options["eval_dataset"] = Dataset.from_list(eval_rows)

    trainer_class: type[Any]
    if trainer == "sft":
        from trl.trainer.sft_trainer import SFTTrainer

        trainer_class = SFTTrainer
    else:
        from trl.trainer.grpo_trainer import GRPOTrainer

        trainer_class = GRPOTrainer
    if train_sampler is not None:
        trainer_class = with_train_sampler(trainer_class, train_sampler)
    return trainer_class(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=lora_config(config.lora) if config.finetune == "lora" else None,
        **options,
    )


def reward_log(
    log_history: Sequence[Mapping[str, Any]], terms: Sequence[str], *, metrics_prefix: str | None = None
) -> list[dict[str, float]]:
    """The reward terms per logged step of TRL's ``log_history``.

    A row holds ``step``, the mean of each term (``rewards/<term>/mean``), TRL's ``reward`` (NaN when
    not logged) and every number whose key starts with ``metrics_prefix``; entries without the
    first term's mean (e.g. the final summary) are skipped.

    Examples:
        >>> history = [{"step": 1, "rewards/a/mean": 0.5, "reward": 0.5, "care/x": 2}, {"train_loss": 1.0}]
        >>> reward_log(history, ["a"], metrics_prefix="care/")
        [{'step': 1.0, 'a': 0.5, 'reward': 0.5, 'care/x': 2.0}]
    """
    out: list[dict[str, float]] = []
    for entry in log_history:
        if entry.get(f"rewards/{terms[0]}/mean") is None:
            continue
        row = {"step": float(entry.get("step", len(out) + 1))}
        for term in terms:
            row[term] = float(entry[f"rewards/{term}/mean"])
        row["reward"] = float(entry.get("reward", float("nan")))
        if metrics_prefix is not None:
            for key, value in entry.items():
                if key.startswith(metrics_prefix) and isinstance(value, int | float):
                    row[key] = float(value)
        out.append(row)
    return out


def write_run_files(
    out: Path,
    metrics: Mapping[str, Any],
    log_history: Sequence[Mapping[str, Any]],
    rewards: Sequence[Mapping[str, float]] | None = None,
) -> None:
    """Write ``rewards.jsonl`` (with ``rewards``) and ``metrics.json``: ``metrics`` then TRL's ``log_history``.

    Values JSON cannot hold are written as strings.
    """
    if rewards is not None:
        with (out / "rewards.jsonl").open("w", encoding="utf-8") as fh:
            for row in rewards:
                fh.write(json.dumps(row) + "\n")
    document = {**metrics, "log_history": log_history}
    (out / "metrics.json").write_text(json.dumps(document, indent=2, default=str), encoding="utf-8")
