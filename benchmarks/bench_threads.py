"""The bundled reward's decoding threads on this machine: the demo's dialogues scored with each setting, side by side.

The demo's job (``care score examples/dialogues.jsonl --backend default``), run with ``score_file`` on the
bundled ``default`` backends opened with each setting of decoding threads (one, half the cores the process
may run on, all of them; prompts always on all of them), the settings alternating over ``--rounds``
rounds, each run a fresh model (no rubric cache, no warm KV cache). Reported: seconds a turn per setting,
each setting's ratio to one decoding thread, and whether every setting gave every turn the same reward
(threads change how the work is split, not what is computed).

    python benchmarks/bench_threads.py          # writes benchmarks/results/threads.json
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from care_lab.data.results import write_results
from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator
from care_sdk.backends import resolve_backend
from care_sdk.score_files import score_file

DIALOGUES = Path("examples/dialogues.jsonl")


def run_once(decode: int, prompts: int) -> tuple[float, list[float | None]]:
    """Seconds and per-turn rewards of one scoring of the demo's dialogues."""
    options = {"n_threads": decode, "n_threads_batch": prompts}
    reward = AdaptiveReward(
        RubricGenerator(resolve_backend("default", role="generator", **options), cache=False),
        RubricEvaluator(resolve_backend("default", role="evaluator", **options)),
    )
    records: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        score_file(DIALOGUES, reward, out=Path(tmp) / "out.jsonl", on_record=records.append)
        seconds = time.perf_counter() - start
    records.sort(key=lambda r: (r["id"], r["turn"]))
    return seconds, [r["reward"] for r in records]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/threads.json")
    args = parser.parse_args()
    with resolve_backend("default", role="evaluator") as probe:  # the backend's defaults: prompts on every usable core
        cores, default_decoding = probe.llama.n_threads_batch, probe.llama.n_threads
    settings = {f"decode_{n}": n for n in sorted({1, max(1, cores // 2), cores})}
    seconds: dict[str, list[float]] = {name: [] for name in settings}
    rewards: dict[str, list[float | None]] = {}
    for round_ in range(args.rounds):
        names = list(settings) if round_ % 2 == 0 else list(reversed(settings))
        for name in names:
            took, got = run_once(settings[name], cores)
            seconds[name].append(took)
            rewards.setdefault(name, got)
            print(f"round {round_ + 1} {name}: {took:.1f} s", file=sys.stderr, flush=True)
    turns = len(next(iter(rewards.values())))
    per_turn = {name: round(statistics.median(s) / turns, 2) for name, s in seconds.items()}
    one = per_turn["decode_1"]
    write_results(
        args.out,
        " ".join(["python", *sys.argv]),
        data=str(DIALOGUES),
        role="eval-only",
        test_reads=0,
        metrics={
            "seconds_per_turn": per_turn,
            "ratio_to_one_decoding_thread": {name: round(v / one, 3) for name, v in per_turn.items()},
            "same_rewards": all(r == rewards["decode_1"] for r in rewards.values()),
        },
        baselines={"decode_1_seconds_per_turn": one},
        extra={
            "turns": turns,
            "rounds": args.rounds,
            "usable_cores": cores,
            "prompt_threads": cores,
            "default_decoding_threads": default_decoding,
            "seconds": {name: [round(s, 1) for s in v] for name, v in seconds.items()},
            "machine": platform.processor() or platform.machine(),
        },
    )
    print(per_turn)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
