"""The bundled rubric generator on held-out ESConv test turns, against its baselines, in one run.

Rows (the same seeded sample of ESConv **test** supporter turns for every row; ``--split valid``
takes valid turns instead, to choose a setting without touching test):

- ``shipped``: the bundled SmolLM2-135M-Instruct + the bundled generator adapter (spec ``default``),
  its weights read by the bundled weights head (its default ``weights_head``, see
  :class:`care_sdk.RubricGenerator`);
- ``shipped, decoded weights``: the same rubrics with the integer weights the model decoded
  (``weights_head=False, expected_weights=False``), with its paired difference from the shipped row
  and from the prior;
- ``untrained base``: the same model without the adapter (spec ``base``, whole context);
- ``uniform weights``: 1/3 each;
- ``majority class``: all weight on the dimension most often on top in ESConv train;
- ``turn-position prior``: all weight on the dimension most often on top at this supporter-turn
  number in ESConv train (turn numbers from 15 on pooled).
- with ``--adapter NAME=FILE`` (repeatable): the bundled model + that GGUF generator adapter (e.g. a
  pref-GRPO run exported with ``care train export-adapter``), with its paired difference from the
  shipped row and from the prior.

Metrics: top-dimension match (:func:`care_sdk.rubric_checks.top_match`: ties count fractionally,
the same rule for every row) with a 95 % bootstrap interval over dialogues; mean r_align; the share
of rubrics with a single largest weight; for the model rows the share of valid rubrics, the sanity
checks of :func:`care_sdk.rubric_checks.check_rubric`, and the time per rubric (llama.cpp, one
thread each, two processes: the shipped row's two halves, then the base and the examples); the
shipped row's paired difference from the turn-position prior, and both rows by supporter turn. Also
the shipped generator's rubrics for the dialogues of ``examples/`` (sanity only), and a
weights-by-turn figure.

Usage:
    python benchmarks/bench_generator.py --turns 500 --out runs/bench_generator
    python benchmarks/bench_generator.py --split valid --turns 300 --base-turns 0 --out runs/bench_generator_valid
    python benchmarks/bench_generator.py --turns 200 --base-turns 0 \
        --adapter "pref-GRPO=runs/generator_pref_grpo/generator.gguf"
Writes ``results.json``, ``results.md``, the rubrics per row (``rubrics_<row>.jsonl``, reused when
the run is started again) and ``weights_by_turn.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from care_lab.bench.metrics import Estimate, bootstrap
from care_lab.data import SupportTurn, data_dir, load_esconv
from care_lab.training import r_align
from care_lab.training.roles import require_role
from care_lab.training.rubric_targets import POSITION_CAP, fit_top_priors, turn_number
from care_sdk.dialogues import read_dialogues
from care_sdk.rubric_checks import check_rubric, top_match
from care_sdk.types import DIMENSIONS, Dimension, Rubric

MODEL_ROWS = {"shipped": "default", "untrained base": "base"}
DECODED_ROW = "shipped, decoded weights"
"""The shipped generator's rubrics with the integer weights it decoded instead of the weights head's."""


def _slug(name: str) -> str:
    return name.replace(" ", "_")


def esconv_items(
    root: Path, split: str, turns: int | None, seed: int
) -> tuple[list[SupportTurn], list[dict[str, Any]]]:
    """ESConv train's labelled supporter turns (for the priors), and the benchmark items of ``split``:
    its labelled supporter turns, shuffled with ``seed`` and cut to ``turns`` (all of them for ``None``)."""

    def labelled(name: str) -> list[SupportTurn]:
        require_role(root / "esconv" / f"{name}.jsonl", "fit" if name == "train" else "evaluate")
        every = [t for d in load_esconv(root / "esconv" / f"{name}.jsonl").records for t in d.supporter_turns()]
        return [t for t in every if t.labelled and any(t.counts.values())]

    pool = labelled(split)
    if turns is not None:
        random.Random(seed).shuffle(pool)
        pool = pool[:turns]
    items = [
        {
            "key": f"{t.dialogue_id}:{t.index}",
            "dialogue": t.dialogue_id,
            "turn": turn_number(t),
            "context": t.context_messages(),
            "counts": t.counts,
        }
        for t in pool
    ]
    return labelled("train"), items


def top_name(weights: dict[Dimension, float] | None) -> str:
    """The name of the dimension with the largest weight (the first on ties); ``"invalid"`` for no rubric."""
    return "invalid" if weights is None else max(DIMENSIONS, key=lambda d: weights[d]).value


def _row_files(out: Path, name: str, kind: str = "rubrics") -> list[Path]:
    """A row's resumable output files in ``out`` (``<kind>_<row>.<shard>.jsonl``)."""
    return sorted(out.glob(f"{kind}_{_slug(name)}.*jsonl"))


def _one_hot(d: Dimension) -> dict[Dimension, float]:
    return {x: 1.0 if x == d else 0.0 for x in DIMENSIONS}


def _backend(spec: str, threads: int) -> Any:
    """A model row's backend: a spec, or ``adapter:FILE`` for the bundled model with that generator adapter."""
    from care_sdk.backends import resolve_backend
    from care_sdk.backends.llamacpp import LlamaCppBackend, default_model_path

    if spec.startswith("adapter:"):
        return LlamaCppBackend(default_model_path(), adapter=spec.removeprefix("adapter:"), n_threads=threads)
    return resolve_backend(spec, role="generator", n_threads=threads)


def default_weights(default: Any, context: Any) -> dict[Dimension, float] | Exception:
    """The weights the generator ``default`` (a :class:`care_sdk.RubricGenerator` with its default
    settings) reads for ``context`` besides the decoded rubric: its weights head's, or its expected
    weights; the error where the read fails."""
    from care_sdk._engine import drive
    from care_sdk.bundled.expected_weights import expected_weights_plan
    from care_sdk.errors import CareError

    if default.weights_head is not None:
        try:
            return default.weights_head.weights([context], default.backend)[0]
        except CareError as exc:
            return exc
    weights: dict[Dimension, float] | Exception = drive(
        expected_weights_plan([default.request(context)]), default.backend
    )[0]
    return weights


def generate_rows(name: str, spec: str, items: list[dict[str, Any]], out: Path, threads: int, shard: int = 0) -> str:
    """Write ``rubrics_<row>.<shard>.jsonl``: one rubric (or error) and its seconds per item; skips the
    items any shard of the row has done (a run that is started again resumes).

    Where the row's generator reads its weights apart from the decoded rubric by default (the bundled
    generator's weights head, or expected weights for another trained adapter on llama.cpp), the
    rubric is decoded once and its weights read as :class:`~care_sdk.RubricGenerator` does by
    default (:func:`default_weights` on the same context); the record keeps the decoded weights too
    (``decoded_weights``), for the row of the same model with them. A record from an earlier run
    without them gets them read now, its rubric reused."""
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    from care_sdk import RubricGenerator

    path = out / f"rubrics_{_slug(name)}.{shard}.jsonl"
    done = _read_files(_row_files(out, name))
    backend = _backend(spec, threads)
    default = RubricGenerator(backend, cache=False)
    apart = default.expected_weights or default.weights_head is not None
    generator = RubricGenerator(backend, cache=False, expected_weights=False, weights_head=False)
    with path.open("a", encoding="utf-8") as fh:
        for item in items:
            earlier = done.get(item["key"])
            if earlier is not None and (not apart or "decoded_weights" in earlier or "rubric" not in earlier):
                continue
            start = time.perf_counter()
            result: Rubric | Exception
            if earlier is not None:  # decoded by an earlier run: only its weights are read
                result, seconds = Rubric.model_validate(earlier["rubric"]), earlier["seconds"]
            else:
                result, seconds = generator.generate_batch([item["context"]])[0], 0.0
            row: dict[str, Any] = {"key": item["key"]}
            if isinstance(result, Rubric) and apart:
                weights = default_weights(default, item["context"])
                row["decoded_weights"] = {d.value: w for d, w in result.weights.items()}
                result = weights if isinstance(weights, Exception) else result.with_weights(weights)
            row["seconds"] = seconds + time.perf_counter() - start
            if isinstance(result, Rubric):
                row["rubric"] = result.model_dump(mode="json")
            else:
                row["error"] = str(result)
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            fh.flush()
    return str(path)


def time_models(items: list[dict[str, Any]], threads: int) -> dict[str, Any]:
    """Seconds per rubric of each model row on the same turns, one model after the other in this process."""
    from care_sdk import RubricGenerator
    from care_sdk.backends import resolve_backend

    out: dict[str, Any] = {}
    for name, spec in MODEL_ROWS.items():
        backend = resolve_backend(spec, role="generator", n_threads=threads)
        generator = RubricGenerator(backend, cache=False)
        generator.generate_batch([items[0]["context"]])  # warm-up: grammar and prompt cache
        seconds = []
        for item in items:
            start = time.perf_counter()
            generator.generate_batch([item["context"]])
            seconds.append(time.perf_counter() - start)
        backend.close()
        out[name] = {"turns": len(items), "median_s": statistics.median(seconds), "mean_s": statistics.fmean(seconds)}
    base = out["untrained base"]["median_s"]
    out["ratio_shipped_to_base"] = out["shipped"]["median_s"] / base if base else None
    return out


def runtime_agreement(items: list[dict[str, Any]], adapter_dir: str, threads: int) -> dict[str, Any]:
    """Greedy rubrics of llama.cpp (base GGUF + the bundled adapter) and transformers (the PEFT adapter
    merged into the dequantised base) on the same turns: how often they are identical."""
    from care_lab.training.sft import load_trained_generator
    from care_sdk import RubricGenerator
    from care_sdk.backends import resolve_backend

    shipped = RubricGenerator(resolve_backend("default", role="generator", n_threads=threads), cache=False)
    merged = load_trained_generator(adapter_dir, max_context_messages=shipped.max_context_messages, cache=False)
    same = same_weights = same_top = 0
    for item in items:
        a, b = (g.generate_batch([item["context"]])[0] for g in (shipped, merged))
        if isinstance(a, Rubric) and isinstance(b, Rubric):
            same += a == b
            same_weights += a.weights == b.weights
            same_top += a.top_dimension == b.top_dimension
    return {"turns": len(items), "identical": same, "same_weights": same_weights, "same_top": same_top}


def _read_files(paths: list[Path]) -> dict[str, dict[str, Any]]:
    rows = (json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip())
    return {r["key"]: r for r in rows}


def _estimate(items: list[dict[str, Any]], values: dict[str, float | None]) -> Estimate:
    by_dialogue: dict[str, list[float]] = defaultdict(list)
    for item in items:
        value = values.get(item["key"])
        by_dialogue[item["dialogue"]].append(0.0 if value is None else value)
    units = list(by_dialogue.values())

    def mean_of(sample: list[list[float]]) -> float:
        flat = [x for unit in sample for x in unit]
        return sum(flat) / len(flat)

    return bootstrap(units, mean_of, resamples=2000, seed=0)


def score_row(
    items: list[dict[str, Any]], weights_of: Callable[[dict[str, Any]], dict[Dimension, float] | None]
) -> dict[str, Any]:
    """Top match (invalid rubrics count 0), mean r_align and single-top share over ``items``."""
    matches: dict[str, float | None] = {}
    aligns, single = [], 0
    for item in items:
        weights = weights_of(item)
        if weights is None:
            matches[item["key"]] = 0.0
            aligns.append(0.0)
            continue
        matches[item["key"]] = top_match(weights, item["counts"])
        aligns.append(r_align(weights, item["counts"]))
        largest = max(weights.values())
        single += sum(abs(w - largest) < 1e-9 for w in weights.values()) == 1
    return {
        "top_match": _estimate(items, matches).to_json(),
        "mean_r_align": sum(aligns) / len(aligns),
        "single_top_share": single / len(items),
    }


TURN_BUCKETS = ((1, 1), (2, 3), (4, 7), (8, None))


def _bucket_label(low: int, high: int | None) -> str:
    return str(low) if high == low else f"{low}+" if high is None else f"{low}-{high}"


def against_prior(
    items: list[dict[str, Any]],
    model: Callable[[dict[str, Any]], dict[Dimension, float] | None],
    prior: Callable[[dict[str, Any]], dict[Dimension, float] | None],
) -> tuple[Estimate, list[dict[str, Any]]]:
    """The model row against the turn-position prior (or another row) on the same turns: the paired
    difference in top match (95 % bootstrap over dialogues; an invalid rubric counts 0) and both by
    supporter turn, with the model's top dimensions there."""
    model_match: dict[str, float] = {}
    prior_match: dict[str, float] = {}
    model_top: dict[str, str] = {}
    for item in items:
        weights = model(item)
        model_match[item["key"]] = 0.0 if weights is None else top_match(weights, item["counts"])
        other = prior(item)
        prior_match[item["key"]] = 0.0 if other is None else top_match(other, item["counts"])
        model_top[item["key"]] = top_name(weights)
    diffs: dict[str, float | None] = {k: model_match[k] - prior_match[k] for k in model_match}
    buckets = []
    for low, high in TURN_BUCKETS:
        keys = [i["key"] for i in items if i["turn"] >= low and (high is None or i["turn"] <= high)]
        if keys:
            tops = Counter(model_top[k] for k in keys)
            buckets.append(
                {
                    "turns": _bucket_label(low, high),
                    "n": len(keys),
                    "model": statistics.fmean(model_match[k] for k in keys),
                    "prior": statistics.fmean(prior_match[k] for k in keys),
                    "model_tops": dict(tops.most_common()),
                }
            )
    return _estimate(items, diffs), buckets


def sanity(rows: dict[str, dict[str, Any]], contexts: dict[str, Any]) -> dict[str, Any]:
    """Validity, the rubric sanity checks and time per rubric over a row's generated rubrics."""
    checks, seconds, valid = [], [], 0
    for key, row in rows.items():
        seconds.append(row["seconds"])
        if "rubric" not in row:
            continue
        valid += 1
        checks.append(check_rubric(Rubric.model_validate(row["rubric"]), contexts[key]))
    n, criteria = len(rows), sum(c.criteria for c in checks) or 1
    return {
        "rubrics": n,
        "valid_share": valid / n if n else None,
        "near_uniform_share": sum(c.near_uniform for c in checks) / max(1, len(checks)),
        "copied_criteria_share": sum(c.copied_criteria for c in checks) / criteria,
        "repeated_phrase_criteria_share": sum(c.repeated_phrase_criteria for c in checks) / criteria,
        "placeholder_criteria_share": sum(c.placeholder_criteria for c in checks) / criteria,
        "duplicate_criterion_share": sum(c.duplicate for c in checks) / max(1, len(checks)),
        "grounded_share": sum(c.grounded for c in checks) / max(1, len(checks)),
        "seconds_per_rubric_median": statistics.median(seconds) if seconds else None,
        "seconds_per_rubric_mean": statistics.fmean(seconds) if seconds else None,
    }


def plot_weights_by_turn(
    items: list[dict[str, Any]], rows: dict[str, dict[str, Any]], path: Path, split: str = "test"
) -> None:
    """Mean weight per dimension by supporter-turn number: the shipped generator beside the reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gen: dict[int, list[dict[Dimension, float]]] = defaultdict(list)
    ref: dict[int, list[dict[Dimension, float]]] = defaultdict(list)
    for item in items:
        t = min(item["turn"], POSITION_CAP)
        total = sum(item["counts"].values())
        ref[t].append({d: item["counts"][d] / total for d in DIMENSIONS})
        row = rows.get(item["key"])
        if row and "rubric" in row:
            gen[t].append(Rubric.model_validate(row["rubric"]).weights)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, data, title in ((axes[0], gen, "shipped generator: weights"), (axes[1], ref, "reference: strategy shares")):
        turns = sorted(t for t in data if len(data[t]) >= 5)
        for d in DIMENSIONS:
            ax.plot(turns, [statistics.fmean(w[d] for w in data[t]) for t in turns], marker="o", label=d.value)
        ax.set_title(title)
        ax.set_xlabel(f"supporter turn (>= {POSITION_CAP} pooled)")
    axes[0].set_ylabel("mean weight / share")
    axes[0].legend()
    fig.suptitle(f"ESConv {split}: priorities by turn")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _named(option: str) -> tuple[str, str]:
    name, sep, path = option.partition("=")
    if not sep or not name or not Path(path).is_file():
        raise SystemExit(f"--adapter {option!r}: expected NAME=FILE with an existing GGUF adapter file")
    return name, path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=500, help="ESConv supporter turns (seeded sample)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/bench_generator")
    parser.add_argument("--data-dir", default=None, help="the data directory (default: $CARE_DATA_DIR)")
    parser.add_argument(
        "--split",
        choices=("test", "valid"),
        default="test",
        help="the ESConv split the turns come from: test to measure, valid to choose a setting",
    )
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads per model row")
    parser.add_argument("--examples", default="examples/dialogues.jsonl", help="dialogues for the sanity rows")
    parser.add_argument(
        "--only", default=None, help="generate the rubrics of this model row only and stop (e.g. to start it early)"
    )
    parser.add_argument(
        "--timing", type=int, default=0, help="also time both models on N turns, one after the other (0: no)"
    )
    parser.add_argument("--hf-adapter", default=None, help="the PEFT adapter directory the bundled adapter came from")
    parser.add_argument("--agreement", type=int, default=8, help="turns compared llama.cpp vs transformers")
    parser.add_argument(
        "--base-turns",
        type=int,
        default=None,
        help="run the untrained base on the first N sampled turns only (it often writes until max_tokens and "
        "retries: several times slower); every row is then also reported on those N turns (0: no base row)",
    )
    parser.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="another model row: the bundled model with this GGUF generator adapter (repeatable)",
    )
    args = parser.parse_args()
    extra = dict(_named(a) for a in args.adapter)
    model_rows = {**MODEL_ROWS, **{name: f"adapter:{path}" for name, path in extra.items()}}
    if args.base_turns == 0:
        del model_rows["untrained base"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(args.data_dir) if args.data_dir else data_dir()
    train, items = esconv_items(root, args.split, args.turns, args.seed)
    examples = []
    lines = read_dialogues(args.examples) if Path(args.examples).exists() else iter(())
    for dialogue in (line.dialogue for line in lines if line.dialogue is not None):
        for i, message in enumerate(dialogue.messages):
            if message.role == "assistant" and i:
                examples.append(
                    {"key": f"{dialogue.id}:{i}", "context": [m.model_dump() for m in dialogue.messages[:i]]}
                )
    priors = fit_top_priors(train)
    majority = priors.majority
    n_dialogues = len({i["dialogue"] for i in items})
    print(f"{len(items)} ESConv {args.split} turns from {n_dialogues} dialogues; majority {majority.value}")

    subset = items[: args.base_turns] if args.base_turns else items
    shipped = MODEL_ROWS["shipped"]
    jobs = [  # (row, spec, items, shard): each full row in two shards, so both cores work on it first
        ("shipped", shipped, items[0::2], 0),
        ("shipped", shipped, items[1::2], 1),
        *[(name, model_rows[name], items[k::2], k) for name in extra for k in (0, 1)],
        ("shipped examples", shipped, examples, 0),
    ]
    if "untrained base" in model_rows:
        jobs.insert(2, ("untrained base", model_rows["untrained base"], subset, 0))
    if args.only:
        rows_of = items if args.only != "untrained base" else subset
        generate_rows(args.only, model_rows[args.only], rows_of, out, args.threads)
        return
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as pool:
        columns = zip(*[(n, s, i, out, args.threads, k) for n, s, i, k in jobs], strict=True)
        list(pool.map(generate_rows, *columns))
    wall = time.perf_counter() - started

    generated = {name: _read_files(_row_files(out, name)) for name in [*model_rows, "shipped examples"]}
    timing = time_models(items[: args.timing], args.threads) if args.timing else None
    agreement = runtime_agreement(items[: args.agreement], args.hf_adapter, args.threads) if args.hf_adapter else None
    contexts = {i["key"]: i["context"] for i in items + examples}

    def model_weights(name: str) -> Callable[[dict[str, Any]], dict[Dimension, float] | None]:
        def weights(item: dict[str, Any]) -> dict[Dimension, float] | None:
            row = generated[name].get(item["key"])
            return Rubric.model_validate(row["rubric"]).weights if row and "rubric" in row else None

        return weights

    def decoded_weights(item: dict[str, Any]) -> dict[Dimension, float] | None:
        row = generated["shipped"].get(item["key"])
        if row and "decoded_weights" in row:
            return {Dimension(k): v for k, v in row["decoded_weights"].items()}
        return None

    read_expected = any("decoded_weights" in r for r in generated["shipped"].values())

    def prior_weights(item: dict[str, Any]) -> dict[Dimension, float]:
        return _one_hot(priors.top(item["turn"]))

    def all_rows(on: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        keys = {i["key"] for i in on}
        rows: dict[str, dict[str, Any]] = {}
        for name in model_rows:
            mine = {k: v for k, v in generated[name].items() if k in keys}
            if len(mine) == len(keys):
                rows[name] = {**score_row(on, model_weights(name)), **sanity(mine, contexts)}
        if read_expected and "shipped" in rows:
            rows[DECODED_ROW] = score_row(on, decoded_weights)
        rows["uniform weights"] = score_row(on, lambda i: {d: 1 / 3 for d in DIMENSIONS})
        rows["majority class"] = score_row(on, lambda i: _one_hot(majority))
        rows["turn-position prior"] = score_row(on, prior_weights)
        return rows

    rows = all_rows(items)
    subset_rows = all_rows(subset) if 0 < len(subset) < len(items) else None
    example_sanity = sanity(generated["shipped examples"], contexts)
    plot_weights_by_turn(items, generated["shipped"], out / "weights_by_turn.png", args.split)
    paired, by_turn_rows = against_prior(items, model_weights("shipped"), prior_weights)
    extra_paired = {  # each adapter row against the shipped row and against the prior, paired
        name: (
            against_prior(items, model_weights(name), model_weights("shipped"))[0],
            against_prior(items, model_weights(name), prior_weights)[0],
        )
        for name in extra
        if name in rows
    }
    if read_expected:
        extra_paired[DECODED_ROW] = (
            against_prior(items, decoded_weights, model_weights("shipped"))[0],
            against_prior(items, decoded_weights, prior_weights)[0],
        )

    def table_of(rows: dict[str, dict[str, Any]], n: int) -> list[str]:
        lines = [
            f"| row ({n} turns) | top match [95% CI] | mean r_align | single top | valid | s/rubric |",
            "|---|---|---|---|---|---|",
        ]
        for name, r in rows.items():
            est = Estimate(**r["top_match"])
            valid = f"{r['valid_share']:.3f}" if "valid_share" in r else "-"
            secs = f"{r['seconds_per_rubric_median']:.2f}" if r.get("seconds_per_rubric_median") else "-"
            lines.append(
                f"| {name} | {est.format()} | {r['mean_r_align']:.3f} | {r['single_top_share']:.3f} "
                f"| {valid} | {secs} |"
            )
        return lines

    lines = table_of(rows, len(items))
    if subset_rows is not None:
        lines += ["", *table_of(subset_rows, len(subset))]
    base_sanity = (subset_rows or rows).get("untrained base")
    keys = [k for k in rows["shipped"] if k.endswith("_share") and k not in ("single_top_share", "valid_share")]
    columns = [f"shipped (ESConv {args.split})", *(f"{n} (ESConv {args.split})" for n in extra if n in rows)]
    columns += (["untrained base"] if base_sanity is not None else []) + ["shipped (examples/)"]
    lines += ["", "| sanity | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for key in keys:
        cells = [rows["shipped"][key], *(rows[n][key] for n in extra if n in rows)]
        cells += ([base_sanity[key]] if base_sanity is not None else []) + [example_sanity[key]]
        lines.append(f"| {key} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |")
    for name, (vs_shipped, vs_prior) in extra_paired.items():
        lines += [
            "",
            f"{name} minus shipped, paired on the {len(items)} turns: {vs_shipped.format()}; "
            f"minus the turn-position prior: {vs_prior.format()}",
        ]
    lines += [
        "",
        f"Shipped minus turn-position prior, paired on the {len(items)} turns: {paired.format()}",
        "",
        "| supporter turn | n | shipped | turn-position prior | shipped's top dimension |",
        "|---|---|---|---|---|",
    ]
    for b in by_turn_rows:
        tops = ", ".join(f"{d} {n}" for d, n in b["model_tops"].items())
        lines.append(f"| {b['turns']} | {b['n']} | {b['model']:.3f} | {b['prior']:.3f} | {tops} |")
    if timing:
        lines += [
            "",
            f"Time per rubric (median, {timing['shipped']['turns']} turns, llama.cpp, {args.threads} thread): "
            f"shipped {timing['shipped']['median_s']:.2f} s, untrained base "
            f"{timing['untrained base']['median_s']:.2f} s (ratio {timing['ratio_shipped_to_base']:.2f}).",
        ]
    if agreement:
        lines.append(
            f"llama.cpp (base + adapter) vs transformers (merged), greedy, {agreement['turns']} turns: "
            f"{agreement['identical']} identical rubrics, {agreement['same_weights']} same weights, "
            f"{agreement['same_top']} same top dimension."
        )
    table = "\n".join(lines)
    print(table)
    result = {
        "turns": len(items),
        "dialogues": len({i["dialogue"] for i in items}),
        "seed": args.seed,
        "majority": majority.value,
        "position_prior": {str(k): v.value for k, v in sorted(priors.by_turn.items())},
        "rows": rows,
        "shipped_vs_prior": {"paired_difference": paired.to_json(), "by_turn": by_turn_rows},
        "adapter_rows": {
            name: {"file": extra.get(name), "minus_shipped": a.to_json(), "minus_prior": b.to_json()}
            for name, (a, b) in extra_paired.items()
        },
        "subset_rows": subset_rows,
        "subset_turns": len(subset),
        "examples_sanity": example_sanity,
        "generation_wall_s": wall,
        "timing": timing,
        "runtime_agreement": agreement,
    }
    (out / "results.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    (out / "results.md").write_text(table + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
