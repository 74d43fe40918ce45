"""Validity over volume: how often real generator and evaluator replies parse and validate.

Runs N rubric generations and N evaluations on real ESConv test contexts with a real backend
(default: the bundled SmolLM2 on llama.cpp) and reports the share valid on the first try and after
the SDK's retries. Prints a table and writes JSON.

    python benchmarks/bench_validity.py --n 50 --out benchmarks/results/validity.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from care_sdk import (
    CareError,
    RubricEvaluator,
    RubricGenerator,
    __version__,
    resolve_backend,
)
from care_sdk.testing import RecordingBackend

DATA = Path(os.environ.get("CARE_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))


def esconv_items(n: int) -> list[tuple[list[dict[str, str]], str]]:
    """(context, reference reply) for the first ``n`` supporter turns with context, spread over dialogues."""
    items = []
    with (DATA / "esconv" / "test.jsonl").open() as handle:
        for line in handle:
            dialog = json.loads(line)["dialog"]
            messages: list[dict[str, str]] = []
            for utt in dialog:
                role = "assistant" if utt["speaker"] == "sys" else "user"
                if messages and messages[-1]["role"] == role:
                    messages[-1]["content"] += " " + utt["text"].strip()
                else:
                    messages.append({"role": role, "content": utt["text"].strip()})
            turns = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i >= 3]
            if turns:
                i = turns[min(len(turns) - 1, len(items) % 4)]
                items.append((messages[max(0, i - 8) : i], messages[i]["content"]))
            if len(items) == n:
                break
    return items


def summarise(recorder: RecordingBackend, outcomes: Sequence[object], seconds: float) -> dict[str, Any]:
    n = recorder.batches[0]
    retried = recorder.batches[1] if len(recorder.batches) > 1 else 0
    valid = sum(not isinstance(o, CareError) for o in outcomes)
    errors = [str(o) for o in outcomes if isinstance(o, CareError)]
    return {
        "calls": n,
        "first_try_valid": (n - retried) / n,
        "valid_after_retries": valid / n,
        "backend_requests": sum(recorder.batches),
        "seconds_per_call": seconds / n,
        "errors": errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="default")
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--out", default="benchmarks/results/validity.json")
    args = parser.parse_args()

    backend = resolve_backend(args.backend)
    items = esconv_items(args.n)
    gen_rec, ev_rec = RecordingBackend(backend), RecordingBackend(backend)
    generator = RubricGenerator(gen_rec, cache=False)
    start = time.perf_counter()
    rubrics = generator.generate_batch([c for c, _ in items])
    gen_stats = summarise(gen_rec, rubrics, time.perf_counter() - start)

    from care_sdk import Rubric

    eval_items = [
        (c, r if not isinstance(r, CareError) else Rubric.uniform_fixed(), reply)
        for (c, reply), r in zip(items, rubrics, strict=False)
    ]
    start = time.perf_counter()
    evaluations = RubricEvaluator(ev_rec).evaluate_batch(eval_items)
    ev_stats = summarise(ev_rec, evaluations, time.perf_counter() - start)

    print(f"backend: {backend.identity}   items: {len(items)} ESConv test supporter turns")
    header = ("component", "calls", "valid 1st try", "valid after retries", "requests", "s/call")
    print("| " + " | ".join(f"{h:>{w}}" for h, w in zip(header, (10, 5, 13, 19, 8, 6), strict=True)) + " |")
    print(f"|{'-' * 12}|{'-' * 7}|{'-' * 15}|{'-' * 21}|{'-' * 10}|{'-' * 8}|")
    for name, s in (("generator", gen_stats), ("evaluator", ev_stats)):
        print(
            f"| {name:<10} | {s['calls']:>5} | {s['first_try_valid']:>12.1%} | {s['valid_after_retries']:>18.1%} "
            f"| {s['backend_requests']:>8} | {s['seconds_per_call']:>6.2f} |"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "backend": backend.identity,
        "care_sdk": __version__,
        "python": platform.python_version(),
        "generator": gen_stats,
        "evaluator": ev_stats,
    }
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
