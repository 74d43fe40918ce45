"""A persistent rubric cache in one SQLite file, safe to share between processes.

Several training workers (or a rerun next week) pointing at the same file generate each
context's rubric once. The file uses SQLite's write-ahead log, so readers never block the writer,
and a busy timeout, so concurrent writers wait instead of failing. Rubrics are stored as JSON.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from care_sdk.cache import CacheStats
from care_sdk.errors import ConfigError
from care_sdk.types import Rubric

__all__ = ["SqliteCache"]

_SCHEMA = "CREATE TABLE IF NOT EXISTS rubrics (key TEXT PRIMARY KEY, rubric TEXT NOT NULL, created REAL NOT NULL)"


class SqliteCache:
    """A rubric cache persisted in an SQLite file; implements :class:`~care_sdk.cache.RubricCache`.

    Keys are the cache keys the generator computes (canonical context, generator identity and
    prompt version), so one file can hold rubrics of several generators without mixing them.
    Each process (and each fork) opens its own connection; within a process the cache is
    thread-safe. ``stats`` counts this process's hits and misses.

    Args:
        path: the database file; created with its parent directory if missing.
        timeout: seconds a writer waits for another process's lock before failing.

    Examples:
        >>> import tempfile, os
        >>> from care_sdk import RubricGenerator
        >>> from care_sdk.testing import ScriptedBackend, rubric_json
        >>> path = os.path.join(tempfile.mkdtemp(), "rubrics.sqlite")
        >>> backend = ScriptedBackend([rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})])
        >>> RubricGenerator(backend, cache=SqliteCache(path)).generate("I lost my job.").top_dimension.value
        'affective'
        >>> again = RubricGenerator(backend, cache=SqliteCache(path))  # e.g. the next run
        >>> again.generate("I lost my job.").top_dimension.value, len(backend.requests)
        ('affective', 1)
        >>> again.cache.stats
        CacheStats(hits=1, misses=0)
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self.path = Path(path).expanduser()
        self.timeout = timeout
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._connection()  # fail early on an unusable path

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        try:
            conn = sqlite3.connect(self.path, timeout=self.timeout, check_same_thread=False, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"rubric cache {self.path}: cannot open as SQLite ({exc})") from None
        self._conn, self._pid = conn, os.getpid()
        return conn

    def get(self, key: str) -> Rubric | None:
        """Return the stored rubric for ``key``, counting a hit or a miss.

        An entry that no longer validates (written by an incompatible version) counts as a miss.
        """
        with self._lock:
            row = self._connection().execute("SELECT rubric FROM rubrics WHERE key = ?", (key,)).fetchone()
            rubric = None
            if row is not None:
                try:
                    rubric = Rubric.model_validate_json(row[0])
                except ValidationError:
                    rubric = None
            if rubric is None:
                self.stats.misses += 1
            else:
                self.stats.hits += 1
            return rubric

    def put(self, key: str, rubric: Rubric) -> None:
        """Store ``rubric`` under ``key`` (the last writer of a key wins; all writers agree on its value)."""
        with self._lock:
            self._connection().execute(
                "INSERT OR REPLACE INTO rubrics (key, rubric, created) VALUES (?, ?, julianday('now'))",
                (key, rubric.model_dump_json()),
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM rubrics").fetchone()[0])

    def clear(self) -> None:
        """Delete every stored rubric (in every process sharing the file) and reset the counts."""
        with self._lock:
            self._connection().execute("DELETE FROM rubrics")
            self.stats = CacheStats()

    def close(self) -> None:
        """Close this process's connection; the cache reopens it on next use."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __reduce__(self) -> tuple[Any, tuple[str, float]]:
        # Travels as its path: the other process reopens the same file (and its rubrics).
        return (_reopen, (str(self.path), self.timeout))

    def __repr__(self) -> str:
        return f"SqliteCache({str(self.path)!r})"


def _reopen(path: str, timeout: float) -> SqliteCache:
    return SqliteCache(path, timeout=timeout)
