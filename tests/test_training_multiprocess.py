"""The recipes under ``accelerate launch --num_processes 2`` on a CPU: SFT and pref-GRPO smoke runs on
the tiny model, through the ``care train`` command, as a user launches them at scale.

Accelerate's own ``--cpu`` launcher starts several CPU processes only through ``mpirun``; its
torchrun launcher (``--multi_gpu``) starts them anywhere, and ``trl: {use_cpu: true}`` makes the
trainer's accelerate state a multi-CPU one on gloo."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("accelerate")

pytestmark = pytest.mark.slow  # two real training processes per run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(stage: str, tmp_path: Path, data: Path, settings: str) -> subprocess.CompletedProcess[str]:
    """``care train STAGE`` on 2 processes, with the tiny model, LoRA and ``settings`` (YAML lines)."""
    config = tmp_path / f"{stage}.yaml"
    config.write_text(
        f"data: {data}\nmodel: tiny\noutput_dir: {tmp_path / stage}\nlora: {{r: 4, alpha: 8, dropout: 0.0}}\n"
        f"max_context_messages: 2\n{settings}"
    )
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    command = [
        accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "--main_process_ip", "127.0.0.1", "--main_process_port", str(_free_port()),
        "-m", "care_sdk.cli", "train", stage, "--config", str(config), "--min-steps", "0",
    ]  # fmt: skip
    # unbuffered: a print's text reaches the shared pipe in one write, which the other rank cannot cut
    # (block-buffered, each rank flushed 8 KiB chunks that ended anywhere, mid-line included)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1", "PYTHONUNBUFFERED": "1"}
    sources = [str(Path(__file__).parents[1] / folder) for folder in ("src", "lab/src")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in [*sources, env.get("PYTHONPATH")] if p)
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    (tmp_path / f"{stage}.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


@pytest.fixture(scope="module")
def data(small_build_data: Callable[[int], Path]) -> Path:
    from care_lab.training.models import tiny_model_dir

    tiny_model_dir()  # built once here, so the two ranks find it cached
    return small_build_data(3)


def test_sft_on_two_processes(tmp_path: Path, data: Path) -> None:
    trl = "trl: {num_train_epochs: 1, per_device_train_batch_size: 1, max_length: 640, use_cpu: true}\n"
    done = _launch("sft", tmp_path, data, trl)
    # both ranks print the plan: 1 x 1 x 2 processes = 2 samples per step, 4 records -> 2 steps per epoch
    assert done.stdout.count("sft plan: 4 rows, 2 processes: 2 samples per optimiser step, 2 steps per epoch") == 2
    metrics = json.loads((tmp_path / "sft" / "metrics.json").read_text())
    assert len(metrics["losses"]) == 2 and all(x == x for x in metrics["losses"])  # the trainer ran the plan
    assert (tmp_path / "sft" / "adapter" / "adapter_config.json").exists()


def test_pref_grpo_on_two_processes_computes_rewards_on_every_rank(tmp_path: Path, data: Path) -> None:
    settings = (
        "evaluator: default\nevaluator_max_attempts: 1\n"
        "trl: {max_steps: 2, num_generations: 2, per_device_train_batch_size: 2, max_completion_length: 16,\n"
        "      use_cpu: true}\n"
    )
    done = _launch("pref-grpo", tmp_path, data, settings)
    # 2 per device x 2 processes = 4 completions per step: 2 contexts x 2 rubrics, one context per rank
    assert (
        done.stdout.count("grpo plan: ") == 2 and "4 samples per optimiser step (2 rows x 2 generations)" in done.stdout
    )
    rewards = [json.loads(line) for line in (tmp_path / "pref-grpo" / "rewards.jsonl").read_text().splitlines()]
    assert len(rewards) == 2
    for step in rewards:
        assert {"format", "r_pref", "r_align", "reward"} <= set(step)
        assert all(0.0 <= step[t] <= 1.0 for t in ("format", "r_pref", "r_align"))
    # each rank built its own reward functions and frozen evaluator (and computed its completions' rewards)
    # (counted as text, not as whole lines: two ranks' prints can still share a line)
    assert len(re.findall(r"pref-grpo: \d+ pairs, model .+?, evaluator ", done.stdout)) == 2
