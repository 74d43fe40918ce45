"""OpenAI-compatible backend: concurrency gain and SDK overhead against a local llama.cpp server.

Runs, in one process and against one server, the same N evaluations (ESConv test turns judged
against the fixed six-criterion rubric, greedy) four ways:

- ``sdk c=1``: ``RubricEvaluator.evaluate_batch`` on ``OpenAIBackend(max_concurrency=1)``
- ``sdk c=8``: the same with ``max_concurrency=8``
- ``bare c=8``: the identical requests (same messages, ``response_format``, seed) sent with a bare
  ``openai.AsyncOpenAI`` client and an ``asyncio.Semaphore(8)``, replies parsed with ``json.loads``
- ``sdk c=8`` again, after the bare run, so that server warm-up does not favour either side

and reports wall times as ratios: concurrency speed-up (c=1 / c=8) and SDK overhead
((sdk - bare) / bare, target <= 5 %). A llama.cpp server decodes one request at a time, so the
concurrency gain comes only from overlapping HTTP and client work with decoding.

Usage:
    python benchmarks/bench_openai_async.py                      # starts a server on the bundled model
    python benchmarks/bench_openai_async.py --base-url http://127.0.0.1:8000/v1 --model smollm2
    python benchmarks/bench_openai_async.py --n 16 --out /tmp/bench.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "benchmarks" / "results" / "openai_async.json"


def esconv_items(data_dir: Path, n: int) -> list[tuple[list[dict[str, str]], str]]:
    """``n`` (context, reply) pairs: supporter turns of ESConv's test split with short contexts."""
    from care_lab.data.esconv import load_esconv

    items: list[tuple[list[dict[str, str]], str]] = []
    for dialogue in load_esconv(data_dir / "esconv" / "test.jsonl"):
        messages = [{"role": m.role, "content": m.content[:400]} for m in dialogue.messages]
        for i, message in enumerate(messages):
            if message["role"] == "assistant" and i > 0 and messages[i - 1]["role"] == "user":
                items.append((messages[max(0, i - 3) : i], message["content"]))
                break
        if len(items) == n:
            return items
    raise SystemExit(f"{data_dir}/esconv/test.jsonl has fewer than {n} usable turns")


async def bare_run(base_url: str, payloads: list[dict[str, Any]], concurrency: int) -> tuple[float, list[str]]:
    """Send ``payloads`` with a bare AsyncOpenAI client; wall time and reply texts."""
    import openai

    client = openai.AsyncOpenAI(api_key="unused", base_url=base_url, max_retries=0, timeout=600)
    semaphore = asyncio.Semaphore(concurrency)

    async def one(payload: dict[str, Any]) -> str:
        async with semaphore:
            response = await client.chat.completions.create(**payload)
        text = response.choices[0].message.content or ""
        json.loads(text)
        return text

    start = time.perf_counter()
    texts = await asyncio.gather(*(one(p) for p in payloads))
    elapsed = time.perf_counter() - start
    await client.close()
    return elapsed, list(texts)


def sdk_run(base_url: str, model: str, items: list[Any], concurrency: int) -> tuple[float, list[Any]]:
    """Score ``items`` with RubricEvaluator on OpenAIBackend; wall time and evaluations."""
    from care_sdk import RubricEvaluator
    from care_sdk.backends.openai import OpenAIBackend

    backend = OpenAIBackend(model=model, base_url=base_url, max_concurrency=concurrency, timeout=600)
    evaluator = RubricEvaluator(backend)
    evaluator.evaluate_batch(items[:1])  # settle the response_format mode before timing
    start = time.perf_counter()
    results = evaluator.evaluate_batch(items)
    elapsed = time.perf_counter() - start
    backend.close()
    failures = [r for r in results if not hasattr(r, "scores")]
    if failures:
        raise SystemExit(f"{len(failures)} evaluations failed, e.g. {failures[0]}")
    return elapsed, results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base-url", help="an OpenAI-compatible server (default: start llama.cpp's on the bundled model)"
    )
    parser.add_argument("--model", default="smollm2", help="model name on that server (default: %(default)s)")
    parser.add_argument("--n", type=int, default=64, help="evaluations per variant (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=8, help="the concurrent setting (default: %(default)s)")
    parser.add_argument("--data-dir", type=Path, default=None, help="the data directory (default: $CARE_DATA_DIR)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results path (default: %(default)s)")
    args = parser.parse_args(argv)

    from care_lab.data import data_dir
    from care_sdk.types import Rubric

    server = None
    base_url = args.base_url
    if base_url is None:
        sys.path.insert(0, str(REPO / "tests"))
        from servers import SERVER_MODEL_NAME, start_llama_server

        print("starting llama.cpp server on the bundled model ...", file=sys.stderr)
        server = start_llama_server()
        base_url, args.model = server.base_url, SERVER_MODEL_NAME
    try:
        rubric = Rubric.uniform_fixed()
        items = [(context, rubric, reply) for context, reply in esconv_items(data_dir(args.data_dir), args.n)]
        c = args.concurrency
        runs: dict[str, float] = {}
        print(f"{args.n} evaluations per variant against {base_url}", file=sys.stderr)
        runs["sdk c=1"], serial = sdk_run(base_url, args.model, items, 1)
        runs[f"sdk c={c} (1st)"], first = sdk_run(base_url, args.model, items, c)
        # The bare client sends the very bodies the SDK sends, in the response_format mode it settled on.
        from care_sdk import RubricEvaluator
        from care_sdk.backends.openai import OpenAIBackend

        probe = OpenAIBackend(model=args.model, base_url=base_url)
        evaluator = RubricEvaluator(probe)
        evaluator.evaluate_batch(items[:1])
        mode = probe.structured_output
        payloads = [probe.request_body(evaluator.request(*item)) for item in items]
        runs[f"bare c={c}"], bare_texts = asyncio.run(bare_run(base_url, payloads, c))
        runs[f"sdk c={c} (2nd)"], second = sdk_run(base_url, args.model, items, c)
    finally:
        if server is not None:
            server.stop()

    sdk_c = statistics.mean([runs[f"sdk c={c} (1st)"], runs[f"sdk c={c} (2nd)"]])
    speedup = runs["sdk c=1"] / sdk_c
    overhead = (sdk_c - runs[f"bare c={c}"]) / runs[f"bare c={c}"]
    same_scores = [e.scores for e in serial] == [e.scores for e in first] == [e.scores for e in second]
    rows = [(name, seconds, seconds / args.n, seconds / runs[f"bare c={c}"]) for name, seconds in runs.items()]

    print(f"\n{'variant':<16} {'wall s':>8} {'s/eval':>8} {'vs bare':>8}")
    for name, seconds, per, ratio in rows:
        print(f"{name:<16} {seconds:8.2f} {per:8.3f} {ratio:8.3f}")
    print(f"\nconcurrency speed-up (c=1 / c={c}): {speedup:.3f}x")
    print(f"SDK overhead over bare openai at c={c}: {overhead * 100:+.1f}% (target <= 5%)")
    print(f"same scores at c=1 and c={c}: {same_scores}; response_format mode: {mode}")

    result = {
        "benchmark": "bench_openai_async",
        "data": "esconv/test.jsonl",
        "role": "selection",
        "test_reads": 0,
        "n": args.n,
        "concurrency": c,
        "base_url": base_url,
        "model": args.model,
        "response_format_mode": mode,
        "seconds": runs,
        "speedup_c1_over_cN": speedup,
        "sdk_overhead_fraction": overhead,
        "same_scores_across_concurrency": same_scores,
        "bare_replies_parsed": len(bare_texts),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
