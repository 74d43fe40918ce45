"""How often a GRPO group's rewards are all equal, with sampled scores and with logprob-expected scores.

A group whose G rewards are identical has zero standard deviation: GRPO gives every reply in it
zero advantage, so the group teaches nothing. Integer 1-5 scores from a small judge tie often;
scoring each criterion by its expected value under the score tokens' probabilities makes rewards
continuous. This benchmark scores real ESConv groups (each context with the reference reply and
replies from other dialogues) with the same rubric both ways, on one real backend with logprobs
(default: the bundled SmolLM2 on llama.cpp), and reports the share of zero-std groups.

    python benchmarks/bench_logprob_ties.py --contexts 16 --group 8 --out benchmarks/results/logprob_ties.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from _grpo_groups import esconv_data, esconv_groups

from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator, __version__
from care_sdk.backends.llamacpp import LlamaCppBackend, default_model_path

TOL = 1e-9


def summarise(groups: list[list[float | None]]) -> dict[str, float]:
    complete = [g for g in groups if all(r is not None for r in g)]
    stds = [statistics.pstdev([r for r in g if r is not None]) for g in complete]
    values = [r for g in complete for r in g if r is not None]
    return {
        "groups": len(groups),
        "groups_with_failures": len(groups) - len(complete),
        "zero_std_groups": sum(s <= TOL for s in stds),
        "zero_std_fraction": sum(s <= TOL for s in stds) / len(stds) if stds else float("nan"),
        "mean_group_std": statistics.fmean(stds) if stds else float("nan"),
        "distinct_rewards": len({round(v, 9) for v in values}),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: the bundled SmolLM2)")
    parser.add_argument("--contexts", type=int, default=16, help="groups (one context each)")
    parser.add_argument("--group", type=int, default=8, help="replies per group")
    parser.add_argument("--n-ctx", type=int, default=3072)
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: all cores)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/logprob_ties.json"))
    args = parser.parse_args(argv)

    backend = LlamaCppBackend(
        args.model or default_model_path(), n_ctx=args.n_ctx, n_threads=args.threads, logprobs=True
    )
    generator = RubricGenerator(backend)  # shared: both variants judge against the same rubrics
    groups = esconv_groups(args.contexts, args.group)
    prompts = [list(g.context) for g in groups for _ in g.replies]
    completions = [r for g in groups for r in g.replies]
    rows = {}
    for name, use_logprobs in (("sampled", False), ("expected", True)):
        reward = AdaptiveReward(generator, RubricEvaluator(backend, use_logprobs=use_logprobs))
        start = time.perf_counter()
        rewards = reward(prompts, completions)
        wall = time.perf_counter() - start
        per_group = [rewards[i * args.group : (i + 1) * args.group] for i in range(len(groups))]
        rows[name] = {**summarise(per_group), "wall_s": wall}
        print(f"{name}: {wall:.1f} s", flush=True)

    print(f"\n{len(groups)} ESConv groups of {args.group} replies on {backend.identity}\n")
    print(f"{'metric':22} {'sampled':>10} {'expected':>10}")
    for key in rows["sampled"]:
        print(f"{key:22} {rows['sampled'][key]:10.3f} {rows['expected'][key]:10.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": "logprob_ties",
        **esconv_data(),
        "care_sdk": __version__,
        "backend": backend.identity,
        "machine": platform.platform(),
        "contexts": len(groups),
        "group": args.group,
        "rows": rows,
    }
    args.out.write_text(json.dumps(record, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
