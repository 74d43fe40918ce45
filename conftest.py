"""Applies to the doctests under src/ and the tests under tests/.

The package reads data only from explicit paths or ``$CARE_DATA_DIR``; the tests and doctests of
this checkout use the data directory beside it (``../shared/data``) unless told otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("CARE_DATA_DIR", str(Path(__file__).resolve().parent.parent / "shared" / "data"))
