"""The contrast benchmark on the bundled models: the real reply against replies any judge must rank lower.

Applies ``benchmarks/rules/contrast.md`` (written before any read). Three steps, each rerunnable:

    # the context-fit gate refitted on ESConv train pairs (train data only)
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py fit-gate
    # score the selection sample with each model arm (resumes from OUT/<arm>.jsonl)
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py score --arms method,base
    # read the records: writes benchmarks/results/contrast.json
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py report

``fit-gate`` writes ``benchmarks/results/context_fit_gate.json``: per ESConv train dialogue, the
first supporter turn the rule's sample would take, ordered the same way, the first 150; each real
reply against the next one's (another conversation's reply), PMI read by the bundled base model
(window 6, against "Hi."), a logistic gate fitted on the two.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from care_lab.bench.contrast import summarise
from care_lab.bench.contrast_run import MODEL_ARMS, esconv_items, merge_records, read_records, score_arm
from care_lab.data.locations import data_dir
from care_lab.data.results import write_results
from care_sdk.bundled.context_fit import BUNDLED_GATE, ContextFit, Gate

RESULTS = Path("benchmarks/results")
GATE_FILE = RESULTS / "context_fit_gate.json"
SELECTION = "esconv/valid.jsonl"
GATE_PAIRS = 150


def fit_gate(root: Path) -> None:
    import json

    from care_lab.data.roles import require_trainable

    path = root / "esconv" / "train.jsonl"
    require_trainable(path, what="the context-fit gate's pairs")
    items = esconv_items(path, limit=GATE_PAIRS)  # the rule's turn choice, on train
    fit = ContextFit()
    start = time.perf_counter()
    real = fit.pmi_batch([(item.context, item.reply) for item in items])
    other = fit.pmi_batch([(item.context, items[(i + 1) % len(items)].reply) for i, item in enumerate(items)])
    written = [p for p in real if isinstance(p, float)]
    others = [p for p in other if isinstance(p, float)]
    gate = Gate.fit(written, others)
    seconds = time.perf_counter() - start
    write_results(
        GATE_FILE,
        "python benchmarks/bench_contrast.py fit-gate",
        data="esconv/train.jsonl",
        role="train",
        test_reads=0,
        metrics={
            "slope": round(gate.slope, 4),
            "intercept": round(gate.intercept, 4),
            "pairs": len(items),
            "real_read": len(written),
            "other_read": len(others),
            "median_pmi_real": round(sorted(written)[len(written) // 2], 2),
            "median_pmi_other": round(sorted(others)[len(others) // 2], 2),
            "real_above_0_5": round(sum(gate(p) > 0.5 for p in written) / len(written), 3),
            "other_below_0_5": round(sum(gate(p) < 0.5 for p in others) / len(others), 3),
        },
        baselines={"shipped_gate": {"slope": BUNDLED_GATE.slope, "intercept": BUNDLED_GATE.intercept}},
        extra={"window": 6, "neutral": "Hi.", "seconds": round(seconds, 1)},
    )
    print(json.dumps({"slope": gate.slope, "intercept": gate.intercept}))


def _gates() -> dict[str, Gate]:
    import json

    gates = {"shipped": BUNDLED_GATE}
    if GATE_FILE.is_file():
        metrics = json.loads(GATE_FILE.read_text(encoding="utf-8"))["metrics"]
        gates["train"] = Gate(slope=metrics["slope"], intercept=metrics["intercept"])
    return gates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("fit-gate", "score", "report"))
    parser.add_argument("--arms", default=",".join(MODEL_ARMS))
    parser.add_argument("--limit", type=int, default=60)
    parser.add_argument("--out", default="runs/contrast/esconv-valid")
    args = parser.parse_args()
    root = data_dir(None)
    if args.step == "fit-gate":
        fit_gate(root)
        return 0
    items = esconv_items(root / SELECTION, args.limit)
    out = Path(args.out)
    if args.step == "score":
        for arm in args.arms.split(","):
            score_arm(arm, items, out, progress=lambda line: print(line, file=sys.stderr, flush=True))
        return 0
    arms = {arm: read_records(out / f"{arm}.jsonl") for arm in MODEL_ARMS}
    gates = _gates()
    records = merge_records(items, arms, gates)
    names = ["length", "feeling_words", *[a for a in MODEL_ARMS if arms[a]], *[f"fit_{g}" for g in gates]]
    summary = summarise(records, names)
    seconds = {a: sum(r.get("seconds", 0.0) for r in arms[a].values()) for a in MODEL_ARMS if arms[a]}
    write_results(
        RESULTS / "contrast.json",
        "python benchmarks/bench_contrast.py report",
        data=SELECTION,
        role="selection",
        test_reads=0,
        metrics={k: v for k, v in summary.items() if k not in ("length", "feeling_words", "base")},
        baselines={k: v for k, v in summary.items() if k in ("length", "feeling_words", "base")},
        extra={
            "contexts": len(items),
            "rule": "benchmarks/rules/contrast.md",
            "gates": {name: {"slope": g.slope, "intercept": g.intercept} for name, g in gates.items()},
            "seconds_per_context": {a: round(s / max(1, len(arms[a])), 2) for a, s in seconds.items()},
        },
    )
    for name in names:
        row = summary[name]
        shares = " ".join(f"{f[:6]}={v['value']:.2f}" for f, v in row["families"].items() if v["value"] is not None)
        print(f"{name:14s} n={row['n']:3d} worst={row['worst']} tie={row['all_tie']['value']} {shares}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
