"""Context-fit baselines side by side, paired, from ``bench_evaluator.py`` runs over the same items.

Each run directory holds one baseline's context-fit stage (``--baselines NAME``) over the same
items (same ``--seed``, ``--esconv-contexts``, ``--esconv-split``, ``--tasks``, ``--lend-an-ear``
options), and the same rubrics and evaluations (copy ``rubrics_default.jsonl`` and
``evals_default_default_generated.jsonl`` between the directories, or run those stages in each).
For every baseline it reports the shipped reward with context fit (the bundled gate of that
baseline, the default floor, copies discounted) and the context PMI alone, on:

- **Lend-an-Ear pairwise**: the share of the judge's pairs (margin >= 1) the reward orders as the
  judge does (ties 1/2), bootstrapped over turns; and **best > worst**, the same for each turn's
  best reply against its worst (where they differ by 1 or more);
- **ESConv reference > other**: the share of (reference, another dialogue's reply) pairs where the
  reference gets the higher reward, bootstrapped over contexts; and the same against the
  platitude and the evasive reply;

then each baseline's paired difference to the first one, per turn or per context, with a 95 %
bootstrap interval. For a run read with the shift check it also prints the share of each
Lend-an-Ear system's replies the check doubts (factor below 1). The numbers are the report's
(``bench_evaluator.py --stage report``); the pairing is what the report cannot do, since each run
reads one baseline.

Usage:
    python benchmarks/compare_baselines.py --seed 1 --tasks lend-an-ear --lend-an-ear train \\
        --lend-an-ear-turns 60 --esconv-contexts 0 runs/sel_neutral:neutral runs/sel_esconv:esconv
Writes ``--out`` (JSON: every estimate and its units) when given; ``--pool A.json B.json`` pools
the units of several such files (draws of different contexts) into one table. ``--fitted-gate``
reads every run through the gate fitted on its own valid pairs (``valid:`` lines of its
``context_fit.jsonl``): for settings without a bundled gate, such as ``--context-fit-window``;
two runs of the same baselines are then labelled by their directories.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

import bench_evaluator as bench
from _evaluator_items import items as load_items
from _evaluator_metrics import (
    check_cache,
    checked_shares,
    esconv_pairs,
    own_shares,
    row_rewards,
    valid_gate,
    with_context_fit,
)

from care_lab.bench.metrics import Estimate, PreferencePair, bootstrap, preference_pairs, score_pairs
from care_sdk.bundled.context_fit import DEFAULT_FLOOR, bundled_gate
from care_sdk.bundled.shift_check import ShiftCheck

Units = dict[str, list[float]]
"""``{turn or context: [1, 0, 0.5, ...]}``: one outcome per pair, grouped by what is resampled."""


def rewards(
    items: list[dict[str, Any]],
    own: dict[str, float],
    out: Path,
    baselines: str,
    fitted_gate: bool = False,
    check: ShiftCheck | None = None,
) -> dict[str, dict[str, float | None]]:
    """``{"reward with context fit": {key: reward}, "PMI alone": {key: nats}}`` for one run directory
    (``own``: each item's own share, :func:`_evaluator_metrics.own_shares`; ``fitted_gate``: through the
    gate fitted on the run's valid pairs, not the bundled one; ``check``: the fit also multiplied by this
    shift check's factor, from the run's ``shift-check`` stage)."""
    rubric = row_rewards(
        items,
        bench._cache(out / "rubrics_default.jsonl"),
        bench._cache(out / "evals_default_default_generated.jsonl"),
        "sampled",
        "generated",
        "generated",
    )
    pmi = {k: v["pmi"] for k, v in bench._cache(bench._fit_cache(out)).items() if "pmi" in v}
    gate = None if fitted_gate else bundled_gate(bench.baseline_pool(baselines))
    if gate is None:  # the one fitted on the run's valid pairs, as the report does without a bundled one
        gate = valid_gate(pmi)
        if gate is None:
            raise SystemExit(
                f"{out}: no bundled gate asked for or known for {baselines}, and the run read no valid pairs"
            )
        print(f"{out}: gate fitted on the run's valid pairs: {gate}")
    if check is not None:
        own = checked_shares(own, bench._cache(check_cache(out, check)), check)
    fitted = with_context_fit(rubric, pmi, own, gate, DEFAULT_FLOOR)
    return {"reward with context fit": fitted, "PMI alone": {it["key"]: pmi.get(it["key"]) for it in items}}


def doubted(items: list[dict[str, Any]], out: Path, check: ShiftCheck) -> dict[str, float]:
    """The share of each Lend-an-Ear system's replies whose factor from ``check`` is below 1 (the
    check doubts them), from the run's ``shift-check`` stage: what the check costs which replies."""
    cached = bench._cache(check_cache(out, check))
    by_system: dict[str, list[bool]] = defaultdict(list)
    for it in items:
        if it["task"] == "lend-an-ear" and "factor" in cached.get(it["key"], {}):
            by_system[it["system"]].append(cached[it["key"]]["factor"] < 1)
    return {system: round(sum(flags) / len(flags), 3) for system, flags in sorted(by_system.items())}


def units(items: list[dict[str, Any]], values: dict[str, float | None]) -> dict[str, Units]:
    """The outcomes of every comparison, grouped by turn (Lend-an-Ear) or context (ESConv)."""
    judged: dict[str, dict[str, float]] = defaultdict(dict)
    for it in items:
        if it["task"] == "lend-an-ear":
            judged[it["group"]][it["key"]] = it["judge"]
    pairs = {"lae pairwise": preference_pairs(judged, margin=1.0), "lae best > worst": []}
    for group, scores in judged.items():  # the judge's best reply of a turn against its worst
        best, worst = max(scores, key=scores.__getitem__), min(scores, key=scores.__getitem__)
        if scores[best] - scores[worst] >= 1.0:
            pairs["lae best > worst"].append(PreferencePair(group, best, worst, scores[best] - scores[worst]))
    for kind in ("other", "platitude", "evasive"):
        pairs[f"esconv reference > {kind}"] = esconv_pairs(items, kind)
    out: dict[str, Units] = {}
    for metric, listed in pairs.items():
        outcomes, _ = score_pairs(listed, values)
        grouped: Units = defaultdict(list)
        for outcome in outcomes:
            grouped[str(outcome.group)].append(outcome.value)
        if grouped:
            out[metric] = grouped
    return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def share(groups: Units, resamples: int) -> Estimate:
    """The share of pairs won, pooled over groups, with a bootstrap interval over groups."""
    return bootstrap(list(groups.values()), lambda s: _mean([v for g in s for v in g]), resamples=resamples)


def paired(a: Units, b: Units, resamples: int) -> Estimate:
    """The mean over common groups of (a's share - b's share) in each group."""
    common = [(_mean(a[g]), _mean(b[g])) for g in a if g in b]
    return bootstrap(common, lambda s: _mean([x - y for x, y in s]), resamples=resamples)


def _cell(e: Estimate, sign: str = "") -> str:
    if e.value is None or e.low is None or e.high is None:
        return f"n/a (n={e.n})"
    return f"{e.value:{sign}.3f} [{e.low:{sign}.3f}, {e.high:{sign}.3f}] (n={e.n})"


Grouped = dict[str, dict[str, dict[str, Units]]]
"""``{baselines: {row: {metric: units}}}``."""


def table(grouped: Grouped, resamples: int) -> dict[str, Any]:
    """Print every share and each baseline's paired difference to the first; return them by name."""
    report: dict[str, Any] = {}
    first = next(iter(grouped))
    for name, rows in grouped.items():
        for row, metrics in rows.items():
            for metric, groups in sorted(metrics.items()):
                estimate = share(groups, resamples)
                report[f"{name} | {row} | {metric}"] = asdict(estimate)
                print(f"{name:8s} {row:22s} {metric:28s} {_cell(estimate)}")
                if name != first and metric in grouped[first][row]:
                    diff = paired(groups, grouped[first][row][metric], resamples)
                    report[f"{name} - {first} | {row} | {metric}"] = asdict(diff)
                    print(f"{'':8s} {'paired, minus ' + first:22s} {metric:28s} {_cell(diff, '+')}")
    return report


def pooled(files: list[Path]) -> Grouped:
    """The units of several runs' ``--out`` files together (draws of different contexts, the same
    baselines), each file's groups kept apart."""
    out: Grouped = {}
    for i, path in enumerate(files):
        for name, rows in json.loads(path.read_text(encoding="utf-8"))["units"].items():
            for row, metrics in rows.items():
                for metric, groups in metrics.items():
                    target = out.setdefault(name, {}).setdefault(row, {}).setdefault(metric, {})
                    target.update({f"{i}:{group}": outcomes for group, outcomes in groups.items()})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "runs",
        nargs="*",
        metavar="DIR:BASELINES",
        help="the first is the one the others are paired with; DIR:neutral+check reads the run's "
        "shift-check stage too (the default reward); DIR:neutral+check=JSON the factors of another check "
        "(bench_evaluator.py --stage shift-check --shift-check JSON)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--esconv-contexts", type=int, default=24)
    parser.add_argument("--esconv-split", choices=["test", "valid"], default="test")
    parser.add_argument("--tasks", default="lend-an-ear,esconv")
    parser.add_argument("--lend-an-ear", choices=["held-out", "train"], default="held-out")
    parser.add_argument("--lend-an-ear-turns", type=int)
    parser.add_argument(
        "--fitted-gate",
        action="store_true",
        help="read each run through the gate fitted on its own valid pairs, not the bundled one "
        "(runs of another setting, such as --context-fit-window, that has no bundled gate)",
    )
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--out", type=Path, help="write every estimate and the units they come from (JSON)")
    parser.add_argument(
        "--pool", type=Path, nargs="+", metavar="JSON", help="instead of runs: pool the units of earlier --out files"
    )
    args = parser.parse_args()
    if bool(args.runs) == bool(args.pool):
        parser.error("give run directories (DIR:BASELINES ...) or --pool JSON ..., not both")
    if args.pool:
        grouped = pooled(args.pool)
    else:
        tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
        items = load_items(
            args.esconv_contexts, args.seed, args.esconv_split, tasks, args.lend_an_ear, args.lend_an_ear_turns
        )
        grouped = {}
        own = own_shares(items)  # the same items in every run
        specs = [spec.rpartition(":") for spec in args.runs]
        names = [name for _, _, name in specs]
        for spec, (directory, _, name) in zip(args.runs, specs, strict=True):
            pool, _, check = name.partition("+")
            kind, _, check_file = check.partition("=")
            if not directory or pool not in bench.BASELINES or kind not in ("", "check"):
                parser.error(
                    f"{spec!r}: give DIR:BASELINES or DIR:neutral+check[=JSON], BASELINES one of "
                    f"{', '.join(bench.BASELINES)}"
                )
            if check and pool != "neutral":
                parser.error(f'{spec!r}: the shift check reads PMI against "Hi." (neutral) only')
            chosen = (ShiftCheck.load(check_file) if check_file else ShiftCheck.bundled()) if check else None
            rows = rewards(items, own, Path(directory), pool, args.fitted_gate, check=chosen)
            label = name if names.count(name) == 1 else Path(directory).name  # two runs of one pool: by directory
            grouped[label] = {row: units(items, values) for row, values in rows.items()}
            if chosen is not None and any(it["task"] == "lend-an-ear" for it in items):
                shares = doubted(items, Path(directory), chosen)
                print(f"{label}: Lend-an-Ear replies the check doubts (factor < 1), by system: {shares}")
    report = table(grouped, args.resamples)
    if args.out:
        args.out.write_text(json.dumps({"estimates": report, "units": grouped}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
