"""``care train pref-grpo``: preference GRPO of the rubric generator, starting from the SFT output.

TRL's ``GRPOTrainer`` samples G rubrics per context; three reward functions score each, and TRL
logs each separately (``rewards/format/mean``, ``rewards/r_pref/mean``, ``rewards/r_align/mean``):

- ``format``: the completion parses and validates as a rubric;
- ``r_pref``: the frozen evaluator scores the preferred and dispreferred replies under the
  sampled rubric; 1 when the preferred one scores higher;
- ``r_align``: the rubric's weights against the preferred reply's strategy counts.

A failed evaluation makes the whole completion unscorable: every term is ``None`` for it and
TRL masks it out of the loss (:class:`~care_lab.training.rewards.PrefGRPORewards`); it never
counts as 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from care_lab.training._common import (
    GRPO_DEFAULTS,
    GRPORunResult,
    load_model,
    make_trainer,
    prompt_messages,
    read_records,
    reward_log,
    save_outputs,
    stage_setup,
    write_run_files,
)
from care_lab.training.config import PrefGRPOConfig
from care_lab.training.rewards import PrefGRPORewards
from care_sdk.types import as_messages

__all__ = ["GRPO_DEFAULTS", "REWARD_TERMS", "PrefGRPOResult", "grpo_rows", "run_pref_grpo"]

REWARD_TERMS = ("format", "r_pref", "r_align")
"""The reward terms, in the order they are passed to TRL."""


@dataclass
class PrefGRPOResult(GRPORunResult):
    """What a pref-GRPO run produced: the stage's ``output_dir``, the ``saved`` model directories, and
    per logged step the mean of each reward term (``format``, ``r_pref``, ``r_align``) and ``reward``.

    Examples:
        >>> PrefGRPOResult(output_dir="runs/grpo", rewards=[{"step": 1, "r_align": 0.5}]).rewards[0]["r_align"]
        0.5
    """


def grpo_rows(records: list[dict[str, Any]], *, keep: int | None, criteria_per_dimension: int) -> list[dict[str, Any]]:
    """Turn build-data pair records into GRPO rows: ``prompt`` plus the columns the rewards read.

    Examples:
        >>> row = grpo_rows([{"context": [{"role": "user", "content": "hi"}], "chosen": "a", "rejected": "b",
        ...                   "chosen_strategy_counts": {"cognitive": 1, "affective": 0, "proactive": 0}}],
        ...                 keep=8, criteria_per_dimension=2)[0]
        >>> sorted(row)
        ['chosen', 'chosen_strategy_counts', 'context', 'prompt', 'rejected']
    """
    rows = []
    for i, record in enumerate(records):
        missing = [k for k in ("context", "chosen", "rejected", "chosen_strategy_counts") if k not in record]
        if missing:
            from care_sdk.errors import InputError

            raise InputError(f"a pair record needs {', '.join(missing)}", location=f"record {i}")
        full = [m.model_dump() for m in as_messages(record["context"])]
        context = full[-keep:] if keep is not None else full
        rows.append(
            {
                "prompt": prompt_messages(full, keep=keep, criteria_per_dimension=criteria_per_dimension),
                "context": context,
                "chosen": record["chosen"],
                "rejected": record["rejected"],
                "chosen_strategy_counts": record["chosen_strategy_counts"],
            }
        )
    return rows


def run_pref_grpo(
    config: PrefGRPOConfig,
    *,
    evaluator: Any = None,
    source: str = "pref-grpo config",
    log: Callable[[str], None] = print,
    callbacks: list[Any] | None = None,
) -> PrefGRPOResult:
    """Run preference GRPO and save the generator under ``config.output_dir``.

    Args:
        config: the stage's settings.
        evaluator: a ready :class:`~care_sdk.RubricEvaluator` to use instead of building one
            from ``config.evaluator`` (e.g. one shared with other code).
        source: the config's origin, for error messages.
        log: where progress lines go.
        callbacks: extra ``transformers.TrainerCallback`` objects.

    Raises:
        MissingDependencyError: the ``train`` extra is missing.
        ConfigError: an invalid ``trl`` key or value (named).
        InputError: the data file is missing or malformed.
    """
    given: dict[str, float] = {str(k): v for k, v in config.reward_weights.items()}
    weights = [float(given.get(term, 1.0)) for term in REWARD_TERMS]
    out, args = stage_setup("grpo", config, {**GRPO_DEFAULTS, "reward_weights": weights}, source)
    from care_sdk.evaluator import RubricEvaluator

    records = read_records(config.data, "pairs", "train", config.max_examples)
    rows = grpo_rows(records, keep=config.max_context_messages, criteria_per_dimension=config.criteria_per_dimension)
    if evaluator is None:
        evaluator = RubricEvaluator(
            config.evaluator, max_tokens=config.evaluator_max_tokens, max_attempts=config.evaluator_max_attempts
        )
    model, tokenizer, model_path = load_model(config.model, config.dtype)
    log(f"pref-grpo: {len(rows)} pairs, model {model_path}, evaluator {evaluator!r}")
    reward_funcs = PrefGRPORewards(
        evaluator, criteria_per_dimension=config.criteria_per_dimension, tie=config.tie
    ).terms()
    trainer = make_trainer("grpo", config, model, tokenizer, args, rows, reward_funcs=reward_funcs, callbacks=callbacks)
    trainer.train()
    rewards = reward_log(trainer.state.log_history, REWARD_TERMS)
    saved = save_outputs(trainer, tokenizer, out, merge=config.merge, log=log)
    metrics = {"rewards": rewards, "saved": saved, "base_model": str(model_path)}
    write_run_files(out, metrics, trainer.state.log_history, rewards)
    return PrefGRPOResult(output_dir=str(out), rewards=rewards, saved=saved)
