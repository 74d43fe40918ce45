"""A weights head: rubric weights read from the model's own hidden states of the generator's prompt.

A generator writes its weights as text, and a small model that writes them learns little more than
the turn position (see the bundled generator's docs page). The same model's hidden states of what
the generator reads carry more: a linear reader on them beats the position. :class:`WeightsHead` is
that reader, shipped beside the generator adapter. For a context it:

1. takes the user message of the generator prompt (:func:`~care_sdk.prompts.generator_messages`,
   cut to the head's ``max_context_messages``: the position line and the last messages);
2. asks the backend for ``hidden_states[layer]`` averaged over that text's tokens
   (:meth:`~care_sdk.backends.HiddenStates.hidden_state_means`; llama.cpp computes the layers up to
   ``layer`` and stops);
3. standardises it, puts the supporter-turn number one-hot beside it (capped at
   ``position_cap``), and applies a multinomial logistic regression: the three probabilities that
   each dimension is the reference reply's top one are the rubric's weights.

The criteria are still the ones the generator writes. The head is fitted by
``care train weights-head`` (:mod:`care_lab.training.weights_head`) and saved as JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from care_sdk.backends.base import HiddenStates
from care_sdk.errors import BackendError, ConfigError, ContextOverflowError
from care_sdk.prompts import GENERATOR_PROMPT_VERSION, generator_messages, generator_position
from care_sdk.types import DIMENSIONS, Context, Dimension, Message, as_messages

__all__ = ["WeightsHead", "bundled_weights_head", "head_text"]

_BUNDLED = "generator_head.json"


def head_text(context: Sequence[Message], max_context_messages: int | None) -> str:
    """What a weights head reads of ``context``: the generator prompt's user message, cut to the last
    ``max_context_messages`` messages. Fitting (:mod:`care_lab.training.weights_head`) and reading use it alike.

    Examples:
        >>> head_text([Message(role="user", content="I failed my exam.")], 4).splitlines()[0]
        'Position: supporter turn 1, after 1 messages.'
    """
    return generator_messages(context, max_context_messages=max_context_messages)[1].content


@dataclass(frozen=True)
class WeightsHead:
    """A linear reader of rubric weights on one layer's mean hidden state (see the module docstring).

    Attributes are plain lists so the head saves as JSON (:meth:`save`, :meth:`load`).

    Examples:
        >>> rows = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]  # the two state features
        >>> rows += [[0.0, 0.0, 0.0], [0.0, 0.0, 2.0], [0.0, 0.0, 0.0]]  # positions 0, 1, 2
        >>> rows += [[0.0, 0.0, 0.0]]  # the bias
        >>> head = WeightsHead(layer=1, position_cap=2, mean=[0.0, 0.0], scale=[1.0, 1.0], coef=rows)
        >>> {d.value: round(w, 3) for d, w in head.weights_from_state([3.0, 0.0], position=1).items()}
        {'cognitive': 0.705, 'affective': 0.035, 'proactive': 0.259}
        >>> roles = ["user", "assistant", "user", "assistant", "user"]
        >>> head.position_of([Message(role=r, content="...") for r in roles])  # turn 3, capped at 2
        2
    """

    layer: int
    """Which hidden state is read: ``hidden_states[layer]``, the output of the first ``layer`` decoder layers."""
    position_cap: int
    """Supporter-turn numbers from this one on share one position feature."""
    mean: list[float]
    """Per-feature mean of the training states (subtracted first)."""
    scale: list[float]
    """Per-feature standard deviation of the training states (divided by next)."""
    coef: list[list[float]]
    """One row per input (the standardised state, then positions 0 to ``position_cap``, then the
    bias), one column per dimension in :data:`~care_sdk.types.DIMENSIONS` order."""
    max_context_messages: int | None = 4
    """The messages of the context the prompt text shows (``None``: all), as in training."""
    prompt_version: str = GENERATOR_PROMPT_VERSION
    """The generator prompt version whose user message the head was fitted on."""
    base_model: str = ""
    """The model file whose states the head was fitted on."""
    training: dict[str, Any] = field(default_factory=dict)
    """A summary of the fit (data, penalty, validation match)."""

    def __post_init__(self) -> None:
        width = len(self.mean)
        if len(self.scale) != width or len(self.coef) != width + self.position_cap + 2:
            raise ConfigError(
                f"weights head: {width} means, {len(self.scale)} scales and {len(self.coef)} coefficient rows "
                f"do not fit (expected {width} scales and {width + self.position_cap + 2} rows)"
            )
        if any(len(row) != len(DIMENSIONS) for row in self.coef):
            raise ConfigError(f"weights head: every coefficient row must have {len(DIMENSIONS)} columns")

    @property
    def digest(self) -> str:
        """A short hash of the head's numbers and settings (part of a generator's identity)."""
        settings = [self.layer, self.position_cap, self.max_context_messages]
        payload = json.dumps([settings, self.mean, self.scale, self.coef])
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    def text_of(self, context: Sequence[Message]) -> str:
        """What the head reads of ``context``: the generator prompt's user message."""
        return head_text(context, self.max_context_messages)

    def position_of(self, context: Sequence[Message]) -> int:
        """The supporter-turn number of the reply after ``context``, capped at :attr:`position_cap`."""
        return min(generator_position(context)[1], self.position_cap)

    def weights_from_state(self, state: Sequence[float], position: int) -> dict[Dimension, float]:
        """The weights for one mean hidden state and (capped) position."""
        if len(state) != len(self.mean):
            raise ConfigError(f"weights head: a state of {len(state)} values, expected {len(self.mean)}")
        width = len(self.mean)
        logits = list(self.coef[-1])  # the bias
        for k, (value, mu, sd) in enumerate(zip(state, self.mean, self.scale, strict=True)):
            x = (value - mu) / sd
            row = self.coef[k]
            for j in range(len(DIMENSIONS)):
                logits[j] += x * row[j]
        position_row = self.coef[width + min(position, self.position_cap)]
        logits = [a + b for a, b in zip(logits, position_row, strict=True)]
        top = max(logits)
        exps = [math.exp(v - top) for v in logits]
        total = sum(exps)
        return {d: e / total for d, e in zip(DIMENSIONS, exps, strict=True)}

    def weights(self, contexts: Sequence[Context], backend: Any) -> list[dict[Dimension, float]]:
        """The weights for each context, reading the states on ``backend`` (one that reads hidden
        states: a :class:`~care_sdk.backends.HiddenStates`). Each context is normalised here
        (:func:`~care_sdk.types.as_messages`; :data:`~care_sdk.types.Messages` pass as they are).

        A text that does not fit the model's context window (the backend raises
        :class:`~care_sdk.errors.ContextOverflowError`) is read again with fewer messages, the
        oldest dropped first, down to the last one; the position is the whole context's.

        Raises:
            BackendError: the backend cannot read hidden states or failed.
        """
        if not isinstance(backend, HiddenStates):
            provider = str(getattr(backend, "provider", type(backend).__name__))
            raise BackendError("this backend cannot read hidden states", provider=provider, hint="use llamacpp or hf")
        messages = [as_messages(c) for c in contexts]
        return [self.weights_from_state(self._state(m, backend), self.position_of(m)) for m in messages]

    def _state(self, context: Sequence[Message], backend: HiddenStates) -> Sequence[float]:
        keep = self.max_context_messages or len(context)
        while True:
            text = head_text(context, keep)
            try:
                state: Sequence[float] = backend.hidden_state_means([text], self.layer)[0]
                return state
            except ContextOverflowError:
                if keep <= 1:
                    raise
                keep -= 1

    def to_json(self) -> dict[str, Any]:
        """The head as a JSON object (what :meth:`save` writes)."""
        return {
            "layer": self.layer,
            "position_cap": self.position_cap,
            "max_context_messages": self.max_context_messages,
            "prompt_version": self.prompt_version,
            "base_model": self.base_model,
            "training": self.training,
            "mean": self.mean,
            "scale": self.scale,
            "coef": self.coef,
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the head as JSON; returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json()) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> WeightsHead:
        """Read a head written by :meth:`save`.

        Raises:
            ConfigError: the file is missing or not a weights head (the message names the file and field).
        """
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read weights head: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: line {exc.lineno}: not JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a weights head is a JSON object")
        missing = [k for k in ("layer", "position_cap", "mean", "scale", "coef") if k not in data]
        if missing:
            raise ConfigError(f"{path}: weights head lacks {', '.join(missing)}")
        try:
            return cls(**{k: data[k] for k in data if k in cls.__dataclass_fields__})
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None

    def require(self, *, prompt_version: str, model: str) -> None:
        """Check that the head fits the generator prompt version and the model file the states are
        read on (where ``model`` names one; a backend that names no file is trusted).

        Raises:
            ConfigError: fitted with another prompt version, or on another base model.

        Examples:
            >>> head = WeightsHead(layer=1, position_cap=0, mean=[0.0], scale=[1.0], coef=[[0.0] * 3] * 3,
            ...     prompt_version="v2", base_model="m.gguf")
            >>> head.require(prompt_version="v2", model="/models/m.gguf")
            >>> head.require(prompt_version="v2", model="other.gguf")
            Traceback (most recent call last):
            ...
            care_sdk.errors.ConfigError: weights head fitted on m.gguf's hidden states cannot read other.gguf's; ...
        """
        if self.prompt_version != prompt_version:
            raise ConfigError(
                f"weights head fitted on generator prompt {self.prompt_version}, but this version of care-sdk "
                f"uses {prompt_version}; fit it again (care train weights-head) or pass weights_head=False"
            )
        name = Path(model).name
        if self.base_model and name and name != self.base_model:
            raise ConfigError(
                f"weights head fitted on {self.base_model}'s hidden states cannot read {name}'s; "
                "fit one for that model (care train weights-head) or pass weights_head=False"
            )


def bundled_weights_head() -> WeightsHead | None:
    """The weights head shipped beside the bundled generator adapter (``None`` when this build ships none).

    Examples:
        >>> head = bundled_weights_head()  # doctest: +SKIP
        >>> head.layer, len(head.mean)  # doctest: +SKIP
        (15, 576)
    """
    from care_sdk.bundled import adapters

    path = Path(str(resources.files(adapters).joinpath(_BUNDLED)))
    return WeightsHead.load(path) if path.is_file() else None
