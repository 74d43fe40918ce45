"""Seams for opt-in add-ons outside the method: what the generator and the reward ask of them.

CARE's reward is ``sum_d w_d * mean_c (s_c - 1) / 4`` with the weights the generator wrote, on every
backend. An add-on changes that only when asked for, through one of two protocols:

- a :class:`WeightReader` reads the rubric's weights another way
  (``RubricGenerator(..., weight_reader=...)``);
- a :class:`ContextFitReader` scales each reward by the reply's fit to its context
  (``AdaptiveReward(..., context_fit=...)``).

The core defines only these protocols. The add-ons the package ships for its bundled models live in
the bundled area and are known here by name in :data:`ADD_ONS` (loaded on first use, like the
backend spec schemes): ``weights-head``, ``expected-weights`` and ``context-fit``.
:func:`add_ons` builds them from ``NAME[=SPEC]`` strings, as ``care score --add-on`` and the verl
plug-in do. :attr:`WeightReader.name` and ``"context_fit"`` are what ``RewardResult.parts`` names.

Examples:
    >>> from care_sdk.testing import ScriptedBackend, rubric_json
    >>> from care_sdk import RubricGenerator
    >>> class Flat:
    ...     name = "flat_weights"
    ...     identity = "flat"
    ...     def check(self, backend, *, prompt_version): pass
    ...     def read(self, reads, backend):
    ...         return [{"cognitive": 1.0, "affective": 1.0, "proactive": 1.0} for _ in reads]
    ...         yield  # a plan that sends no request
    >>> gen = RubricGenerator(ScriptedBackend([rubric_json({"cognitive": 3, "affective": 1, "proactive": 0})]),
    ...                       weight_reader=Flat())
    >>> [round(w, 2) for w in gen.generate("I failed my exam.").weights.values()]
    [0.33, 0.33, 0.33]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from care_sdk._targets import load_target
from care_sdk.backends.base import Backend, GenerationRequest
from care_sdk.errors import CareError, ConfigError
from care_sdk.plans import Plan
from care_sdk.types import Context, Dimension, Messages

__all__ = [
    "ADD_ONS",
    "AddOn",
    "AddOns",
    "ContextFitReader",
    "WeightRead",
    "WeightReader",
    "add_ons",
    "check_add_ons",
    "parse_add_on",
]


@dataclass(frozen=True)
class WeightRead:
    """One parsed rubric whose weights a :class:`WeightReader` reads again.

    Examples:
        >>> from care_sdk.types import as_messages
        >>> read = WeightRead(context=as_messages("I failed."), request=GenerationRequest(messages=()))
        >>> read.context[-1].content
        'I failed.'
    """

    context: Messages
    """The whole context the rubric is for."""
    request: GenerationRequest
    """The generator request the rubric was written on (its prompt may show fewer messages)."""


@runtime_checkable
class WeightReader(Protocol):
    """Reads a rubric's weights another way than the generator wrote them (the criteria stay its own).

    ``read`` is a plan (:mod:`care_sdk.plans`) the generator runs inside its own: it may ``yield``
    lists of :class:`~care_sdk.backends.GenerationRequest` (sent back their results) and
    ``yield from offload(call)`` a blocking call (:func:`care_sdk.plans.offload`: run in place, or
    in a worker thread under async use); it returns one weights mapping, or the
    :class:`~care_sdk.errors.CareError` of that item, per read. The generator normalises the
    weights it gets back.

    Examples:
        >>> from care_sdk.plans import offload
        >>> class Even:
        ...     name = "even_weights"
        ...     identity = "even"
        ...     def check(self, backend, *, prompt_version): pass
        ...     def read(self, reads, backend):
        ...         n = yield from offload(lambda: len(reads))
        ...         return [{"cognitive": 1.0, "affective": 1.0, "proactive": 1.0}] * n
        >>> isinstance(Even(), WeightReader)
        True
    """

    @property
    def name(self) -> str:
        """The add-on's name in ``RewardResult.parts`` (``weights_head``, ``expected_weights``)."""
        ...

    @property
    def identity(self) -> str:
        """What shapes the weights it reads; part of the generator's identity (and rubric cache key)."""
        ...

    def check(self, backend: Backend, *, prompt_version: str) -> None:
        """Raise :class:`~care_sdk.errors.ConfigError` when it cannot read on ``backend`` with this prompt version."""
        ...

    def read(self, reads: Sequence[WeightRead], backend: Backend) -> Plan[dict[Dimension, float]]:
        """The weights of each read (see the class docstring)."""
        ...


@runtime_checkable
class ContextFitReader(Protocol):
    """Scales each reward by the reply's fit to its context, in (0, 1).

    :class:`~care_sdk.AdaptiveReward` reads the fit of every evaluated reply with ``score_batch``
    (``ascore_batch`` in async use), keeps it in ``RewardResult.context_fit`` and pays
    ``combine(rubric_reward, fit)``; an item whose fit could not be read fails with stage ``context_fit``.

    Examples:
        >>> from care_sdk import AdaptiveReward, Rubric
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json
        >>> class HalfFit:
        ...     identity = "half"
        ...     def score_batch(self, items): return [0.5 for _ in items]
        ...     async def ascore_batch(self, items): return self.score_batch(items)
        ...     def combine(self, rubric_reward, fit): return rubric_reward * fit
        >>> isinstance(HalfFit(), ContextFitReader)
        True
        >>> reward = AdaptiveReward.from_backend(ScriptedBackend(lambda r: evaluation_json([5] * 6)),
        ...                                      rubric=Rubric.uniform_fixed(), context_fit=HalfFit())
        >>> reward.score("I failed.", "That hurts.").reward
        0.5
    """

    @property
    def identity(self) -> str:
        """What determines the fit (model, settings); recorded beside the scores."""
        ...

    def score_batch(self, items: Sequence[tuple[Context, str]]) -> list[float | CareError]:
        """The fit of each ``(context, reply)``, or that item's error (the reward passes each context as
        a tuple of messages, normalised where it entered)."""
        ...

    async def ascore_batch(self, items: Sequence[tuple[Context, str]]) -> list[float | CareError]:
        """Async form of :meth:`score_batch`."""
        ...

    def combine(self, rubric_reward: float, fit: float) -> float:
        """The reward paid for a reply with this rubric reward and fit."""
        ...


@dataclass(frozen=True)
class AddOn:
    """How :func:`add_ons` builds one add-on, and which seam it plugs into.

    Examples:
        >>> ADD_ONS["context-fit"].seam
        'context_fit'
    """

    target: str
    """``"module:function"`` of a builder ``build(spec: str | None)``, imported on first use."""
    seam: Literal["weight_reader", "context_fit"]
    """``weight_reader`` (the builder returns a :class:`WeightReader`) or ``context_fit`` (a
    :class:`ContextFitReader`); one add-on per seam."""


ADD_ONS: dict[str, AddOn] = {
    "weights-head": AddOn("care_sdk.bundled.addons:weights_head", seam="weight_reader"),
    "expected-weights": AddOn("care_sdk.bundled.addons:expected_weights", seam="weight_reader"),
    "context-fit": AddOn("care_sdk.bundled.addons:context_fit", seam="context_fit"),
}
"""The add-ons :func:`add_ons` knows, by name (the bundled ones, loaded the first time one is asked
for). Add your own by adding an entry."""

_SEAMS: dict[str, type] = {"weight_reader": WeightReader, "context_fit": ContextFitReader}
_SEAM_WORDS = {"weight_reader": "read the rubric's weights", "context_fit": "read the context fit"}


@dataclass(frozen=True)
class AddOns:
    """The add-ons asked for: at most one weight reader (for the generator) and one context fit (for the reward).

    Examples:
        >>> AddOns().generator_options(), AddOns().context_fit is None
        ({}, True)
    """

    weight_reader: WeightReader | None = None
    """``RubricGenerator``'s ``weight_reader``."""
    context_fit: ContextFitReader | None = None
    """``AdaptiveReward``'s ``context_fit``."""

    def generator_options(self) -> dict[str, Any]:
        """The :class:`~care_sdk.RubricGenerator` keyword arguments these add-ons ask for."""
        return {} if self.weight_reader is None else {"weight_reader": self.weight_reader}


def parse_add_on(value: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME=SPEC`` as ``(name, spec)``, the name checked against :data:`ADD_ONS`.

    Raises:
        ConfigError: an unknown name (the message lists the known ones) or an empty spec.

    Examples:
        >>> parse_add_on("context-fit=llamacpp:m.gguf"), parse_add_on(" weights-head ")
        (('context-fit', 'llamacpp:m.gguf'), ('weights-head', None))
        >>> parse_add_on("shift-check")
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: unknown add-on 'shift-check'; choose from weights-head, expected-weights, ...
    """
    name, eq, spec = value.strip().partition("=")
    name = name.strip()
    if name not in ADD_ONS:
        raise ConfigError(f"unknown add-on {name!r}; choose from {', '.join(ADD_ONS)}")
    if eq and not spec.strip():
        raise ConfigError(f"add-on {name}: '{name}=' needs a spec after '=' (or leave out '=')")
    return name, spec.strip() if eq else None


def _builder(name: str) -> Callable[[str | None], Any]:
    return load_target(ADD_ONS[name].target, what=f"add-on {name}:")


def check_add_ons(values: str | Sequence[str] | None) -> tuple[str, ...]:
    """The ``NAME[=SPEC]`` strings ``values`` names (a string may hold several, comma-separated), checked
    without building anything: known names, no name twice, at most one add-on per seam.

    Raises:
        ConfigError: an unknown name, an empty spec, a name given twice, or two weight readers.

    Examples:
        >>> check_add_ons("context-fit, weights-head")
        ('context-fit', 'weights-head')
        >>> check_add_ons(["weights-head", "expected-weights"])
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: add-ons weights-head and expected-weights both read the rubric's weights; ...
    """
    if values is None:
        return ()
    if isinstance(values, str):
        values = values.split(",")
    asked = [parse_add_on(v) for v in values if v.strip()]
    names = [name for name, _ in asked]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"add-on {', '.join(twice)} given more than once")
    for seam, words in _SEAM_WORDS.items():
        sharing = [name for name in names if ADD_ONS[name].seam == seam]
        if len(sharing) > 1:
            raise ConfigError(f"add-ons {' and '.join(sharing)} both {words}; choose one")
    return tuple(name if spec is None else f"{name}={spec}" for name, spec in asked)


def add_ons(values: str | Sequence[str] | None) -> AddOns:
    """Build the add-ons named by ``NAME[=SPEC]`` strings (a string may hold several, comma-separated).

    Two weight readers (``weights-head`` and ``expected-weights``) or a name given twice are refused
    (:func:`check_add_ons`), before anything is built.

    Raises:
        ConfigError: an unknown name, a name given twice, two weight readers, or a builder's own error.

    Examples:
        >>> add_ons(None) == AddOns(), add_ons("") == AddOns()
        (True, True)
        >>> add_ons(["weights-head", "expected-weights"])
        Traceback (most recent call last):
        ...
        care_sdk.errors.ConfigError: add-ons weights-head and expected-weights both read the rubric's weights; ...
    """
    built: dict[str, Any] = {}
    for name, spec in (parse_add_on(value) for value in check_add_ons(values)):
        seam = ADD_ONS[name].seam
        addon = _builder(name)(spec)
        if not isinstance(addon, _SEAMS[seam]):
            raise ConfigError(f"add-on {name}: {ADD_ONS[name].target} built a {type(addon).__name__}, not a {seam}")
        built[seam] = addon
    return AddOns(weight_reader=built.get("weight_reader"), context_fit=built.get("context_fit"))
