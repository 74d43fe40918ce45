"""Offline scoring on Ray Data: turns per second with 1 and 2 actors, and the cluster's start-up cost.

One run, side by side: a local Ray cluster is started once (its start-up time is measured), then the
same dialogue file is scored from scratch with ``care_sdk.ray_scoring.score_file`` by 1 actor and by
2 actors (one CPU and one model each, the bundled model on one thread). Each time includes the actors'
start and model load, as a user would see it. Writes a small JSON results file.

Usage:
    python benchmarks/bench_ray.py --variant fixed_rubric --out benchmarks/results/ray.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", default=str(REPO / "examples" / "dialogues.jsonl"), help="dialogue JSONL")
    parser.add_argument(
        "--repeat", type=int, default=1, help="score the file this many times over, ids suffixed (default: %(default)s)"
    )
    parser.add_argument("--backend", default="default", help="backend spec (default: %(default)s)")
    parser.add_argument("--variant", default="care", help="reward variant (default: %(default)s)")
    parser.add_argument("--workers", default="1,2", help="actor counts to compare (default: %(default)s)")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local cluster (default: %(default)s)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "ray.json"))
    args = parser.parse_args()

    import ray

    from care_sdk import ray_scoring

    data = Path(args.input)
    source = data
    if args.repeat > 1:  # more turns, so the actors' start and model load weigh less
        lines = [json.loads(x) for x in data.read_text(encoding="utf-8").splitlines() if x.strip()]
        source = Path(tempfile.mkdtemp()) / "repeated.jsonl"
        source.write_text(
            "".join(json.dumps({**d, "id": f"{d['id']}-{k}"}) + "\n" for k in range(args.repeat) for d in lines),
            encoding="utf-8",
        )
    load_before = os.getloadavg()
    started = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    start_s = time.perf_counter() - started
    rows = []
    try:
        for workers in (int(w) for w in args.workers.split(",")):
            out = Path(tempfile.mkdtemp()) / "scores.jsonl"
            began = time.perf_counter()
            summary = ray_scoring.score_file(
                source,
                out,
                reward={"variant": args.variant, "backend": args.backend},
                workers=workers,
            )
            seconds = time.perf_counter() - began
            rows.append(
                {
                    "workers": workers,
                    "turns": summary.turns,
                    "failed": summary.failed,
                    "seconds": round(seconds, 2),
                    "turns_per_s": round(summary.turns / seconds, 4),
                }
            )
            print(f"{workers} worker(s): {summary.turns} turns in {seconds:.1f} s ({summary.turns / seconds:.3f}/s)")
    finally:
        ray.shutdown()
    by_workers = {r["workers"]: r["turns_per_s"] for r in rows}
    ratio = round(by_workers[2] / by_workers[1], 3) if 1 in by_workers and 2 in by_workers else None
    load_after = os.getloadavg()
    result = {
        "benchmark": "ray",
        "role": "eval-only",
        "test_reads": 0,
        "command": "python benchmarks/bench_ray.py " + " ".join(sys.argv[1:]),
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
        },
        "data": {
            "file": os.path.relpath(data, REPO) if data.resolve().is_relative_to(REPO) else str(data),
            "sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
            "role": "example dialogues (no labels read)",
            "repeat": args.repeat,
        },
        "backend": args.backend,
        "variant": args.variant,
        "cluster_start_s": round(start_s, 2),
        "rows": rows,
        "ratio_2_over_1": ratio,
        "goal_ratio": 1.7,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"cluster start {start_s:.1f} s; 2 workers / 1 worker: {ratio}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
