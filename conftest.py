"""Applies to the doctests under src/ and the tests under tests/.

The package reads data only from explicit paths or ``$CARE_DATA_DIR``; the tests and doctests of
this checkout use the data directory beside it (``../shared/data``) unless told otherwise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("CARE_DATA_DIR", str(Path(__file__).resolve().parent.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def _transformers_masking_unpatched() -> Iterator[None]:
    """``import art`` (openpipe-art 0.5) replaces ``transformers.masking_utils._preprocess_mask_arguments``
    process-wide with a function of the older signature, which breaks every transformers model loaded
    after it; the ART tests import it, so each test ends with the original put back."""
    yield
    patches = sys.modules.get("art.transformers.patches")
    masking = sys.modules.get("transformers.masking_utils")
    if patches is not None and masking is not None:
        masking._preprocess_mask_arguments = patches._preprocess_mask_arguments  # type: ignore[attr-defined]
