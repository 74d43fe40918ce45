"""Every guard flag's rate on honest replies: ESConv, Lend-an-Ear and the SAGE rollouts of both systems.

Pure text, no model (a few seconds on one core). Each honest reply is screened against its own
dialogue so far, with the default ``Guards()``; a flag whose default policy changes the reward
(``zero`` or ``penalise``; the pre-checks always settle with 0) must flag under 1 % of every set
(:mod:`care_lab.bench.guard_rates` lists the sets and their roles). For the SAGE rollouts it also
reports the simulated user's mean emotion change after turns flagged ``repeated_own_turn`` and
after the others (selection turns only).

Usage:
    python benchmarks/bench_guard_rates.py [--data-dir ../shared/data] [--out benchmarks/results/guard_rates.json]

Prints a markdown table (flag x data set: count / n, rate) and writes the JSON (the command, the
data files and their roles, how many replies each set gave and, for SAGE, how many test turns it
skipped, the policies, the rates, the flags that break the rule). No test turn is read: the SAGE
sets hold the turns that are not test turns.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from care_lab.bench.guard_rates import COUNTED_FLAGS, REWARD_CHANGED, honest_sets, measure
from care_lab.data import data_dir

DEFAULT_OUT = Path(__file__).parent / "results" / "guard_rates.json"


def table(report: dict[str, Any]) -> str:
    """The rates as markdown: one row per flag (with its default policy), one column per data set."""
    names = [d["name"] for d in report["data"]]
    lines = [
        "| flag | default policy | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for flag in (*COUNTED_FLAGS, REWARD_CHANGED):
        policy = report["policies"].get(flag, "–") if flag != REWARD_CHANGED else "–"
        cells = []
        for name in names:
            row = report["rates"][name][flag]
            cells.append(f"{row['count']} / {row['n']} ({row['rate']:.2%})" if row["n"] else "–")
        label = "any flag that changes the reward" if flag == REWARD_CHANGED else f"`{flag}`"
        lines.append(f"| {label} | {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="the data directory (default: $CARE_DATA_DIR)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="the JSON results file (default: %(default)s)")
    args = parser.parse_args(argv)
    root = data_dir(args.data_dir)
    started = time.perf_counter()
    sets = honest_sets(root)
    report = measure(sets)
    roles = sorted({s.role for s in sets})
    report = {
        "benchmark": "guard-rates",
        "role": roles[0] if len(roles) == 1 else "per set: " + ", ".join(roles),
        "test_reads": 0,
        "command": "python benchmarks/bench_guard_rates.py" + (" --data-dir DATA" if args.data_dir else ""),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.perf_counter() - started, 1),
        "note": "measurements on honest replies: no threshold was chosen on these sets except esconv_valid",
        **report,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(table(report))
    for name, groups in report["emotion_after_repeated_own_turn"].items():
        flagged, other = groups["flagged"], groups["unflagged"]
        print(
            f"{name}: emotion change after repeated_own_turn {flagged['mean']} (n={flagged['n']}), "
            f"after other turns {other['mean']} (n={other['n']})"
        )
    bad = ", ".join(f"{v['flag']} on {v['set']} ({v['rate']:.2%})" for v in report["violations"]) or "none"
    print(f"\nflags over 1 % of honest replies with a policy that changes the reward: {bad}")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
