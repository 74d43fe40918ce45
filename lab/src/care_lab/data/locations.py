"""Where the datasets lie: an explicit path, else ``$CARE_DATA_DIR``; never a guess.

The package does not assume any checkout layout. A data directory holds one folder per dataset
(see :data:`DATASETS` and the data page of the docs); every file can also be given on its own.
A missing directory or file raises an error that names what is missing and where to get it.

Examples:
    >>> DATASETS["esconv"].folder
    'esconv'
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from care_sdk.errors import ConfigError, InputError

__all__ = ["DATASETS", "DATA_DIR_ENV", "Dataset", "data_dir", "require_data"]

DATA_DIR_ENV = "CARE_DATA_DIR"
"""The environment variable that names the data directory."""


@dataclass(frozen=True)
class Dataset:
    """One dataset of the data directory: its folder and where to get it.

    Examples:
        >>> DATASETS["sage_rlver"].source.startswith("Tencent/digitalhuman")
        True
    """

    folder: str
    """Its folder under the data directory."""
    title: str
    """What it is."""
    source: str
    """Where to get it (repository and path) and its licence."""


DATASETS: dict[str, Dataset] = {
    "esconv": Dataset(
        "esconv",
        "ESConv: train/valid/test.jsonl (the authors' re-release) and FailedESConv.json",
        "thu-coai/Emotional-Support-Conversation on GitHub and the thu-coai/esconv re-release (CC BY-NC 4.0)",
    ),
    "mint_lend_an_ear": Dataset(
        "mint_lend_an_ear",
        "Lend-an-Ear conversations, expert ratings, judged turns and MINT's 322 logged conversations",
        "honglizhan/mint-empathy on GitHub, folder data/ (MIT)",
    ),
    "empatheticdialogues_intents": Dataset(
        "empatheticdialogues_intents",
        "EmpatheticIntents: EmpatheticDialogues listener turns with listener intents (a test set)",
        "anuradha1992/EmpatheticIntents on GitHub (EmpatheticDialogues text: CC BY-NC 4.0)",
    ),
    "sage_rlver": Dataset(
        "sage_rlver",
        "SAGE/RLVER simulator profiles and rollouts (Chinese)",
        "Tencent/digitalhuman on GitHub, folder SAGE/ (MIT)",
    ),
}
"""The datasets the loaders, the recipes and the quality benchmark read, by folder name."""


def data_dir(path: str | Path | None = None) -> Path:
    """The data directory: ``path`` when given, else ``$CARE_DATA_DIR``.

    Raises:
        ConfigError: neither is set, or the directory does not exist; the message says how to
            set it and where to get the data.

    Examples:
        >>> import os, tempfile
        >>> root = tempfile.mkdtemp()
        >>> data_dir(root) == Path(root)
        True
        >>> before = os.environ.get("CARE_DATA_DIR")
        >>> os.environ["CARE_DATA_DIR"] = root
        >>> data_dir() == Path(root)
        True
        >>> _ = os.environ.pop("CARE_DATA_DIR") if before is None else os.environ.update(CARE_DATA_DIR=before)
    """
    if path is None or str(path) == "":
        raw = os.environ.get(DATA_DIR_ENV, "").strip()
        if not raw:
            raise ConfigError(
                f"no data directory: pass one (data_dir=... or --data-dir) or set {DATA_DIR_ENV} to the "
                f"folder holding {', '.join(d + '/' for d in DATASETS)}; {_where_to_get()}"
            )
        path, origin = raw, f"${DATA_DIR_ENV}"
    else:
        origin = "the data directory"
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ConfigError(f"{origin} {root} is not a directory; {_where_to_get()}")
    return root


def require_data(path: Path, dataset: str | None = None, *, option: str | None = None) -> Path:
    """Return ``path`` when it exists, else raise an error naming the file, its dataset and source.

    Raises:
        InputError: ``path`` does not exist.

    Examples:
        >>> require_data(Path("/nowhere/esconv/test.jsonl"), "esconv")
        Traceback (most recent call last):
        ...
        care_sdk.errors.InputError: /nowhere/esconv/test.jsonl: missing ...
    """
    if path.exists():
        return path
    message = "missing"
    if dataset in DATASETS:
        info = DATASETS[dataset]
        message += f" ({info.title}; get it from {info.source})"
    if option:
        message += f"; or give the file with {option}"
    raise InputError(message, location=str(path))


def _where_to_get() -> str:
    return "the data layout and sources are listed on the docs' data page (docs/data.md)"
