"""Evaluator wall time per reward, decoded against forced-position scoring, on the same items.

B ESConv contexts (valid split), G candidate replies each (the reference reply and replies from
other dialogues), one rubric per context written by the bundled generator. On each backend
(llama.cpp with the bundled SmolLM2, and transformers on the same model dequantised from its GGUF)
every group is scored twice, decoded under the JSON schema and forced (the reply built by the
evaluator, each score read at its position), with the model's cache emptied before each group
so both pay the shared prefill once; the two modes alternate which goes first. Reported:

- evaluator seconds per reward for both modes and their ratio;
- agreement of greedy forced scores with greedy decoded scores, per criterion, and every
  disagreement with the forced distribution there (a tie between digits, or not);
- the raw library's bound on the same prompts: the shared prefix prefilled once per group
  (amortised over its G rewards, as both modes pay it), then for each candidate its own tokens
  prefilled after the cached prefix and six single-token steps.

    python benchmarks/bench_forced_scoring.py --contexts 8 --group 8   # writes benchmarks/results/forced_scoring.json
    python benchmarks/bench_forced_scoring.py --report benchmarks/results/forced_scoring.json   # its table again
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _grpo_groups import Group, esconv_data, esconv_groups

from care_sdk import Backend, GenerationResult, RubricEvaluator, RubricGenerator, __version__
from care_sdk.backends import ForwardingBackend
from care_sdk.backends.base import Request
from care_sdk.backends.forced import common_prefix
from care_sdk.backends.llamacpp import LlamaCppBackend, default_model_path
from care_sdk.types import Evaluation, Rubric

TIE = 0.1
"""Two digits whose forced probabilities differ by less than this count as tied."""


class Recorder(ForwardingBackend):
    """Keeps the completions of the last batch (their logprobs carry the forced distributions)."""

    last: list[GenerationResult] = []  # noqa: RUF012 - replaced per batch

    def on_results(self, requests: Sequence[Request], results: Sequence[GenerationResult]) -> None:
        self.last = list(results)


def cold(backend: Backend) -> None:
    """Empty the model's cache so the next group pays its shared prefill."""
    if isinstance(backend, LlamaCppBackend):
        backend.llama.reset()
    else:
        backend._prefix.reset()  # type: ignore[attr-defined]


def score_group(evaluator: RubricEvaluator, recorder: Recorder, items: list[Any]) -> tuple[float, list[Any]]:
    cold(recorder.inner)
    start = time.perf_counter()
    out = evaluator.evaluate_batch(items)
    return time.perf_counter() - start, list(zip(out, recorder.last, strict=True))


def raw_bound_llamacpp(backend: LlamaCppBackend, requests: list[Request]) -> tuple[float, float]:
    """Seconds for the shared prefix once, and for the candidates' tokens after it plus six single-token steps."""
    llama: Any = backend.llama
    prompts = [backend._prompt_ids(r) for r in requests]
    shared = min(common_prefix(prompts[0], p) for p in prompts[1:])
    llama.reset()
    start = time.perf_counter()
    llama.eval(prompts[0][:shared])
    prefix = time.perf_counter() - start
    total = 0.0
    for prompt in prompts:
        llama.n_tokens = shared
        start = time.perf_counter()
        llama.eval(prompt[shared:])
        for _ in range(6):
            llama.eval([prompt[-1]])
        total += time.perf_counter() - start
    return prefix, total


def raw_bound_hf(backend: Any, requests: list[Request]) -> tuple[float, float]:
    """The same bound with transformers as constraints.txt pins it (5.24: the cache argument and
    output are named ``cache``; only the last position's logits computed)."""
    import torch

    extra = {"logits_to_keep": 1}
    prompts = [backend._prompt_ids(r.messages) for r in requests]
    shared = min(common_prefix(prompts[0], p) for p in prompts[1:])
    model = backend.model
    total = 0.0
    with torch.inference_mode():
        start = time.perf_counter()
        out = model(input_ids=torch.tensor([prompts[0][:shared]]), use_cache=True, **extra)
        prefix = time.perf_counter() - start
        cache = out.cache
        for prompt in prompts:
            cache.crop(shared - cache.get_seq_length())
            start = time.perf_counter()
            step = {"cache": cache, "use_cache": True, **extra}
            out = model(input_ids=torch.tensor([prompt[shared:]]), **step)
            for _ in range(6):
                out = model(input_ids=torch.tensor([[prompt[-1]]]), **step)
            total += time.perf_counter() - start
    return prefix, total


def compare(decoded: list[Any], forced: list[Any], texts: list[str]) -> dict[str, Any]:
    """Per-criterion agreement of greedy scores, with every disagreement explained or not."""
    total = agree = 0
    rows = []
    for item, ((d_ev, d_res), (f_ev, f_res)) in enumerate(zip(decoded, forced, strict=True)):
        if not isinstance(d_ev, Evaluation) or not isinstance(f_ev, Evaluation):
            rows.append({"item": item, "error": str(d_ev if not isinstance(d_ev, Evaluation) else f_ev)})
            continue
        slots = [t for t in f_res.completions[0].logprobs if t.top]
        earlier = False
        for c, (d, f) in enumerate(zip(d_ev.scores, f_ev.scores, strict=True)):
            total += 1
            if d.score == f.score:
                agree += 1
                continue
            probs = dict(sorted(((int(tok), round(2.718281828459045**lp, 4)) for tok, lp in slots[c].top)))
            gap = probs[int(f.score)] - probs[int(d.score)]
            rows.append(
                {
                    "item": item,
                    "criterion": f"c{c + 1}",
                    "decoded": int(d.score),
                    "forced": int(f.score),
                    "forced_distribution": probs,
                    "gap": round(gap, 4),
                    "tie": gap < TIE,
                    "after_earlier_disagreement": earlier,
                    "decoded_text": d_res.completions[0].text,
                }
            )
            earlier = True
    return {"criteria": total, "agree": agree, "agreement": agree / total if total else float("nan"), "rows": rows}


def run_backend(name: str, backend: Backend, groups: list[Group], rubrics: list[Rubric]) -> dict[str, Any]:
    recorder = Recorder(backend)
    decoded_eval = RubricEvaluator(recorder, mode="decoded")
    forced_eval = RubricEvaluator(recorder, mode="forced")
    times: dict[str, list[float]] = {"decoded": [], "forced": [], "raw_bound": [], "raw_candidate_bound": []}
    results: dict[str, list[Any]] = {"decoded": [], "forced": []}
    texts: list[str] = []
    for g, (group, rubric) in enumerate(zip(groups, rubrics, strict=True)):
        items = [(list(group.context), rubric, reply) for reply in group.replies]
        texts += list(group.replies)
        order = [("decoded", decoded_eval), ("forced", forced_eval)]
        for mode, evaluator in order if g % 2 == 0 else order[::-1]:
            seconds, out = score_group(evaluator, recorder, items)
            times[mode].append(seconds / len(items))
            results[mode] += out
        requests = [decoded_eval.request(*item) for item in items]
        if isinstance(backend, LlamaCppBackend):
            prefix, candidates = raw_bound_llamacpp(backend, requests)
        else:
            prefix, candidates = raw_bound_hf(backend, requests)
        times["raw_bound"].append((prefix + candidates) / len(items))
        times["raw_candidate_bound"].append(candidates / len(items))
        print(
            f"{name} group {g + 1}/{len(groups)}: decoded {times['decoded'][-1]:.2f} s/reward, "
            f"forced {times['forced'][-1]:.2f}, raw bound {times['raw_bound'][-1]:.2f}",
            flush=True,
        )
    per_reward = {mode: statistics.fmean(values) for mode, values in times.items()}
    return {
        "backend": backend.identity,
        "seconds_per_reward": per_reward,
        "forced_over_decoded": per_reward["forced"] / per_reward["decoded"],
        "raw_bound_over_forced": per_reward["raw_bound"] / per_reward["forced"],
        "per_group_forced_over_decoded": [f / d for f, d in zip(times["forced"], times["decoded"], strict=True)],
        "agreement": compare(results["decoded"], results["forced"], texts),
    }


def markdown(record: dict[str, Any]) -> str:
    lines = [
        f"# Forced-position scoring vs decoding ({record['rewards']} rewards, groups of {record['group']})",
        "",
        "| backend | decoded s/reward | forced s/reward | forced/decoded (median of groups) | raw bound s/reward |"
        " bound/forced | of which candidate + 6 steps | greedy agreement | replies differing (first at a tie) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in record["backends"].items():
        s = row["seconds_per_reward"]
        a = row["agreement"]
        firsts = [r for r in a["rows"] if "criterion" in r and not r["after_earlier_disagreement"]]
        median = statistics.median(row["per_group_forced_over_decoded"])
        lines.append(
            f"| {name} | {s['decoded']:.2f} | {s['forced']:.2f} | {row['forced_over_decoded']:.3f} ({median:.3f}) | "
            f"{s['raw_bound']:.2f} | {row['raw_bound_over_forced']:.3f} | {s['raw_candidate_bound']:.2f} | "
            f"{a['agree']}/{a['criteria']} ({a['agreement']:.1%}) | "
            f"{len(firsts)}/{record['rewards']} ({sum(r['tie'] for r in firsts)}) |"
        )
    for name, row in record["backends"].items():
        disagreements = [r for r in row["agreement"]["rows"] if "criterion" in r]
        lines += ["", f"## Disagreements on {name}: {len(disagreements)}", ""]
        if disagreements:
            lines.append("| item | criterion | decoded | forced | forced p(1..5) | gap | tie | after another |")
            lines.append("|---|---|---|---|---|---|---|---|")
        for r in disagreements:
            dist = " ".join(f"{p:.2f}" for p in r["forced_distribution"].values())
            lines.append(
                f"| {r['item']} | {r['criterion']} | {r['decoded']} | {r['forced']} | {dist} | {r['gap']:.3f} | "
                f"{'yes' if r['tie'] else 'no'} | {'yes' if r['after_earlier_disagreement'] else 'no'} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, default=8, help="B: contexts")
    parser.add_argument("--group", type=int, default=8, help="G: candidate replies per context")
    parser.add_argument("--backends", default="llamacpp,hf", help="comma-separated: llamacpp, hf")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for both backends")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/forced_scoring.json"))
    parser.add_argument("--report", type=Path, default=None, help="only print the table of this results file")
    args = parser.parse_args(argv)
    if args.report is not None:
        print(markdown(json.loads(args.report.read_text())))
        return

    groups = esconv_groups(args.contexts, args.group)
    llama = LlamaCppBackend(default_model_path(), n_threads=args.threads, n_ctx=4096)
    start = time.perf_counter()
    generator = RubricGenerator(resolve_generator(args.threads))
    rubrics = []
    for group in groups:
        rubric = generator.generate_batch([list(group.context)])[0]
        rubrics.append(rubric if isinstance(rubric, Rubric) else Rubric.uniform_fixed())
    print(f"{len(rubrics)} rubrics in {time.perf_counter() - start:.0f} s", flush=True)
    record: dict[str, Any] = {
        "benchmark": "forced_scoring",
        **esconv_data(),
        "care_sdk": __version__,
        "machine": platform.platform(),
        "threads": args.threads,
        "contexts": args.contexts,
        "group": args.group,
        "rewards": args.contexts * args.group,
        "tie_threshold": TIE,
        "backends": {},
    }
    for name in args.backends.split(","):
        if name == "llamacpp":
            backend: Backend = llama
        else:
            from care_sdk.backends.hf import HFBackend

            backend = HFBackend.from_gguf(default_model_path(), n_threads=args.threads, batch_size=args.group)
        record["backends"][name] = run_backend(name, backend, groups, rubrics)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print("\n" + markdown(record))


def resolve_generator(threads: int) -> Backend:
    """The bundled generator (its adapter on the bundled model)."""
    from care_sdk.backends import resolve_backend

    return resolve_backend("default", role="generator", n_threads=threads)


if __name__ == "__main__":
    main()
