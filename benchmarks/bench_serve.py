"""The reward service against the same reward in process: throughput and rubric sharing.

One reward (generator and evaluator on ``--backend``, rubric cache off, every backend request
recorded) is scored, on the same hand-written items (``--contexts`` contexts, ``--g`` replies
each), three ways in one run:

- ``in_process``: one ``score_batch`` call over every item (what a TRL reward call does);
- ``service c=K``: through ``care serve``'s app under uvicorn on 127.0.0.1 (same process, its own
  thread), every item sent as its own ``/v1/score`` request by ``RemoteReward``, K requests in flight;
- with the rubric cache off, ``in_process`` again and ``service all at once``: every item's request
  sent at the same time, as ranks of a trainer would, to measure rubric sharing across requests:
  backend calls per reward against the in-process batch.

Reports rewards per second and backend calls (rubrics, evaluations) per reward, and writes
``benchmarks/results/serve.json`` (one entry per backend). ``--quick`` runs a tiny setting
(2 contexts x 2 replies, concurrency 1 and 2) to check that the script works. The backend
``llama-server`` starts llama.cpp's OpenAI-compatible server on 127.0.0.1 with the base model
and scores through ``openai:``.

Usage:
    python benchmarks/bench_serve.py                       # bundled model and llama-server, 8 x 8, c = 1, 8, 32
    python benchmarks/bench_serve.py --quick --backend default --out /tmp/serve.json
    python benchmarks/bench_serve.py --backend openai:smollm2@http://127.0.0.1:8080/v1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "benchmarks" / "results" / "serve.json"

CONTEXTS = [
    "I failed my driving test for the third time and I feel useless.",
    "My best friend moved abroad and I don't know how to keep in touch.",
    "I got laid off today and I haven't told my family yet.",
    "My dog is sick and the vet bills are more than I can afford.",
    "I keep arguing with my sister about caring for our mother.",
    "I'm starting a new job on Monday and I can't sleep from nerves.",
    "My exam results came back and I did worse than I hoped.",
    "I feel lonely since I started working from home.",
]
REPLIES = [
    "That sounds really hard. What has been weighing on you most?",
    "I'm sorry. It makes sense to feel this way; do you want to talk it through?",
    "Have you thought about small steps you could take this week?",
    "That must be exhausting. Who could you lean on right now?",
    "It sounds like you care a lot. What would help you feel a bit steadier?",
    "Many people go through this. What worked for you before in tough times?",
    "Thank you for telling me. How are you holding up today?",
    "Would it help to plan what you'll say or do next?",
]


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def build(spec: str) -> tuple[Any, Any, Any]:
    """The reward with its two recording backends."""
    from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator
    from care_sdk.backends import BackendPool
    from care_sdk.testing import RecordingBackend

    pool = BackendPool()  # one backend per role for `default`, one shared by both otherwise
    gen_backend, ev_backend = pool.get(spec, role="generator"), pool.get(spec, role="evaluator")
    gen, ev = RecordingBackend(gen_backend), RecordingBackend(ev_backend)
    reward = AdaptiveReward(RubricGenerator(gen, seed=0), RubricEvaluator(ev, seed=0))
    return reward, gen, ev


@contextlib.contextmanager
def service(reward: Any, window_ms: float) -> Iterator[str]:
    import uvicorn

    from care_sdk.serve import ServeConfig, create_app

    port = free_port()
    config = uvicorn.Config(
        create_app(reward, ServeConfig(batch_window_ms=window_ms)), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(60)


@contextlib.contextmanager
def backend_spec(name: str) -> Iterator[str]:
    """The spec to score with: ``llama-server`` starts llama.cpp's server for the run."""
    if name != "llama-server":
        yield name
        return
    sys.path.insert(0, str(REPO / "tests"))
    from servers import start_llama_server

    server = start_llama_server()
    try:
        yield server.spec
    finally:
        server.stop()


def measure(label: str, run: Any, gen: Any, ev: Any, n: int) -> dict[str, Any]:
    rubrics, evaluations = gen.count(), ev.count()
    started = time.perf_counter()
    rewards = run()
    seconds = time.perf_counter() - started
    row = {
        "label": label,
        "items": n,
        "seconds": round(seconds, 3),
        "rewards_per_s": round(n / seconds, 3),
        "rubric_requests": gen.count() - rubrics,
        "evaluation_requests": ev.count() - evaluations,
        "backend_calls_per_reward": round((gen.count() - rubrics + ev.count() - evaluations) / n, 3),
        "failed": sum(r is None for r in rewards),
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(row), flush=True)
    return row


def run_backend(spec: str, items: list[tuple[str, str]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every row for one backend; throughput ratios against the in-process batch.

    Throughput rows run with the rubric cache on (as a user runs), emptied before each row, so every
    row pays one rubric per context; the two sharing rows run with it off, so every rubric written
    is a backend request and rubric sharing shows in the counts.
    """
    from care_sdk import MemoryCache, RemoteReward

    n = len(items)
    reward, gen, ev = build(spec)
    reward.score_batch(items[:1])  # load the model(s) before timing

    def in_process() -> list[float | None]:
        return [r.reward for r in reward.score_batch(items)]

    def cache(on: bool) -> None:
        reward.generator.cache = MemoryCache() if on else None

    cache(True)
    rows = [measure("in_process", in_process, gen, ev, n)]
    with service(reward, args.window_ms) as url:
        remote = RemoteReward(url)
        remote.score_batch(items[:1])  # open the connection

        def one(item: tuple[str, str]) -> float | None:
            return remote.score_batch([item])[0].reward

        for k in (int(x) for x in args.concurrency.split(",")):
            cache(True)
            with ThreadPoolExecutor(max_workers=k) as pool:
                rows.append(measure(f"service c={k}", lambda p=pool: list(p.map(one, items)), gen, ev, n))
        cache(False)
        rows.append(measure("in_process, no rubric cache", in_process, gen, ev, n))
        with ThreadPoolExecutor(max_workers=n) as pool:
            rows.append(measure("service all at once, no rubric cache", lambda: list(pool.map(one, items)), gen, ev, n))
    for backend in {id(gen): gen, id(ev): ev}.values():
        backend.close()
    base = rows[0]["rewards_per_s"]
    for row in rows:
        row["throughput_vs_in_process"] = round(row["rewards_per_s"] / base, 3)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="default,llama-server", help="comma-separated specs, or llama-server")
    parser.add_argument("--contexts", type=int, default=8)
    parser.add_argument("--g", type=int, default=8, help="replies per context")
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated request concurrencies")
    parser.add_argument("--window-ms", type=float, default=10.0, help="the service's batch window")
    parser.add_argument("--quick", action="store_true", help="2 contexts x 2 replies, concurrency 1 and 2")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.quick:
        args.contexts, args.g, args.concurrency = 2, 2, "1,2"
    if not (1 <= args.contexts <= len(CONTEXTS) and 1 <= args.g <= len(REPLIES)):
        parser.error(f"--contexts and --g go up to {len(CONTEXTS)} and {len(REPLIES)}")
    items = [(c, r) for c in CONTEXTS[: args.contexts] for r in REPLIES[: args.g]]
    runs = []
    for name in args.backend.split(","):
        with backend_spec(name) as spec:
            runs.append({"backend": name, "spec": spec, "rows": run_backend(spec, items, args)})
    result = {
        "command": " ".join(["python", "benchmarks/bench_serve.py", *(argv if argv is not None else sys.argv[1:])]),
        "data": "hand-written contexts and replies (benchmarks/bench_serve.py)",
        "role": "eval-only",
        "test_reads": 0,
        "contexts": args.contexts,
        "g": args.g,
        "window_ms": args.window_ms,
        "runs": runs,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
