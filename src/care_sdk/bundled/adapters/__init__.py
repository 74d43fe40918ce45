"""The bundled LoRA adapters of the default models, and what each records about its training.

Each is a GGUF LoRA file on top of the bundled SmolLM2-135M-Instruct, in the format
:mod:`care_sdk.backends.lora` describes (role, prompt version, context cut, base model, training
summary under ``care.*``).

The adapters shipped here were trained on ESConv, whose licence is CC BY-NC 4.0: they are for
non-commercial research use.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["bundled_adapter"]

_BUNDLED = {"generator": "generator.gguf", "evaluator": "evaluator.gguf"}


def bundled_adapter(role: str) -> Path | None:
    """The adapter shipped in the package for ``role`` (``None`` when this build ships none).

    Examples:
        >>> bundled_adapter("generator").name  # doctest: +SKIP
        'generator.gguf'
    """
    name = _BUNDLED.get(role)
    if name is None:
        return None
    path = Path(str(resources.files(__package__).joinpath(name)))
    return path if path.is_file() else None
