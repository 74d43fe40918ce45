"""Shared fixtures: the real bundled model on llama.cpp and the shared data directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real dialogue data (../shared/data, or $CARE_DATA_DIR); skips when absent."""
    path = Path(os.environ.get("CARE_DATA_DIR", REPO.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.skip(f"shared data not found at {path} (set CARE_DATA_DIR)")
    return path


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
