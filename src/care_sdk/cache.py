"""Rubric caches: one rubric per context, shared by every reply to that context.

A cache key hashes the canonical context, the generator's identity (backend, model, sampling
settings) and the prompt version, so a changed model or template never returns a stale rubric.
A context that comes with a user profile (:mod:`care_sdk.profiles`) has its profile in its key
too; a context without one keeps the key it always had.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from care_sdk.errors import ConfigError
from care_sdk.profiles import UserProfile
from care_sdk.types import Message, Rubric

__all__ = ["CacheStats", "MemoryCache", "RubricCache", "context_key"]


def context_key(context: Sequence[Message], generator_identity: str, profile: UserProfile | None = None) -> str:
    """The cache key of a context (and the user's profile, when there is one) for one generator: a
    SHA-256 hex digest. Without a profile the key is what it always was.

    Examples:
        >>> k1 = context_key([Message(role="user", content="hi")], "gen-a")
        >>> k1 == context_key([Message(role="user", content="hi ")], "gen-a")
        False
        >>> len(k1)
        64
        >>> k1 == context_key([Message(role="user", content="hi")], "gen-a", UserProfile(text="A student."))
        False
    """
    fields: dict[str, object] = {"context": [[m.role, m.content] for m in context], "generator": generator_identity}
    if profile is not None:
        fields["profile"] = profile.model_dump(mode="json")
    canonical = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass
class CacheStats:
    """Hit and miss counts of a cache.

    Examples:
        >>> CacheStats(hits=3, misses=1).hit_rate
        0.75
    """

    hits: int = 0
    misses: int = 0

    @property
    def hit_rate(self) -> float:
        """Share of lookups that hit (0 when there were none)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


@runtime_checkable
class RubricCache(Protocol):
    """What a rubric cache provides; implement it to plug in your own store.

    Examples:
        >>> isinstance(MemoryCache(), RubricCache)
        True
    """

    stats: CacheStats

    def get(self, key: str) -> Rubric | None:
        """Return the cached rubric for ``key``, counting a hit or a miss."""
        ...

    def put(self, key: str, rubric: Rubric) -> None:
        """Store ``rubric`` under ``key``."""
        ...


class MemoryCache:
    """A thread-safe in-memory LRU cache of rubrics.

    Examples:
        >>> cache = MemoryCache(maxsize=1)
        >>> cache.put("a", Rubric.uniform_fixed())
        >>> cache.get("a") is not None, cache.get("b")
        (True, None)
        >>> cache.stats
        CacheStats(hits=1, misses=1)
    """

    def __init__(self, maxsize: int = 65536) -> None:
        if maxsize < 1:
            raise ConfigError("maxsize must be at least 1")
        self.maxsize = maxsize
        self.stats = CacheStats()
        self._data: OrderedDict[str, Rubric] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Rubric | None:
        with self._lock:
            rubric = self._data.get(key)
            if rubric is None:
                self.stats.misses += 1
                return None
            self._data.move_to_end(key)
            self.stats.hits += 1
            return rubric

    def put(self, key: str, rubric: Rubric) -> None:
        with self._lock:
            self._data[key] = rubric
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        # An in-memory cache travels as its size only: it starts empty in the other process.
        return (MemoryCache, (self.maxsize,))
