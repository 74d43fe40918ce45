"""The bundled LoRA adapters of the default models, and what each records about its training.

An adapter is a GGUF LoRA file that llama.cpp applies on top of the bundled SmolLM2-135M-Instruct
(``lora_path``). Besides llama.cpp's own keys it records, under ``care.*``:

- ``care.role``: ``generator`` (or ``evaluator``);
- ``care.prompt_version``: the prompt version it was trained with (a mismatch is a
  :class:`~care_sdk.errors.ConfigError`, since the adapter only works with that prompt);
- ``care.max_context_messages``: how far back the context was cut in training (0: not cut), used
  as the inference setting too;
- ``care.base_model``: the base model file it was trained on; ``care.training``: a JSON summary of
  the run that made it.

The adapters shipped here were trained on ESConv, whose licence is CC BY-NC 4.0: they are for
non-commercial research use.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from care_sdk.backends.lora import AdapterInfo, gguf_metadata, read_adapter

__all__ = ["AdapterInfo", "bundled_adapter", "gguf_metadata", "read_adapter"]

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
