"""SFT on a tiny random SmolLM2-shaped model: finite decreasing loss, saved adapter and merged model
that reload into RubricGenerator through the transformers backend."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

from care_lab.training.config import SFTStageConfig
from care_lab.training.sft import load_trained_generator, run_sft
from care_sdk.errors import ConfigError, InputError

pytestmark = pytest.mark.slow  # real trainer steps (a tiny model, but TRL + PEFT end to end)


@pytest.fixture(scope="module")
def data_out(small_build_data: Callable[[int], Path]) -> Path:
    return small_build_data(2)


@pytest.fixture(scope="module")
def sft_out(tmp_path_factory: pytest.TempPathFactory, data_out: Path) -> tuple[Path, list[float]]:
    out = tmp_path_factory.mktemp("sft")
    config = SFTStageConfig(
        data=str(data_out / "sft" / "train.jsonl"),
        model="tiny",
        output_dir=str(out),
        max_examples=2,
        max_context_messages=2,
        lora={"r": 8, "alpha": 16, "dropout": 0.0},
        trl={"max_steps": 5, "per_device_train_batch_size": 2, "learning_rate": 1e-2, "max_length": 640},
    )
    result = run_sft(config, log=lambda s: None)
    return out, result.losses


def test_sft_loss_is_finite_and_decreases_on_a_repeated_batch(sft_out: tuple[Path, list[float]]) -> None:
    out, losses = sft_out
    assert len(losses) == 5
    assert all(loss == loss and loss < float("inf") for loss in losses)
    assert losses[-1] < losses[0]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["examples"] == 2 and metrics["losses"] == losses


def test_sft_saves_adapter_and_merged_model(sft_out: tuple[Path, list[float]]) -> None:
    out, _ = sft_out
    assert (out / "adapter" / "adapter_config.json").exists()
    assert (out / "merged" / "config.json").exists()
    assert (out / "merged" / "tokenizer_config.json").exists()


def test_adapter_and_merged_model_reload_into_rubric_generator(sft_out: tuple[Path, list[float]]) -> None:
    import torch

    from care_sdk.backends.hf import HFBackend
    from care_sdk.errors import OutputError

    out, _ = sft_out
    from_adapter = load_trained_generator(out / "adapter", max_tokens=16, max_attempts=1)
    from_merged = load_trained_generator(out, max_tokens=16, max_attempts=1)  # the output dir resolves to merged/
    assert isinstance(from_adapter.backend, HFBackend) and isinstance(from_merged.backend, HFBackend)
    # the adapter folded into its base gives the saved merged model's weights, not the base model's
    a = dict(from_adapter.backend.model.named_parameters())
    m = dict(from_merged.backend.model.named_parameters())
    assert a.keys() == m.keys()
    assert all(torch.allclose(a[k], m[k], atol=1e-5) for k in a)
    # a random model cannot finish a rubric in 16 tokens: the generator reports it as a typed error
    outcome = from_merged.generate_batch([[{"role": "user", "content": "I lost my job today."}]])[0]
    assert isinstance(outcome, OutputError) and outcome.attempts == 1


def test_sft_errors_name_the_problem(tmp_path: Path, data_out: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        run_sft(SFTStageConfig(data=str(tmp_path / "none.jsonl"), model="tiny", output_dir=str(tmp_path / "o")))
    with pytest.raises(ConfigError, match=r"trl\.max_stepz"):
        run_sft(
            SFTStageConfig(
                data=str(data_out / "sft" / "train.jsonl"),
                model="tiny",
                output_dir=str(tmp_path / "o"),
                trl={"max_stepz": 1},
            ),
            source="sft.yaml",
        )
