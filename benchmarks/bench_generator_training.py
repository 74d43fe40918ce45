"""Generator training on a CPU: SFT of SmolLM2-135M-Instruct on ESConv targets, then preference GRPO.

Phases (``--phases data,sft,eval,grpo``; each reuses the previous phases' outputs under ``--out``):

- ``data``: build-data on ESConv train/test without a teacher model (targets: the fixed criteria
  with weights derived from the reference strategies' counts, i.e. the priority signal only).
- ``sft``: the SFT recipe on the bundled SmolLM2-135M-Instruct (converted from its GGUF).
- ``eval``: on ESConv-test supporter turns, the share of turns whose top-weighted dimension is
  among the reference strategies' top dimensions, and mean r_align, for the trained generator,
  the untrained base model (same decoding), uniform weights and a majority-class baseline,
  side by side; prints a table and writes ``eval.json``.
- ``grpo``: pref-GRPO from the SFT model with the bundled model (llama.cpp) as frozen evaluator,
  for ``--grpo-steps`` steps; logs every step to ``grpo_progress.jsonl`` and plots r_pref and
  r_align over steps (``grpo_rewards.png``).

Usage:
    python benchmarks/bench_generator_training.py --out runs/bench_generator_training
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from care_lab.training import r_align
from care_lab.training.build_data import build_data, count_weights
from care_lab.training.config import BuildDataConfig, PrefGRPOConfig, SFTStageConfig
from care_sdk.errors import CareError
from care_sdk.prompts import fixed_criteria
from care_sdk.types import DIMENSIONS, Dimension, Rubric

LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""LoRA targets; only the top ``--lora-layers`` of SmolLM2-135M's 30 layers are adapted, so backpropagation
stops there (several times cheaper on a CPU)."""


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _sample(rows: list[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    return rows[:n]


def phase_data(out: Path, args: argparse.Namespace) -> None:
    cfg = BuildDataConfig(
        output_dir=str(out / "data"),
        data_dir=args.data_dir,
        esconv_splits=("train", "test"),
        use_mint=False,
        teacher=None,
        target_judges=None,
        judges=None,
        annotator=None,
        offcontext_pairs=True,  # model-free pairs: the reference reply vs one from another dialogue
        seed=args.seed,
    )
    build_data(cfg)
    _write(
        out / "sft_train_subset.jsonl",
        _sample(_read(out / "data" / "sft" / "train.jsonl"), args.sft_examples, args.seed),
    )
    _write(
        out / "pairs_train_subset.jsonl",
        _sample(_read(out / "data" / "pairs" / "train.jsonl"), args.grpo_examples, args.seed),
    )


class _Progress:
    """A transformers callback that appends every log entry to a JSONL file as training goes."""

    def __init__(self, path: Path) -> None:
        from transformers import TrainerCallback

        self.path = path
        path.write_text("", encoding="utf-8")
        outer = self

        class _CB(TrainerCallback):  # type: ignore[misc]
            def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
                with outer.path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"step": state.global_step, "time": time.time(), **(logs or {})}) + "\n")

        self.callback = _CB()


def phase_sft(out: Path, args: argparse.Namespace) -> None:
    from trl import SFTTrainer

    from care_lab.training import sft as sft_module

    progress = _Progress(out / "sft_progress.jsonl")
    original = SFTTrainer.__init__

    def init(self: Any, *a: Any, **kw: Any) -> None:
        kw["callbacks"] = [*(kw.get("callbacks") or []), progress.callback]
        original(self, *a, **kw)

    SFTTrainer.__init__ = init  # type: ignore[method-assign]
    try:
        cfg = SFTStageConfig(
            data=str(out / "sft_train_subset.jsonl"),
            model="bundled",
            output_dir=str(out / "sft"),
            max_examples=args.sft_steps * args.batch,
            max_context_messages=args.context,
            finetune="lora",
            lora={
                "r": 32,
                "alpha": 64,
                "dropout": 0.0,
                "target_modules": LORA_MODULES,
                "layers_to_transform": tuple(range(30 - args.lora_layers, 30)),
            },
            trl={
                "max_steps": args.sft_steps,
                "per_device_train_batch_size": args.batch,
                "learning_rate": args.sft_lr,
                "max_length": 768,
                "logging_steps": 2,
                "lr_scheduler_type": "constant",
                "warmup_steps": 0,
            },
        )
        t0 = time.time()
        result = sft_module.run_sft(cfg)
        print(
            f"sft: {result.examples} examples, {len(result.losses)} logged losses, "
            f"first {result.losses[0]:.3f} last {result.losses[-1]:.3f}, {time.time() - t0:.0f} s"
        )
    finally:
        SFTTrainer.__init__ = original  # type: ignore[method-assign]


def _top_match(rubric: Rubric, counts: dict[str, int]) -> bool:
    best = max(counts.values())
    return best > 0 and counts[rubric.top_dimension.value] == best


def _score(rubrics: list[Rubric | CareError], rows: list[dict[str, Any]]) -> dict[str, float]:
    valid = [(r, row) for r, row in zip(rubrics, rows, strict=True) if isinstance(r, Rubric)]
    n = len(rows)
    matches = sum(_top_match(r, row["strategy_counts"]) for r, row in valid)
    aligns = [r_align(r, row["strategy_counts"]) for r, row in valid]
    return {
        "turns": n,
        "valid_share": len(valid) / n,
        "top_match_share": matches / n,
        "top_match_share_valid": matches / len(valid) if valid else float("nan"),
        "mean_r_align": sum(aligns) / n,
        "mean_r_align_valid": sum(aligns) / len(aligns) if aligns else float("nan"),
    }


def phase_eval(out: Path, args: argparse.Namespace) -> None:
    """Score the variants named by ``--variants`` (trained, base, baselines) into ``eval_<variant>.json``."""
    from care_lab.training.sft import load_trained_generator
    from care_sdk.generator import RubricGenerator

    rows = _sample(_read(out / "data" / "sft" / "test.jsonl"), args.eval_turns, args.seed + 1)
    contexts = [[{"role": m["role"], "content": m["content"]} for m in r["context"]][-args.context :] for r in rows]
    wanted = args.variants.split(",")
    results: dict[str, Any] = {}
    if "baselines" in wanted:
        train = _read(out / "data" / "sft" / "train.jsonl")
        tops = Counter(
            max(DIMENSIONS, key=lambda d: (r["strategy_counts"][d.value], -DIMENSIONS.index(d))).value for r in train
        )
        majority = Dimension(tops.most_common(1)[0][0])
        criteria = fixed_criteria()
        uniform = Rubric(weights=dict.fromkeys(DIMENSIONS, 1.0), criteria=criteria)
        results["uniform weights"] = _score([uniform] * len(rows), rows)
        majority_rubric = Rubric(weights=count_weights({majority: 1}), criteria=criteria)
        results[f"majority class ({majority.value})"] = _score([majority_rubric] * len(rows), rows)
        results["_train_top_dimension_shares"] = {k: v / sum(tops.values()) for k, v in tops.items()}
    models = {
        "trained": (
            "SFT-trained (transformers)",
            lambda: load_trained_generator(
                out / "sft", max_tokens=args.max_tokens, max_attempts=1, batch_size=args.eval_batch
            ),
        ),
        "base": (
            "untrained base (llama.cpp)",
            lambda: RubricGenerator("default", max_tokens=args.max_tokens, max_attempts=1),
        ),
    }
    for key in wanted:
        if key not in models:
            continue
        name, make = models[key]
        generator = make()
        t0 = time.time()
        rubrics = generator.generate_batch(contexts)
        seconds = time.time() - t0
        errors = Counter(type(r).__name__ for r in rubrics if not isinstance(r, Rubric))
        results[name] = {**_score(rubrics, rows), "seconds_per_turn": seconds / len(rows), "errors": dict(errors)}
        results[f"_{key}_rubric_weights"] = [
            {d.value: round(r.weights[d], 3) for d in DIMENSIONS} if isinstance(r, Rubric) else str(r)[:200]
            for r in rubrics
        ]
        print(f"eval: {name}: {results[name]}")
    (out / f"eval_{'_'.join(wanted)}.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    report(out, args)


def _unique_top_match(weights: dict[str, float], counts: dict[str, int]) -> bool:
    """The rubric has one largest weight (no tie) and its dimension has the largest strategy count."""
    top = max(weights.values())
    tops = [d for d, w in weights.items() if abs(w - top) < 1e-9]
    best = max(counts.values())
    return len(tops) == 1 and best > 0 and counts[tops[0]] == best


def report(out: Path, args: argparse.Namespace) -> None:
    """Merge every ``eval_*.json`` into ``eval.json`` and print the side-by-side table.

    Adds "unique top match": the share of turns whose rubric has a single largest weight on a
    dimension with the most reference strategies (uniform weights never count).
    """
    merged: dict[str, Any] = {}
    for path in sorted(out.glob("eval_*.json")):
        merged.update(json.loads(path.read_text(encoding="utf-8")))
    rows = _sample(_read(out / "data" / "sft" / "test.jsonl"), args.eval_turns, args.seed + 1)
    variants = {k: v for k, v in merged.items() if not k.startswith("_")}
    for name, r in variants.items():
        key = "trained" if name.startswith("SFT") else "base" if name.startswith("untrained") else None
        if key and f"_{key}_rubric_weights" in merged:
            weights = merged[f"_{key}_rubric_weights"]
            pairs = zip(weights, rows, strict=True)
            hits = sum(isinstance(w, dict) and _unique_top_match(w, row["strategy_counts"]) for w, row in pairs)
            r["unique_top_match_share"] = hits / len(rows)
        elif name.startswith("uniform"):
            r["unique_top_match_share"] = 0.0
        elif name.startswith("majority"):
            r["unique_top_match_share"] = r["top_match_share"]
    header = (
        f"{'variant':<30} {'valid':>6} {'top match':>10} {'unique top match':>17} {'top match|valid':>16} "
        f"{'mean r_align':>13}"
    )
    print(header + "\n" + "-" * len(header))
    for name, r in variants.items():
        print(
            f"{name:<30} {r['valid_share']:>6.2f} {r['top_match_share']:>10.3f} "
            f"{r.get('unique_top_match_share', float('nan')):>17.3f} {r['top_match_share_valid']:>16.3f} "
            f"{r['mean_r_align']:>13.3f}"
        )
    majority = next((v for k, v in variants.items() if k.startswith("majority")), None)
    trained = variants.get("SFT-trained (transformers)")
    if majority and trained and majority["top_match_share"]:
        ratio = trained["top_match_share"] / majority["top_match_share"]
        print(f"top-match ratio, SFT-trained / majority class: {ratio:.2f}")
    merged["_eval_turns"] = args.eval_turns
    merged["_context_messages"] = args.context
    (out / "eval.json").write_text(json.dumps(merged, indent=2), encoding="utf-8")


def phase_grpo(out: Path, args: argparse.Namespace) -> None:
    from care_lab.training.pref_grpo import run_pref_grpo

    progress = _Progress(out / "grpo_progress.jsonl")
    cfg = PrefGRPOConfig(
        data=str(out / "pairs_train_subset.jsonl"),
        model=str(out / "sft"),
        output_dir=str(out / "grpo"),
        evaluator="default",
        evaluator_max_attempts=1,
        max_context_messages=args.context,
        lora={
            "r": 16,
            "alpha": 32,
            "dropout": 0.0,
            "target_modules": LORA_MODULES,
            "layers_to_transform": tuple(range(30 - args.lora_layers, 30)),
        },
        trl={
            "max_steps": args.grpo_steps,
            "num_generations": 4,
            "per_device_train_batch_size": 4,
            "max_completion_length": args.max_tokens,
            "learning_rate": args.grpo_lr,
            "logging_steps": 1,
            "temperature": 1.0,
        },
    )
    t0 = time.time()
    result = run_pref_grpo(cfg, callbacks=[progress.callback])
    print(f"grpo: {len(result.rewards)} steps in {time.time() - t0:.0f} s")
    plot_grpo(out)


def plot_grpo(out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logs = [r for r in _read(out / "grpo_progress.jsonl") if "rewards/r_pref/mean" in r]
    steps = [r["step"] for r in logs]
    fig, ax = plt.subplots(figsize=(7, 4))
    for term in ("r_pref", "r_align", "format"):
        ax.plot(steps, [r[f"rewards/{term}/mean"] for r in logs], marker="o", label=term)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean reward over the step's completions")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("pref-GRPO of SmolLM2-135M (SFT init), evaluator: bundled model")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "grpo_rewards.png", dpi=120)
    print(f"{'step':>5} {'format':>7} {'r_pref':>7} {'r_align':>8}")
    for r in logs:
        print(
            f"{r['step']:>5} {r['rewards/format/mean']:>7.3f} {r['rewards/r_pref/mean']:>7.3f} "
            f"{r['rewards/r_align/mean']:>8.3f}"
        )
    (out / "grpo.json").write_text(json.dumps(logs, indent=2), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_generator_training"))
    parser.add_argument("--phases", default="data,sft,eval,grpo")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--context", type=int, default=2, help="context messages in prompts")
    parser.add_argument("--lora-layers", type=int, default=4, help="adapt only the top N decoder layers")
    parser.add_argument("--sft-examples", type=int, default=2000)
    parser.add_argument("--sft-steps", type=int, default=30)
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--eval-turns", type=int, default=40)
    parser.add_argument("--eval-batch", type=int, default=8)
    parser.add_argument("--variants", default="baselines,trained,base", help="eval variants: baselines,trained,base")
    parser.add_argument("--max-tokens", type=int, default=190)
    parser.add_argument("--grpo-examples", type=int, default=400)
    parser.add_argument("--grpo-steps", type=int, default=20)
    parser.add_argument("--grpo-lr", type=float, default=2e-5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    phases = {"data": phase_data, "sft": phase_sft, "eval": phase_eval, "grpo": phase_grpo, "plot": plot_grpo}
    for name in args.phases.split(","):
        t0 = time.time()
        print(f"== phase {name}")
        if name == "plot":
            plot_grpo(args.out)
        elif name == "report":
            report(args.out, args)
        else:
            phases[name](args.out, args)
        print(f"== phase {name} done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
