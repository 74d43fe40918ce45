"""GPU check: rubrics and evaluations at volume on an in-process vLLM engine.

Loads a small instruct model with vLLM, writes ``--rubrics`` rubrics (default 32) with
``RubricGenerator`` and scores ``--replies`` candidate replies per context (default 8, so 256
evaluations) with ``RubricEvaluator`` (expected scores from logprobs), all on ``VLLMBackend``.
Prints the share of replies valid on the first try and after the SDK's retries, and the
throughput, as a table; writes JSON. Exits 1 when validity after retries is below ``--min-valid``.

Needs a CUDA GPU, ``pip install "care-sdk[vllm]"`` and the model's weights on local disk (a
directory, or a model id already in the Hugging Face cache). On one H200 the 0.5B default loads
in about a minute and the whole check takes well under five. Contexts come from ESConv's test
split when the shared data is present (``$CARE_DATA_DIR``), else from a built-in set.

    python benchmarks/gpu_check.py --model Qwen/Qwen2.5-0.5B-Instruct --out benchmarks/results/gpu_check.json

``--backend SPEC`` runs the same check on any other backend (e.g. ``default`` or ``hf:PATH``)
with small counts, to try the script without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from care_sdk import (
    Backend,
    CareError,
    RubricEvaluator,
    RubricGenerator,
    __version__,
    resolve_backend,
)
from care_sdk.testing import RecordingBackend
from care_sdk.types import Rubric

DATA = Path(os.environ["CARE_DATA_DIR"]) if os.environ.get("CARE_DATA_DIR") else None
"""The data directory, when $CARE_DATA_DIR names one; otherwise the built-in contexts are used."""

BUILT_IN_CONTEXTS = [
    "I failed my driving test for the third time and I feel like an idiot.",
    "My best friend moved to another country and I don't know how to make new friends.",
    "I got laid off yesterday after eight years at the company.",
    "My mum was diagnosed with dementia and I'm the only one who can look after her.",
    "I can't stop worrying about my exams; I haven't slept properly in a week.",
    "My partner and I keep arguing about money and I'm scared we'll break up.",
    "I was passed over for a promotion again, and my manager won't explain why.",
    "Since the pandemic I barely leave the house and I feel really lonely.",
    "My dog died last week and everyone says it's just a dog.",
    "I'm starting a new job on Monday and I'm terrified I'll mess it up.",
    "My teenage son won't talk to me anymore; he just stays in his room.",
    "I moved to a new city for university and I feel completely lost.",
]
CANDIDATE_REPLIES = [
    "That sounds really hard. What has been weighing on you the most?",
    "Just stay positive, things will get better.",
    "It makes sense that you feel this way; anyone in your place would be shaken. What would help right now?",
    "You should see a professional.",
    "I hear how much this hurts. Would it help to think through one small thing you could do this week?",
    "Everyone goes through that.",
    "It sounds like you've been carrying this alone for a while. Who could you lean on?",
    "Have you tried not thinking about it?",
]


class Recorder(RecordingBackend):
    """Records batch sizes (batch k holds attempt k) and token counts of the real backend's replies."""

    @property
    def first_batch_errors(self) -> int:
        return sum(not result.ok for result in self.results[: self.batches[0]]) if self.batches else 0

    @property
    def completion_tokens(self) -> int:
        return sum(result.usage.get("completion_tokens", 0) for result in self.results)

    @property
    def prompt_tokens(self) -> int:
        return sum(result.usage.get("prompt_tokens", 0) for result in self.results)


def contexts(n: int) -> tuple[list[list[dict[str, str]]], str]:
    """``n`` dialogue contexts ending with a seeker message, and where they came from."""
    path = DATA / "esconv" / "test.jsonl" if DATA is not None else None
    if path is not None and path.exists():
        from care_lab.data import load_esconv

        found = []
        for dialogue in load_esconv(path).records:
            messages = [m.model_dump() for m in dialogue.messages]
            ends = [i for i, m in enumerate(messages) if m["role"] == "user" and i >= 2]
            if ends:
                end = ends[min(len(ends) - 1, len(found) % 3)]
                found.append(messages[max(0, end - 6) : end + 1])
            if len(found) == n:
                return found, "ESConv test split"
    base = [[{"role": "user", "content": text}] for text in BUILT_IN_CONTEXTS]
    return [base[i % len(base)] for i in range(n)], "built-in contexts"


def summarise(recorder: Recorder, outcomes: Sequence[object], seconds: float) -> dict[str, Any]:
    """First-try and after-retries validity, requests, throughput and the errors left.

    A first-try failure is a reply that was retried (it did not parse) or a request that failed.
    """
    n = len(outcomes)
    retried = recorder.batches[1] if len(recorder.batches) > 1 else 0
    retried += recorder.first_batch_errors
    valid = sum(not isinstance(o, CareError) for o in outcomes)
    return {
        "items": n,
        "first_try_valid": (n - retried) / n if n else 0.0,
        "valid_after_retries": valid / n if n else 0.0,
        "backend_requests": sum(recorder.batches),
        "seconds": seconds,
        "items_per_second": n / seconds if seconds else 0.0,
        "prompt_tokens": recorder.prompt_tokens,
        "completion_tokens": recorder.completion_tokens,
        "completion_tokens_per_second": recorder.completion_tokens / seconds if seconds else 0.0,
        "errors": [str(o) for o in outcomes if isinstance(o, CareError)][:10],
    }


def build_backend(args: argparse.Namespace) -> Backend:
    """The backend under test: a VLLMBackend on ``--model``, or ``--backend SPEC``."""
    if args.backend:
        return resolve_backend(args.backend)
    from care_sdk.backends.vllm import VLLMBackend

    return VLLMBackend(
        args.model,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.tensor_parallel_size,
        enforce_eager=args.enforce_eager,
        seed=args.seed,
    )


def environment() -> dict[str, Any]:
    """Versions and the device, for the report."""
    info: dict[str, Any] = {"care_sdk": __version__, "python": platform.python_version()}
    for module in ("vllm", "torch", "transformers"):
        try:
            info[module] = __import__(module).__version__
        except ImportError:
            info[module] = None
    try:
        import torch

        info["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except ImportError:
        info["device"] = None
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct", help="model id or local path for vLLM")
    parser.add_argument("--backend", default=None, help="run on this backend spec instead of vLLM")
    parser.add_argument("--rubrics", type=int, default=32, help="contexts (one rubric each)")
    parser.add_argument("--replies", type=int, default=8, help="candidate replies scored per context")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument(
        "--enforce-eager",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="skip CUDA graph capture (faster start-up for a short check)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--logprobs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="score with expected values from the score tokens' logprobs",
    )
    parser.add_argument("--min-valid", type=float, default=0.9, help="least validity after retries to pass")
    parser.add_argument("--out", default="benchmarks/results/gpu_check.json")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    backend = build_backend(args)
    load_seconds = time.perf_counter() - start
    items, source = contexts(args.rubrics)

    gen_rec = Recorder(backend)
    start = time.perf_counter()
    rubrics = RubricGenerator(gen_rec, cache=False, seed=args.seed).generate_batch(items)
    gen = summarise(gen_rec, rubrics, time.perf_counter() - start)

    eval_items = [
        (context, rubric if isinstance(rubric, Rubric) else Rubric.uniform_fixed(), reply)
        for context, rubric in zip(items, rubrics, strict=True)
        for reply in (CANDIDATE_REPLIES * (args.replies // len(CANDIDATE_REPLIES) + 1))[: args.replies]
    ]
    ev_rec = Recorder(backend)
    start = time.perf_counter()
    evaluations = RubricEvaluator(ev_rec, use_logprobs=args.logprobs, seed=args.seed).evaluate_batch(eval_items)
    ev = summarise(ev_rec, evaluations, time.perf_counter() - start)
    scored = [e for e in evaluations if not isinstance(e, CareError)]
    ev["share_with_distribution"] = (
        sum(all(s.distribution is not None for s in e.scores) for e in scored) / len(scored) if scored else 0.0
    )

    print(f"backend: {backend.identity}   contexts: {len(items)} ({source})   load: {load_seconds:.1f} s")
    header = f"| {'component':<10} | {'items':>5} | {'valid 1st try':>13} | {'after retries':>13} | {'requests':>8} "
    header += f"| {'items/s':>8} | {'gen tok/s':>9} |"
    print(header)
    print("|" + "|".join("-" * (len(cell) + 0) for cell in header.split("|")[1:-1]) + "|")
    for name, s in (("generator", gen), ("evaluator", ev)):
        tok_s = s["completion_tokens_per_second"]
        print(
            f"| {name:<10} | {s['items']:>5} | {s['first_try_valid']:>13.1%} | {s['valid_after_retries']:>13.1%} "
            f"| {s['backend_requests']:>8} | {s['items_per_second']:>8.1f} | {tok_s:>9.0f} |"
        )
    print(f"evaluations with a logprob score distribution: {ev['share_with_distribution']:.1%}")
    passed = gen["valid_after_retries"] >= args.min_valid and ev["valid_after_retries"] >= args.min_valid
    report = {
        "backend": backend.identity,
        "contexts": source,
        "load_seconds": load_seconds,
        "generator": gen,
        "evaluator": ev,
        "min_valid": args.min_valid,
        "passed": passed,
        "environment": environment(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"{'PASS' if passed else 'FAIL'} (validity after retries >= {args.min_valid:.0%}); wrote {out}")
    backend.close()
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
