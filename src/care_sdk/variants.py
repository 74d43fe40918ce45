"""The reward variants: CARE and the paper's ablations, named in one place.

A variant is a choice of where the weights and the criteria of a rubric come from:

==================  ==========  ==========
variant             weights     criteria
==================  ==========  ==========
``care``            generated   generated
``uniform_weights`` uniform     generated
``fixed_criteria``  generated   fixed
``fixed_rubric``    uniform     fixed
==================  ==========  ==========

``fixed_rubric`` needs no generator. The older spelling ``full`` (policy training configs) is
read as ``care``. A reward of a variant: ``AdaptiveReward(generator, evaluator, variant=...)`` or
:meth:`care_sdk.AdaptiveReward.from_backend` with ``variant=``; on the command line, ``--variant``.

Examples:
    >>> variant_modes("uniform_weights")
    ('uniform', 'generated')
    >>> variant_of("generated", "fixed")
    'fixed_criteria'
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BeforeValidator

from care_sdk.errors import ConfigError

__all__ = [
    "VARIANTS",
    "VARIANT_ALIASES",
    "VARIANT_LABELS",
    "CriteriaMode",
    "Variant",
    "VariantField",
    "WeightsMode",
    "as_variant",
    "needs_generator",
    "variant_modes",
    "variant_of",
]

Variant = Literal["care", "uniform_weights", "fixed_criteria", "fixed_rubric"]
"""A reward variant: full CARE or one of the paper's ablations."""
WeightsMode = Literal["generated", "uniform"]
"""Where a rubric's weights come from."""
CriteriaMode = Literal["generated", "fixed"]
"""Where a rubric's criteria come from."""

VARIANTS: tuple[Variant, ...] = get_args(Variant)
"""Every variant, in report order."""
VARIANT_ALIASES: dict[str, Variant] = {"full": "care"}
"""Older spellings still read, mapped to their variant."""
VARIANT_LABELS: dict[str, str] = {
    "care": "CARE",
    "uniform_weights": "uniform weights",
    "fixed_criteria": "fixed criteria",
    "fixed_rubric": "fixed rubric",
}
"""How reports and figures title each variant."""

_MODES: dict[Variant, tuple[WeightsMode, CriteriaMode]] = {
    "care": ("generated", "generated"),
    "uniform_weights": ("uniform", "generated"),
    "fixed_criteria": ("generated", "fixed"),
    "fixed_rubric": ("uniform", "fixed"),
}


def as_variant(name: str) -> Variant:
    """The variant named ``name`` (an alias such as ``full`` gives its variant).

    Raises:
        ConfigError: no variant has that name.

    Examples:
        >>> as_variant("full"), as_variant("fixed_rubric")
        ('care', 'fixed_rubric')
    """
    name = VARIANT_ALIASES.get(name, name)
    if name not in _MODES:
        raise ConfigError(f"unknown reward variant {name!r}; choose from {', '.join(VARIANTS)}")
    return name


def variant_modes(variant: str) -> tuple[WeightsMode, CriteriaMode]:
    """The ``(weights, criteria)`` modes of a variant.

    Examples:
        >>> variant_modes("care")
        ('generated', 'generated')
    """
    return _MODES[as_variant(variant)]


def variant_of(weights: str, criteria: str) -> Variant:
    """The variant with these weights and criteria modes.

    Raises:
        ConfigError: a mode is not one of its allowed values.

    Examples:
        >>> variant_of("uniform", "fixed")
        'fixed_rubric'
    """
    if weights not in get_args(WeightsMode):
        raise ConfigError(f"weights must be 'generated' or 'uniform', got {weights!r}")
    if criteria not in get_args(CriteriaMode):
        raise ConfigError(f"criteria must be 'generated' or 'fixed', got {criteria!r}")
    return next(v for v, modes in _MODES.items() if modes == (weights, criteria))


def needs_generator(variant: str) -> bool:
    """Whether a variant generates rubrics (every variant but ``fixed_rubric``).

    Examples:
        >>> needs_generator("care"), needs_generator("fixed_rubric")
        (True, False)
    """
    return _MODES[as_variant(variant)] != ("uniform", "fixed")


def _validate(value: object) -> object:
    return as_variant(value) if isinstance(value, str) else value


VariantField = Annotated[Variant, BeforeValidator(_validate)]
"""A :data:`Variant` as a pydantic field type that also reads the aliases."""
