"""Shared fixtures: the real bundled model on llama.cpp, the shared data directory and build-data outputs."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real dialogue data ($CARE_DATA_DIR, by default ../shared/data); skips when absent."""
    path = Path(os.environ["CARE_DATA_DIR"])  # set by the conftest.py at the repository root
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path} (set CARE_DATA_DIR)")
    return path


@pytest.fixture(scope="session")
def small_build_data(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Callable[[int], Path]:
    """``build(max_dialogues)``: a build-data output directory from that many ESConv train dialogues
    (at most 4 SFT targets, no model called: no teacher, judges or annotator; off-context pairs,
    whose chosen reply carries its labels), built once per count."""
    built: dict[int, Path] = {}

    def build(max_dialogues: int) -> Path:
        if max_dialogues not in built:
            from care_lab.training.build_data import build_data
            from care_lab.training.config import BuildDataConfig

            out = tmp_path_factory.mktemp("data")
            config = BuildDataConfig(
                output_dir=str(out),
                data_dir=str(data_dir),
                esconv_splits=("train",),
                use_mint=False,
                max_dialogues=max_dialogues,
                max_turns=4,
                teacher=None,
                target_judges=None,
                judges=None,
                annotator=None,
                offcontext_pairs=True,
            )
            build_data(config, log=lambda s: None)
            built[max_dialogues] = out
        return built[max_dialogues]

    return build


@pytest.fixture(scope="session")
def model_path() -> Path:
    """The bundled SmolLM2-135M-Instruct GGUF."""
    from care_sdk.backends.llamacpp import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def llama_backend(model_path: Path) -> Iterator[object]:
    """One real llama.cpp backend on the bundled model, shared by the session."""
    from care_sdk.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend(model_path, n_ctx=4096)
    yield backend
    backend.close()


@pytest.fixture
def examples_file() -> Path:
    return REPO / "examples" / "dialogues.jsonl"
