"""The bundled generator's weights alone, on every ESConv turn of a split: a fast screen of generator adapters.

``bench_generator.py`` decodes whole rubrics (weights and six criteria) and checks them: the whole
test split took it 1 h 43 min on two processes (6.1 s a rubric).
Where the question is only which dimension a generator puts on top, this reads the weights as
:class:`care_sdk.RubricGenerator` returns them by default (``bench_generator.default_weights``):
the bundled generator's weights head (one read of layer 15 of the prompt's user message), or, for
another trained adapter, expected weights (:func:`care_sdk.bundled.expected_weights.expected_weights_plan`: 13
forced reads after one prefill of the prompt), and decodes nothing. They are the weights
``bench_generator.py`` reads on the same context, so for a generator whose rubrics parse (the
shipped one: 100 %) the top match is the same, up to the run-to-run wobble of llama.cpp.

Rows (the same turns for every row; all labelled supporter turns of the split unless ``--turns``):

- ``shipped``: the bundled model + the bundled generator adapter (spec ``default``), its weights
  read by the bundled weights head;
- with ``--expected-row``: ``shipped adapter, expected weights``, the same with the weights head off;
- one row per ``--adapter NAME=FILE``: the bundled model + that GGUF generator adapter;
- ``uniform weights``, ``majority class``, ``turn-position prior``: as in ``bench_generator.py``,
  learned on ESConv train;
- with ``--probe DIR``: ``layer-15 probe``, the reader of ``bench_context_probe.py`` trained on all
  of ESConv train (``bench_generator_probe_targets.predictions``, from the states in ``DIR``: the
  states of the split must be there), the reader the probe-target generators were taught to
  follow; each row's top dimension is then also compared with the probe's.

Metrics: top-dimension match (:func:`care_sdk.rubric_checks.top_match`) with a 95 % bootstrap
interval over dialogues; mean r_align; each model row's paired difference from the prior and from
the shipped row; the share of turns each row puts each dimension on top.

Each model row runs in two processes (one thread each, halves of the turns); the weights are kept
in ``--out`` (``weights_<row>.<half>.jsonl``) and a run started again reads only what is missing.
Measured: expected weights a median 3.9 s a turn on one thread with both processes busy (500 valid
turns a row in 17 min), on a machine slower than the one that measured ``bench_generator.py``'s
6.1 s a rubric.

Usage:
    python benchmarks/bench_generator_weights.py --split valid --turns 500 --out runs/generator_weights_valid \
        --probe runs/context_probe --adapter "probe ranked=runs/generator_probe_ranked/sft/generator.gguf"
Writes ``results.md`` and ``results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench_generator import (
    MODEL_ROWS,
    _backend,
    _named,
    _one_hot,
    _read_files,
    _row_files,
    _slug,
    against_prior,
    default_weights,
    esconv_items,
    score_row,
    top_name,
)

from care_lab.bench.metrics import Estimate
from care_lab.data import data_dir
from care_lab.training.rubric_targets import fit_top_priors
from care_sdk.types import DIMENSIONS, Dimension

PROBE_ROW = "layer-15 probe"
EXPECTED = "+expected"
EXPECTED_ROW = "shipped adapter, expected weights"
"""The bundled generator with its weights head off: the weights read as expectations (13 forced reads)."""


def read_weights(name: str, spec: str, items: list[dict[str, Any]], out: Path, threads: int, half: int) -> str:
    """Write ``weights_<row>.<half>.jsonl``: each item's weights as the row's generator reads them by
    default (or its error) and its seconds; items any half of the row has done are skipped. A spec
    ending in ``+expected`` reads expected weights with the weights head off."""
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    from care_sdk import RubricGenerator

    path = out / f"weights_{_slug(name)}.{half}.jsonl"
    done = _read_files(_row_files(out, name, "weights"))
    expected = spec.endswith(EXPECTED)
    backend = _backend(spec.removesuffix(EXPECTED), threads)
    generator = RubricGenerator(backend, cache=False, **({"weights_head": False} if expected else {}))
    if not (generator.expected_weights or generator.weights_head is not None):
        raise SystemExit(f"{name}: {spec} reads neither expected weights nor a weights head")
    with path.open("a", encoding="utf-8") as fh:
        for item in items:
            if item["key"] in done:
                continue
            start = time.perf_counter()
            weights = default_weights(generator, item["context"])
            row: dict[str, Any] = {"key": item["key"], "seconds": time.perf_counter() - start}
            if isinstance(weights, Exception):
                row["error"] = str(weights)
            else:
                row["weights"] = {d.value: w for d, w in weights.items()}
            fh.write(json.dumps(row) + "\n")
            fh.flush()
    backend.close()
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", choices=("test", "valid"), default="test")
    parser.add_argument("--turns", type=int, default=None, help="a seeded sample of this many turns (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/generator_weights")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads per process")
    parser.add_argument("--no-shipped", action="store_true", help="leave out the shipped row")
    parser.add_argument(
        "--expected-row", action="store_true", help=f"add the row '{EXPECTED_ROW}' (the weights head off)"
    )
    parser.add_argument(
        "--adapter", action="append", default=[], metavar="NAME=FILE", help="another model row (repeatable)"
    )
    parser.add_argument("--probe", default=None, metavar="DIR", help="add the layer-15 probe's row (its states)")
    args = parser.parse_args()
    rows = {} if args.no_shipped else {"shipped": MODEL_ROWS["shipped"]}
    rows |= {EXPECTED_ROW: MODEL_ROWS["shipped"] + EXPECTED} if args.expected_row else {}
    rows |= {name: f"adapter:{path}" for name, path in map(_named, args.adapter)}
    if not rows:
        raise SystemExit("no model row: give --adapter or leave out --no-shipped")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train, items = esconv_items(data_dir(), args.split, args.turns, args.seed)
    priors = fit_top_priors(train)
    majority = priors.majority
    print(f"{len(items)} ESConv {args.split} turns from {len({i['dialogue'] for i in items})} dialogues", flush=True)
    started = time.perf_counter()
    order = sorted(rows, key=lambda name: name == "shipped")  # the adapters screened first
    jobs = [(name, rows[name], items[k::2], out, args.threads, k) for name in order for k in (0, 1)]
    with ProcessPoolExecutor(max_workers=2) as workers:
        list(workers.map(read_weights, *zip(*jobs, strict=True)))
    wall = time.perf_counter() - started

    read = {name: _read_files(_row_files(out, name, "weights")) for name in rows}

    def model(name: str) -> Any:
        def weights(item: dict[str, Any]) -> dict[Dimension, float] | None:
            row = read[name].get(item["key"])
            return {Dimension(k): v for k, v in row["weights"].items()} if row and "weights" in row else None

        return weights

    def prior(item: dict[str, Any]) -> dict[Dimension, float]:
        return _one_hot(priors.top(item["turn"]))

    readers = {name: model(name) for name in rows}
    if args.probe:
        from bench_generator_probe_targets import predictions

        probe = predictions(Path(args.probe), (args.split,))

        def probe_weights(item: dict[str, Any]) -> dict[Dimension, float] | None:
            dialogue, _, index = item["key"].rpartition(":")
            return probe.get((dialogue, int(index)))

        missing = sum(probe_weights(i) is None for i in items)
        if missing:
            raise SystemExit(f"--probe {args.probe}: no prediction for {missing} of the {len(items)} turns")
        readers[PROBE_ROW] = probe_weights
    scored = {name: score_row(items, reader) for name, reader in readers.items()}
    scored["uniform weights"] = score_row(items, lambda i: {d: 1 / 3 for d in DIMENSIONS})
    scored["majority class"] = score_row(items, lambda i: _one_hot(majority))
    scored["turn-position prior"] = score_row(items, prior)
    tops = {name: Counter(top_name(reader(i)) for i in items) for name, reader in readers.items()}
    tops["turn-position prior"] = Counter(top_name(prior(i)) for i in items)
    paired: dict[str, dict[str, Estimate]] = {}
    for name, reader in readers.items():
        paired[name] = {"minus prior": against_prior(items, reader, prior)[0]}
        if name != "shipped" and "shipped" in rows:
            paired[name]["minus shipped"] = against_prior(items, reader, model("shipped"))[0]
    agree: dict[str, float] = {}
    if PROBE_ROW in readers:
        probe_tops = [top_name(readers[PROBE_ROW](i)) for i in items]
        for name in rows:
            same = sum(top_name(readers[name](i)) == t for i, t in zip(items, probe_tops, strict=True))
            agree[name] = same / len(items)
    lines = [
        f"ESConv {args.split}, {len(items)} turns; weights only (nothing decoded)",
        "",
        "| row | top match [95% CI] | mean r_align | minus the prior, paired | minus shipped, paired "
        "| on top: cognitive / affective / proactive |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in scored.items():
        diffs = paired.get(name, {})
        cells = [diffs[k].format() if k in diffs else "-" for k in ("minus prior", "minus shipped")]
        top = tops.get(name)
        share = " / ".join(str(top.get(d.value, 0)) for d in DIMENSIONS) if top else "-"
        match = Estimate(**r["top_match"]).format()
        lines.append(f"| {name} | {match} | {r['mean_r_align']:.3f} | {cells[0]} | {cells[1]} | {share} |")
    if agree:
        lines += ["", "Top dimension the same as the probe's: " + ", ".join(f"{n} {a:.3f}" for n, a in agree.items())]
    errors = {name: sum("error" in r for r in read[name].values()) for name in rows}
    seconds = {name: sorted(r["seconds"] for r in read[name].values()) for name in rows}
    lines += [
        "",
        "Errors: "
        + ", ".join(f"{n} {e}" for n, e in errors.items())
        + "; median seconds a turn (one thread): "
        + ", ".join(f"{n} {s[len(s) // 2]:.2f}" for n, s in seconds.items() if s)
        + f"; this run {wall / 60:.1f} min on two processes",
    ]
    (out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "results.json").write_text(
        json.dumps(
            {
                "split": args.split,
                "turns": len(items),
                "rows": scored,
                "paired": {n: {k: v.to_json() for k, v in d.items()} for n, d in paired.items()},
                "tops": {n: dict(c) for n, c in tops.items()},
                "same_top_as_probe": agree,
                "errors": errors,
                "wall_seconds": wall,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
