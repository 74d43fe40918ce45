"""HTML report: time to build and file size, for synthetic ``care score`` output of growing size.

Generates score records and their dialogues (generated criteria, a few failures, realistic reply
lengths), then builds the report with and without the dialogue file for each size, side by side.
No model is involved: this measures the report alone. Where Chromium is installed, it also opens
each report headless and reads how long the page's script took to parse the data and draw the
first page (``open ms``).

Usage:
    python benchmarks/bench_report.py                       # 1,000 and 10,000 turns
    python benchmarks/bench_report.py --turns 1000 10000 50000 --out /tmp/bench_report.json
    python benchmarks/bench_report.py --keep /tmp/report_10k   # keep the inputs and reports
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "benchmarks" / "results" / "report.json"
DIMS = ("cognitive", "affective", "proactive")
SAMPLE = (
    "I hear how heavy this has been for you and it makes sense that you feel worn out after weeks of "
    "pressure at work what would help most right now could we look at one small step together you "
    "said your manager never listens that sounds lonely and frustrating"
)
WORDS = SAMPLE.split()
CRITERIA = {
    "cognitive": ["Reflects the user's view of the conflict in their own terms", "Helps separate facts from fears"],
    "affective": ["Names the exhaustion without minimising it", "Validates the anger as understandable"],
    "proactive": ["Offers one concrete next step the user chooses", "Builds on what the user already tried"],
}


def _text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))).capitalize() + "."


def synthetic(turns: int, per_dialogue: int = 10, seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(score records, dialogues)`` with ``turns`` assistant turns, ``per_dialogue`` per dialogue, ~2 % failed."""
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    dialogues: list[dict[str, Any]] = []
    by = {
        "generator": "llamacpp:model.gguf|prompt=v1|k=2|t=0.0|seed=0|max_tokens=320",
        "evaluator": "llamacpp:model.gguf|t=0.0|seed=0|max_tokens=160|logprobs=False",
        "prompt_version": "v1",
        "care_sdk": "0.1.0",
        "weights": "generated",
        "criteria": "generated",
    }
    for d in range(0, turns, per_dialogue):
        did = f"synthetic-{d // per_dialogue:05d}"
        messages: list[dict[str, str]] = []
        for k in range(min(per_dialogue, turns - d)):
            messages.append({"role": "user", "content": _text(rng, 10, 60)})
            messages.append({"role": "assistant", "content": _text(rng, 20, 90)})
            index = len(messages) - 1
            raw = [rng.random() + (0.6 if i == k % 3 else 0) for i in range(3)]
            weights = {dim: v / sum(raw) for dim, v in zip(DIMS, raw, strict=True)}
            rubric = {
                "weights": weights,
                "criteria": [  # generated criteria differ from turn to turn
                    {"dimension": dim, "text": f"{t}: {_text(rng, 3, 8).lower()}"}
                    for dim in DIMS
                    for t in CRITERIA[dim]
                ],
            }
            if rng.random() < 0.02:
                records.append(
                    {
                        "id": did,
                        "turn": index,
                        "reward": None,
                        "rubric": rubric,
                        "evaluation": None,
                        "dimension_scores": None,
                        "error": "evaluation failed: no valid reply after 3 attempts",
                        "scored_by": by,
                    }
                )
                continue
            scores = [
                {
                    "dimension": c["dimension"],
                    "criterion": c["text"],
                    "score": float(rng.randint(1, 5)),
                    "distribution": None,
                }
                for c in rubric["criteria"]
            ]
            dim_scores = {dim: sum((s["score"] - 1) / 4 for s in scores if s["dimension"] == dim) / 2 for dim in DIMS}
            reward = sum(weights[dim] * dim_scores[dim] for dim in DIMS)
            records.append(
                {
                    "id": did,
                    "turn": index,
                    "reward": reward,
                    "error": None,
                    "rubric": rubric,
                    "evaluation": {"scores": scores},
                    "dimension_scores": dim_scores,
                    "scored_by": by,
                }
            )
        dialogues.append({"id": did, "messages": messages})
    return records, dialogues


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def open_ms(path: Path) -> int | None:
    """Milliseconds the page's script takes to parse the data and draw the first page, in headless Chromium."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        return None
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--dump-dom"]
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [binary, *flags, f"--user-data-dir={profile}", path.as_uri()], capture_output=True, text=True, timeout=300
        ).stdout
    found = re.search(r'data-ready-ms="(\d+)"', dom)
    return int(found.group(1)) if found else None


def run(sizes: list[int], folder: Path, repeats: int) -> list[dict[str, Any]]:
    """Build each report ``repeats`` times; the fastest run counts."""
    from care_sdk.report import write_report

    rows = []
    for n in sizes:
        records, dialogues = synthetic(n)
        scores = _write(folder / f"scores_{n}.jsonl", records)
        texts = _write(folder / f"dialogues_{n}.jsonl", dialogues)
        for with_texts in (False, True):
            out = folder / f"report_{n}{'_texts' if with_texts else ''}.html"
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                summary = write_report(scores, out, dialogues=texts if with_texts else None)
                times.append(time.perf_counter() - start)
            rows.append(
                {
                    "turns": n,
                    "dialogues": summary.dialogues,
                    "with_dialogues": with_texts,
                    "scores_mb": round(scores.stat().st_size / 1e6, 2),
                    "build_s": round(min(times), 3),
                    "report_mb": round(summary.size / 1e6, 2),
                    "report_per_scores": round(summary.size / scores.stat().st_size, 2),
                    "open_ms": open_ms(out),
                }
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--keep", type=Path, help="write inputs and reports here instead of a temporary folder")
    args = parser.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        rows = run(args.turns, args.keep, args.repeats)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            rows = run(args.turns, Path(tmp), args.repeats)
    head = (
        f"{'turns':>7} {'dialogues':>9} {'texts':>5} {'scores MB':>9} {'build s':>8} {'report MB':>9} "
        f"{'ratio':>6} {'open ms':>8}"
    )
    print(head)
    for r in rows:
        print(
            f"{r['turns']:>7} {r['dialogues']:>9} {'yes' if r['with_dialogues'] else 'no':>5} {r['scores_mb']:>9} "
            f"{r['build_s']:>8} {r['report_mb']:>9} {r['report_per_scores']:>6} {r['open_ms'] or '-':>8}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "benchmark": "report",
        "data": "synthetic score records the script writes (no corpus)",
        "role": "eval-only",
        "test_reads": 0,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "rows": rows,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
