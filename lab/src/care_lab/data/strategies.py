"""The strategy → dimension mapping: which empathy dimension each support strategy serves.

The default lives in ``strategy_map.json`` next to this module (package data): ESConv's eight
strategies and MINT's fifteen tactics, plus aliases for the spellings of the original ESConv
release ("Questions", "Other", "Direct Guidance", ...). docs/data.md justifies every entry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from care_sdk.errors import ConfigError
from care_sdk.types import DIMENSIONS, Dimension

__all__ = ["StrategyMap", "UnknownStrategyError", "default_strategy_map"]


class UnknownStrategyError(KeyError):
    """A strategy name that the mapping neither lists nor aliases."""


def _key(name: str) -> str:
    """Normalise a strategy name for lookup: case, brackets, separators."""
    return re.sub(r"[\s_\-]+", " ", name.strip().strip("[]").strip()).lower()


class StrategyMap(BaseModel):
    """Maps support-strategy names to a :class:`~care_sdk.types.Dimension` (or to none).

    Lookups ignore case, surrounding brackets (``[Question]``) and the difference between
    spaces, hyphens and underscores. ``aliases`` rename variants to a listed strategy.

    Examples:
        >>> m = StrategyMap.default()
        >>> m.dimension("Questions"), m.dimension("Others")
        (<Dimension.COGNITIVE: 'cognitive'>, None)
        >>> m.counts(["Question", "Reflection of feelings", "Question"])[Dimension.COGNITIVE]
        2
        >>> custom = StrategyMap(dimensions={"Hug": "affective"})
        >>> custom.dimension("hug").value
        'affective'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    dimensions: dict[str, Dimension | None]
    """Each strategy and its dimension; ``None`` for strategies that serve no dimension."""
    aliases: dict[str, str] = Field(default_factory=dict)
    """Alternative spellings, each naming a key of ``dimensions``."""
    version: int = 1
    """Version of the mapping file format."""

    @model_validator(mode="after")
    def _check(self) -> StrategyMap:
        keys = {_key(k) for k in self.dimensions}
        for alias, target in self.aliases.items():
            if _key(target) not in keys:
                raise ValueError(f"alias {alias!r} names {target!r}, which is not a strategy of the mapping")
        return self

    @classmethod
    def default(cls) -> StrategyMap:
        """The documented default (ESConv strategies and MINT tactics)."""
        return default_strategy_map()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> StrategyMap:
        """Build a mapping from ``{"dimensions": {...}, "aliases": {...}}`` or a plain ``{strategy: dimension}``.

        Raises:
            ConfigError: a value is not a dimension, or an alias names an unknown strategy.

        Examples:
            >>> StrategyMap.from_mapping({"Ask": "cognitive", "Chat": None}).dimension("ask").value
            'cognitive'
        """
        payload = dict(data) if "dimensions" in data else {"dimensions": dict(data)}
        try:
            return cls.model_validate(payload)
        except ValueError as exc:
            raise ConfigError(f"invalid strategy map: {exc}") from exc

    @classmethod
    def from_file(cls, path: str | Path) -> StrategyMap:
        """Read a mapping from a JSON or YAML file (same shapes as :meth:`from_mapping`).

        Examples:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "map.json"
            >>> _ = p.write_text('{"Ask": "cognitive"}')
            >>> StrategyMap.from_file(p).dimension("Ask").value
            'cognitive'
        """
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        try:
            if path.suffix in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except Exception as exc:
            raise ConfigError(f"{path}: cannot parse strategy map: {exc}") from exc
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: a strategy map must be a mapping")
        try:
            return cls.model_validate(data if "dimensions" in data else {"dimensions": data})
        except ValueError as exc:
            raise ConfigError(f"{path}: invalid strategy map: {exc}") from exc

    def _index(self) -> dict[str, str]:
        index: dict[str, str] = {}
        for k in self.dimensions:
            index.setdefault(_key(k), k)
        for alias, target in self.aliases.items():
            index.setdefault(_key(alias), index[_key(target)])
        return index

    def canonical(self, name: str) -> str:
        """The listed strategy a name refers to.

        Raises:
            UnknownStrategyError: the name is neither listed nor aliased.

        Examples:
            >>> StrategyMap.default().canonical("[Direct Guidance]")
            'Providing Suggestions'
        """
        if name in self.dimensions:
            return name
        found = self._index().get(_key(name))
        if found is None:
            raise UnknownStrategyError(name)
        return found

    def knows(self, name: str) -> bool:
        """Whether the mapping lists or aliases ``name``.

        Examples:
            >>> StrategyMap.default().knows("Juggling")
            False
        """
        return name in self.dimensions or _key(name) in self._index()

    def dimension(self, name: str) -> Dimension | None:
        """The dimension a strategy serves, or ``None`` for strategies that serve none.

        Raises:
            UnknownStrategyError: the name is neither listed nor aliased.
        """
        return self.dimensions[self.canonical(name)]

    def counts(self, strategies: Iterable[str], *, strict: bool = False) -> dict[Dimension, int]:
        """Per-dimension strategy counts ``n_d`` (every dimension present, possibly 0).

        Unknown strategies count for no dimension unless ``strict``, which raises.

        Examples:
            >>> {d.value: n for d, n in StrategyMap.default().counts(["advice", "validation", "gratitude"]).items()}
            {'cognitive': 0, 'affective': 1, 'proactive': 1}
        """
        counts = dict.fromkeys(DIMENSIONS, 0)
        for name in strategies:
            if not strict and not self.knows(name):
                continue
            dim = self.dimension(name)
            if dim is not None:
                counts[dim] += 1
        return counts

    def to_json(self) -> str:
        """The mapping as JSON text, the format :meth:`from_file` reads."""
        return self.model_dump_json(indent=2)


_DEFAULT: StrategyMap | None = None


def default_strategy_map() -> StrategyMap:
    """The default mapping shipped as package data (read once).

    Examples:
        >>> default_strategy_map().dimension("Providing Suggestions").value
        'proactive'
    """
    global _DEFAULT
    if _DEFAULT is None:
        text = resources.files("care_lab.data").joinpath("strategy_map.json").read_text(encoding="utf-8")
        _DEFAULT = StrategyMap.model_validate_json(text)
    return _DEFAULT
