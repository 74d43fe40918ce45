"""Loading a ``"module:function"`` target on first use: the one loader behind the backend spec
schemes (:data:`care_sdk.backends.SPEC_SCHEMES`) and the add-on table (:data:`care_sdk.addons.ADD_ONS`).

Examples:
    >>> load_target("json:dumps", what="target")([1])
    '[1]'
    >>> load_target("json:nothing", what="add-on x:")
    Traceback (most recent call last):
    ...
    care_sdk.errors.ConfigError: add-on x: 'json:nothing' cannot be loaded: module 'json' has no attribute 'nothing'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from care_sdk.errors import ConfigError

__all__ = ["load_target"]


def load_target(target: str, *, what: str) -> Callable[..., Any]:
    """The object ``"module:name"`` names, its module imported now.

    Raises:
        ConfigError: the module or the name cannot be loaded; the message starts with ``what``.
    """
    module, _, name = target.partition(":")
    try:
        found: Callable[..., Any] = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{what} {target!r} cannot be loaded: {exc}") from None
    return found
