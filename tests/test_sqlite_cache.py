"""The persistent rubric cache: epochs reuse rubrics, processes share one file without corrupting it."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from care_sdk import AdaptiveReward, Rubric, RubricEvaluator, RubricGenerator
from care_sdk.cache import RubricCache
from care_sdk.errors import ConfigError
from care_sdk.sqlite_cache import SqliteCache
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json

CONTEXTS = [[{"role": "user", "content": f"Problem number {i} keeps me awake at night."}] for i in range(5)]


def rubric_for(i: int) -> Rubric:
    weights = {"cognitive": 1.0 + i, "affective": 1.0, "proactive": 0.5}
    return Rubric(
        weights=weights,  # type: ignore[arg-type]
        criteria=[
            {"dimension": d, "text": f"Criterion {d} for entry {i}."}  # type: ignore[misc]
            for d in ("cognitive", "affective", "proactive")
        ],
    )


def test_implements_the_protocol_and_round_trips(tmp_path: Path) -> None:
    cache = SqliteCache(tmp_path / "sub" / "rubrics.sqlite")
    assert isinstance(cache, RubricCache)
    assert cache.get("missing") is None
    cache.put("k", rubric_for(3))
    assert cache.get("k") == rubric_for(3)
    assert (cache.stats.hits, cache.stats.misses) == (1, 1)
    assert len(cache) == 1
    cache.clear()
    assert len(cache) == 0 and cache.stats.hits == 0


def test_second_epoch_makes_no_generator_calls_even_in_a_new_process_state(tmp_path: Path) -> None:
    path = tmp_path / "rubrics.sqlite"
    gen_backend = ScriptedBackend(lambda req: rubric_json({"cognitive": 2, "affective": 1, "proactive": 1}))
    ev_backend = ScriptedBackend(lambda req: evaluation_json([4, 4, 3, 3, 2, 2]))

    def epoch(cache: SqliteCache) -> list[float | None]:
        reward = AdaptiveReward(RubricGenerator(gen_backend, cache=cache), RubricEvaluator(ev_backend))
        prompts = [c for c in CONTEXTS for _ in range(4)]
        return reward(prompts, [f"reply {i}" for i in range(len(prompts))])

    first = epoch(SqliteCache(path))
    assert len(gen_backend.requests) == len(CONTEXTS)
    reopened = SqliteCache(path)  # a fresh cache object on the same file: nothing held in memory
    second = epoch(reopened)
    assert len(gen_backend.requests) == len(CONTEXTS)  # zero new generator calls
    assert second == first
    assert (reopened.stats.hits, reopened.stats.misses) == (len(CONTEXTS), 0)


def test_entries_of_an_incompatible_version_count_as_misses(tmp_path: Path) -> None:
    cache = SqliteCache(tmp_path / "r.sqlite")
    with sqlite3.connect(cache.path) as conn:
        conn.execute("INSERT INTO rubrics VALUES ('old', '{\"weights\": 1}', 0)")
    assert cache.get("old") is None
    assert cache.stats.misses == 1


def test_a_file_that_is_not_sqlite_is_a_clear_config_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are not rubrics\n" * 100)
    with pytest.raises(ConfigError, match=r"notes\.txt"):
        SqliteCache(path)


def _worker(path: str, worker: int, n: int, barrier: multiprocessing.synchronize.Barrier) -> None:
    cache = SqliteCache(path, timeout=60)
    barrier.wait()
    for i in range(n):
        # Both workers write the shared keys (same value, as two generators with one identity would)
        # and their own keys, and read what the other may have written.
        cache.put(f"shared-{i}", rubric_for(i))
        cache.put(f"w{worker}-{i}", rubric_for(i + worker))
        other = cache.get(f"w{1 - worker}-{i}")
        assert other is None or other == rubric_for(i + 1 - worker)
        assert cache.get(f"shared-{i}") == rubric_for(i)


def test_two_processes_share_one_file_without_corruption(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite")
    SqliteCache(path)  # create the schema once, as a trainer's main process would
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    n = 150
    procs = [ctx.Process(target=_worker, args=(path, w, n, barrier)) for w in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cache = SqliteCache(path)
    assert len(cache) == 3 * n
    for i in range(n):
        assert cache.get(f"shared-{i}") == rubric_for(i)
        assert cache.get(f"w0-{i}") == rubric_for(i)
        assert cache.get(f"w1-{i}") == rubric_for(i + 1)
