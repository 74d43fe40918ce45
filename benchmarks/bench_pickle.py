"""A reward sent to a fresh process: its pickled size and the time to its first reward there.

For the bundled model (``default``) and for HTTP (``openai:`` against a llama.cpp server on
127.0.0.1), a fresh process started with the spawn method (as TRL's async GRPO rollout worker
starts its child) either

- ``unpickle``: receives the parent's pickled :class:`~care_sdk.AdaptiveReward`, unpickles it and
  scores one reply, or
- ``build``: receives the spec and builds the reward itself (``AdaptiveReward.from_backend``),
  then scores the same reply.

Both are timed inside the child from before ``care_sdk`` is imported to the first reward, and from
the parent (process start included). The two run alternately, ``--repeats`` times each; the
results file reports medians and the ratio unpickle / build.

Usage:
    python benchmarks/bench_pickle.py
    python benchmarks/bench_pickle.py --repeats 1 --out /tmp/pickle.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import pickle
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results" / "pickle.json"
CONTEXT = [{"role": "user", "content": "My sister stopped talking to me and I don't know why."}]
REPLY = "That must hurt. What happened the last time you spoke?"


def first_reward(how: str, payload: Any) -> dict[str, Any]:
    """In the fresh process: get the reward (unpickle it, or build it from its spec), score one reply."""
    start = time.perf_counter()
    if how == "unpickle":
        reward = pickle.loads(payload)
    else:
        from care_sdk import AdaptiveReward

        reward = AdaptiveReward.from_backend(payload)
    ready = time.perf_counter()
    value = reward([CONTEXT], [REPLY])[0]
    return {"ready_s": ready - start, "first_reward_s": time.perf_counter() - start, "reward": value}


def in_fresh_process(how: str, payload: Any) -> dict[str, Any]:
    start = time.perf_counter()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        result = pool.submit(first_reward, how, payload).result(timeout=900)
    result["parent_wall_s"] = time.perf_counter() - start
    return result


def measure(spec: str, repeats: int) -> dict[str, Any]:
    from care_sdk import AdaptiveReward

    reward = AdaptiveReward.from_backend(spec)
    data = pickle.dumps(reward)
    parent_reward = reward([CONTEXT], [REPLY])[0]
    runs: dict[str, list[dict[str, Any]]] = {"unpickle": [], "build": []}
    for i in range(repeats):
        order = ("unpickle", "build") if i % 2 == 0 else ("build", "unpickle")
        for how in order:
            runs[how].append(in_fresh_process(how, data if how == "unpickle" else spec))
            print(f"{spec[:40]} {how}: {runs[how][-1]}", file=sys.stderr)
    out: dict[str, Any] = {"pickled_bytes": len(data), "parent_reward": parent_reward}
    for how, rows in runs.items():
        out[how] = {
            key: round(statistics.median(r[key] for r in rows), 3)
            for key in ("ready_s", "first_reward_s", "parent_wall_s")
        }
        out[how]["same_reward_as_parent"] = all(r["reward"] == parent_reward for r in rows)
    out["first_reward_ratio_unpickle_over_build"] = round(
        out["unpickle"]["first_reward_s"] / out["build"]["first_reward_s"], 3
    )
    reward.generator.backend.close()  # type: ignore[union-attr]
    reward.evaluator.backend.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="fresh processes per variant (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results path (default: %(default)s)")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO / "tests"))
    from servers import start_llama_server

    setups: dict[str, Any] = {"bundled": measure("default", args.repeats)}
    server = start_llama_server()
    try:
        setups["http"] = measure(server.spec, args.repeats)
        setups["http"]["server"] = "llama_cpp.server on 127.0.0.1, bundled SmolLM2-135M-Instruct GGUF"
    finally:
        server.stop()
    result = {
        "benchmark": "bench_pickle",
        "data": "one hand-written context and reply (benchmarks/bench_pickle.py)",
        "role": "eval-only",
        "test_reads": 0,
        "what": "pickled AdaptiveReward size; time to the first reward in a fresh spawned process, "
        "unpickled vs built there from its spec (medians; one context, one reply)",
        "repeats": args.repeats,
        "setups": setups,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(setups, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
