"""Cost of CARE rewards for a GRPO-shaped batch: a naive pipeline against AdaptiveReward.

B contexts from ESConv, G candidate replies each, all scored on one real backend (default: the
bundled SmolLM2 on llama.cpp):

- naive: a new rubric for every reply (no sharing, no cache) and one evaluator call per criterion;
- care:  AdaptiveReward: one rubric per context (cached), all criteria scored in one call.

Prints wall time, backend calls and prompt tokens per reward for both, with the ratios, and
writes JSON. ``--evaluator-mode`` picks how both pipelines' evaluators score (``auto``: forced
positions where the backend supports it, see docs/backends/forced.md; ``decoded``: the reply
decoded under its schema).

    python benchmarks/bench_cost.py --contexts 8 --group 8 --out benchmarks/results/cost.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Sequence
from pathlib import Path

from _grpo_groups import Group, esconv_data, esconv_groups

from care_lab.bench.meter import Meter
from care_sdk import (
    AdaptiveReward,
    Backend,
    GenerationRequest,
    RubricEvaluator,
    RubricGenerator,
    __version__,
    resolve_backend,
)
from care_sdk.backends import ForcedReplies, ForcedRequest
from care_sdk.backends.llamacpp import LlamaCppBackend, default_model_path
from care_sdk.evaluator import forced_evaluation
from care_sdk.prompts import evaluation_schema
from care_sdk.types import Dimension, Message, Rubric


def naive_rewards(meter: Meter, groups: list[Group], mode: str) -> list[float | None]:
    """A new rubric per reply, then one single-criterion evaluator request per criterion."""
    generator = RubricGenerator(meter, cache=False)
    evaluator = RubricEvaluator(meter, mode=mode)
    rewards: list[float | None] = []
    for group in groups:
        context = list(group.context)
        for reply in group.replies:
            rubric = generator.generate_batch([context])[0]
            if not isinstance(rubric, Rubric):
                rewards.append(None)
                continue
            rewards.append(_naive_score(meter, evaluator, context, rubric, reply))
    return rewards


def _naive_score(
    meter: Meter, evaluator: RubricEvaluator, context: list[Message], rubric: Rubric, reply: str
) -> float | None:
    full = evaluator.request(context, rubric, reply)
    lines = "\n".join(f"c{i + 1} ({c.dimension.value}): {c.text}" for i, c in enumerate(rubric.criteria))
    per_dim: dict[Dimension, list[float]] = {}
    for criterion in rubric.criteria:
        single = f"c1 ({criterion.dimension.value}): {criterion.text}"
        messages = list(full.messages)
        messages[-1] = Message(role="user", content=messages[-1].content.replace(lines, single))
        if isinstance(meter, ForcedReplies) and evaluator.forced:
            forced = ForcedRequest(messages=tuple(messages), reply=forced_evaluation(1), seed=0)
            result = meter.forced_replies([forced])[0]
        else:
            request = GenerationRequest(
                messages=tuple(messages), json_schema=evaluation_schema(1), max_tokens=evaluator.max_tokens, seed=0
            )
            result = meter.generate([request])[0]
        try:
            score = int(json.loads(result.text)["scores"]["c1"])
        except (ValueError, KeyError, TypeError):
            return None  # counted as a failed reward
        per_dim.setdefault(criterion.dimension, []).append((score - 1) / 4)
    return sum(rubric.weights[d] * sum(v) / len(v) for d, v in per_dim.items())


def measured_backend(spec: str, threads: int | None) -> Backend:
    """The backend both roles share: for ``default``, the bundled base model on llama.cpp without adapters
    (one model, so every request is counted at one place) on ``threads``; else ``spec`` resolved."""
    if spec == "default":
        return LlamaCppBackend(default_model_path(), n_threads=threads)
    return resolve_backend(spec)


def care_rewards(meter: Meter, groups: list[Group], mode: str) -> list[float | None]:
    """AdaptiveReward over the whole batch, as TRL would call it."""
    reward = AdaptiveReward(RubricGenerator(meter), RubricEvaluator(meter, mode=mode))
    prompts = [list(g.context) for g in groups for _ in g.replies]
    completions = [r for g in groups for r in g.replies]
    return reward(prompts, completions)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="default", help="backend spec (default: bundled SmolLM2, llama.cpp)")
    parser.add_argument("--contexts", type=int, default=8, help="B: contexts in the batch")
    parser.add_argument("--group", type=int, default=8, help="G: replies per context")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads for --backend default")
    parser.add_argument("--evaluator-mode", default="auto", choices=("auto", "forced", "decoded"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cost.json"))
    args = parser.parse_args(argv)

    groups = esconv_groups(args.contexts, args.group)
    backend = measured_backend(args.backend, args.threads)
    n = sum(len(g.replies) for g in groups)
    rows: dict[str, dict[str, float]] = {}
    for name, run in (("naive", naive_rewards), ("care", care_rewards)):
        meter = Meter(backend)
        start = time.perf_counter()
        rewards = run(meter, groups, args.evaluator_mode)
        wall = time.perf_counter() - start
        rows[name] = {
            "wall_s": wall,
            "calls": meter.totals["calls"],
            "generator_calls": meter.by_role["generator"]["calls"],
            "evaluator_calls": meter.by_role["evaluator"]["calls"],
            "generator_prompt_tokens_per_reward": meter.by_role["generator"]["prompt_tokens"] / n,
            "evaluator_prompt_tokens_per_reward": meter.by_role["evaluator"]["prompt_tokens"] / n,
            "failed": sum(r is None for r in rewards),
        }
        print(f"{name}: {wall:.1f} s, {rows[name]['calls']:.0f} calls", flush=True)

    keys = list(rows["naive"])
    print(f"\nB={args.contexts} contexts x G={args.group} replies = {n} rewards on {backend.identity}\n")
    print(f"{'metric':38} {'naive':>10} {'care':>10} {'care/naive':>11}")
    for key in keys:
        a, b = rows["naive"][key], rows["care"][key]
        ratio = f"{b / a:.3f}" if a else "-"
        print(f"{key:38} {a:10.1f} {b:10.1f} {ratio:>11}")
    verdict = rows["care"]["wall_s"] <= rows["naive"]["wall_s"] / 5
    print(f"\ngoal care <= 1/5 of naive wall time: {'met' if verdict else 'NOT met'}")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": "cost",
        **esconv_data(),
        "care_sdk": __version__,
        "backend": backend.identity,
        "machine": platform.platform(),
        "contexts": args.contexts,
        "group": args.group,
        "rewards": n,
        "evaluator_mode": args.evaluator_mode,
        "evaluator_forced": RubricEvaluator(backend, mode=args.evaluator_mode).forced,
        "rows": rows,
        "ratios": {k: (rows["care"][k] / rows["naive"][k] if rows["naive"][k] else None) for k in keys},
    }
    args.out.write_text(json.dumps(record, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
