"""Does each reward's provenance add up to what its batch cost? A GRPO-shaped batch scored twice.

B contexts from ESConv, G candidate replies each, scored by ``AdaptiveReward`` on one real backend
(default: the bundled SmolLM2 GGUF on llama.cpp, no adapters) behind a meter that counts every
request and the tokens the backend reported. The batch is scored twice: first with an empty rubric
cache, then again (every rubric cached). For each run it compares the sums of the results'
``provenance.cost`` (calls, prompt and completion tokens, seconds) with the meter's counts and the
run's wall time, and writes JSON.

    python benchmarks/bench_provenance.py --contexts 2 --group 3 --threads 1 --out benchmarks/results/provenance.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from _grpo_groups import esconv_data, esconv_groups
from bench_cost import measured_backend

from care_lab.bench.meter import Meter
from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator, __version__
from care_sdk.provenance import Cost
from care_sdk.types import RewardResult


def counts(meter: Meter) -> tuple[int, int, int]:
    """The meter's calls, prompt tokens and completion tokens so far."""
    return int(meter.totals["calls"]), int(meter.totals["prompt_tokens"]), int(meter.totals["completion_tokens"])


def summarise(results: Sequence[RewardResult], counted: tuple[int, int, int], wall: float) -> dict[str, object]:
    """One run: what the results' provenance says it cost, against what the meter counted in it."""
    made = [r.provenance for r in results]
    assert all(m is not None for m in made), "a result without its provenance"
    total = sum((m.cost for m in made if m is not None), Cost())
    n = len(results)
    return {
        "rewards": n,
        "failed": sum(r.reward is None for r in results),
        "meter_calls": counted[0],
        "provenance_calls": round(total.calls, 6),
        "meter_prompt_tokens": counted[1],
        "provenance_prompt_tokens": round(total.prompt_tokens or 0, 6),
        "meter_completion_tokens": counted[2],
        "provenance_completion_tokens": round(total.completion_tokens or 0, 6),
        "wall_s": wall,
        "provenance_seconds": total.seconds,
        "provenance_seconds_share_of_wall": total.seconds / wall if wall else None,
        "per_reward": {
            "calls": total.calls / n,
            "prompt_tokens": (total.prompt_tokens or 0) / n,
            "completion_tokens": (total.completion_tokens or 0) / n,
            "seconds": total.seconds / n,
        },
        "rubric_sources": dict(Counter(m.rubric_source for m in made if m is not None)),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="default", help="backend spec (default: bundled SmolLM2, llama.cpp)")
    parser.add_argument("--contexts", type=int, default=4, help="B: contexts in the batch")
    parser.add_argument("--group", type=int, default=4, help="G: replies per context")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads for --backend default")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/provenance.json"))
    args = parser.parse_args(argv)

    groups = esconv_groups(args.contexts, args.group)
    backend = measured_backend(args.backend, args.threads)
    items = [(list(g.context), reply) for g in groups for reply in g.replies]
    meter = Meter(backend)
    reward = AdaptiveReward(RubricGenerator(meter), RubricEvaluator(meter))
    runs: dict[str, dict[str, object]] = {}
    for name in ("empty_cache", "cached"):
        before = counts(meter)
        start = time.perf_counter()
        results = reward.score_batch(items)
        wall = time.perf_counter() - start
        counted = tuple(now - then for now, then in zip(counts(meter), before, strict=True))
        runs[name] = summarise(results, counted, wall)  # type: ignore[arg-type]
        print(f"{name}: {json.dumps(runs[name])}", flush=True)

    agree = all(
        run["meter_calls"] == run["provenance_calls"]
        and run["meter_prompt_tokens"] == run["provenance_prompt_tokens"]
        and run["meter_completion_tokens"] == run["provenance_completion_tokens"]
        for run in runs.values()
    )
    print(f"\nprovenance sums equal the meter's counts in both runs: {'yes' if agree else 'NO'}")
    record = {
        "benchmark": "provenance",
        **esconv_data(),
        "care_sdk": __version__,
        "backend": backend.identity,
        "machine": platform.platform(),
        "contexts": args.contexts,
        "group": args.group,
        "runs": runs,
        "sums_equal_meter": agree,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
