"""The add-ons of the bundled models against the method's reward, on test sets no choice has seen.

Applies ``benchmarks/rules/addons.md`` (written before any read): the bundled ``default`` computing
the method's reward, beside the add-ons outside the method (the weights head, expected weights,
context fit) and the baselines of the same run (length, feeling words, uniform weights, the
untrained base, the prior). Each item is scored once: the add-ons'
rewards are read from the same rubric and evaluation (only the weights or the fit differ).

    CARE_DATA_DIR=../shared/data python benchmarks/bench_addons.py --set sage --out runs/addons
    CARE_DATA_DIR=../shared/data python benchmarks/bench_addons.py --set intents --out runs/addons
    python benchmarks/bench_addons.py --report --out runs/addons   # writes benchmarks/results/addons.json

A run records its test read in the ledger (``benchmarks/results/test_reads.json``) when it starts:
the committed rule's hash, the commit, every model file's hash and the ids of the items it reads.
It keeps one JSON line per item in ``OUT/<set>.jsonl`` and resumes from it (a resumed run is the
same read); when the set is done, the records go beside the ledger, compressed
(``benchmarks/results/reads/``). ``--report`` reads the records only.

    python benchmarks/bench_addons.py --labels-only --force-test-read   # the sample's label baselines

``--labels-only`` reads the EmpatheticIntents sample's labels alone, with no model (a forced read,
marked ``labels_only`` in the ledger), and adds the baselines any classifier of that sample must
beat to ``addons.json``: the majority class of the sample and the turn-position prior fitted on
ESConv train.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _addons_samples import intent_items, intent_sample, sage_items, sage_sample_keys, smoke_items

from care_lab.bench.contrast import feeling_words  # the five feeling words the judge's pairs follow
from care_lab.bench.metrics import bootstrap, spearman
from care_lab.data.locations import data_dir as default_data_dir
from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator
from care_sdk.bundled.addons import ExpectedWeightsReader
from care_sdk.bundled.context_fit import ContextFit, fitted_reward
from care_sdk.bundled.weights_head import bundled_weights_head
from care_sdk.types import DIMENSIONS, Dimension, RewardResult

RULE = "benchmarks/rules/addons.md"
RESAMPLES = 2000
ADDONS = ("weights_head", "expected_weights", "context_fit")
"""The add-ons the rule kept (the shift check, read in the committed results file, was removed)."""
WEIGHT_READERS = ("written", "weights_head", "expected_weights", "uniform", "base")


def top_match(weights: dict[str, float], dimension: str) -> bool:
    """Whether ``dimension`` gets strictly the largest weight.

    Examples:
        >>> top_match({"cognitive": 0.5, "affective": 0.3, "proactive": 0.2}, "cognitive")
        True
        >>> top_match({"cognitive": 1 / 3, "affective": 1 / 3, "proactive": 1 / 3}, "cognitive")
        False
    """
    return all(weights[dimension] > w for d, w in weights.items() if d != dimension)


def align(weights: dict[str, float], dimension: str) -> float:
    """r_align with one strategy count on ``dimension``: 1, minus 0.5 per violation, floored at 0.

    Examples:
        >>> align({"cognitive": 0.5, "affective": 0.3, "proactive": 0.2}, "affective")
        0.0
        >>> align({"cognitive": 0.3, "affective": 0.4, "proactive": 0.3}, "affective")
        1.0
    """
    violations = 0 if top_match(weights, dimension) else 1
    violations += sum(1 for d, w in weights.items() if d != dimension and w > weights[dimension])
    return max(0.0, 1.0 - 0.5 * violations)


# -- scoring ---------------------------------------------------------------------------------------------


def _weights(w: dict[Dimension, float]) -> dict[str, float]:
    return {d.value: float(w[d]) for d in DIMENSIONS}


def _rewards(result: RewardResult, readers: dict[str, dict[str, float]]) -> dict[str, float | None]:
    """The reward under each weight reader from one evaluation (the guards' result where they settled it)."""
    if result.dimension_scores is None:
        return {name: result.reward for name in readers}
    scores = {d.value: s for d, s in result.dimension_scores.items()}
    return {name: sum(w[d] * scores[d] for d in w) for name, w in readers.items()}


class Scorer:
    """The shipped reward, its add-ons and the untrained base, all on the bundled model."""

    def __init__(self) -> None:
        self.reward = AdaptiveReward.from_backend("default")
        assert self.reward.parts == ("care",)
        generator = self.reward.generator
        assert generator is not None
        self.expected = RubricGenerator(generator.backend, weight_reader=ExpectedWeightsReader())
        head = bundled_weights_head()
        assert head is not None
        self.head = head
        self.fit = ContextFit()  # PMI against "Hi." with the bundled gate
        self.base = AdaptiveReward(RubricGenerator("base"), RubricEvaluator("base"))

    def weights(self, context: list[dict[str, Any]], written: dict[str, float]) -> dict[str, dict[str, float]]:
        generator = self.reward.generator
        assert generator is not None
        head = self.head.weights([context], generator.backend)[0]
        expected = self.expected.generate(context).weights
        return {
            "written": written,
            "weights_head": _weights(head),
            "expected_weights": _weights(expected),
            "uniform": dict.fromkeys(written, 1 / 3),
        }

    def fits(self, context: list[dict[str, Any]], reply: str) -> dict[str, float | None]:
        items = [(context, reply)]
        pmi = self.fit.pmi_batch(items)[0]
        if not isinstance(pmi, float):
            return {"pmi": None, "fit": None}
        return {"pmi": pmi, "fit": self.fit.gate(pmi) * self.fit.own_share(context, reply)}

    def score(self, context: list[dict[str, Any]], replies: Sequence[str]) -> dict[str, Any]:
        results = self.reward.score_batch([(context, r) for r in replies])
        base = self.base.score_batch([(context, r) for r in replies])
        rubric = next((r.rubric for r in results if r.rubric is not None), None)
        written = _weights(rubric.weights) if rubric is not None else None
        readers = self.weights(context, written) if written is not None else {}
        base_rubric = next((r.rubric for r in base if r.rubric is not None), None)
        if base_rubric is not None:
            readers_base = _weights(base_rubric.weights)
        per_reply = []
        for reply, result, base_result in zip(replies, results, base, strict=True):
            rewards = _rewards(result, readers) if readers else {}
            fits = self.fits(context, reply)
            plain = rewards.get("written")
            fit = fits["fit"]
            rewards["context_fit"] = None if plain is None or fit is None else fitted_reward(plain, fit)
            rewards["base"] = base_result.reward
            per_reply.append(
                {
                    "rewards": rewards,
                    "fits": fits,
                    "error": result.error,
                    "base_error": base_result.error,
                    "flags": list(result.flags),
                    "length": len(reply),
                    "feeling_words": feeling_words(reply),
                }
            )
        weights = dict(readers)
        if base_rubric is not None:
            weights["base"] = readers_base
        return {"weights": weights, "replies": per_reply}


# -- runs ------------------------------------------------------------------------------------------------


def _done(path: Path) -> set[str]:
    if not path.is_file():
        return set()
    return {json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}


ARTIFACT = "bundled-default+addons"


def model_files() -> list[Path]:
    """The model files the 2026-12-05 read hashed: the base GGUF, both adapters and the weights head. The
    run also loads the context-fit gate, which was code then and is a file now
    (``care_sdk/bundled/adapters/context_fit_gate.json``, refitted on train); it is left out here so the
    identity stays that of the recorded read."""
    from care_sdk.backends.llamacpp import default_model_path
    from care_sdk.bundled.adapters import bundled_adapter

    root = Path(bundled_adapter("generator") or "").parent
    return [default_model_path(), root / "generator.gguf", root / "evaluator.gguf", root / "generator_head.json"]


LEDGER_NAMES = {"sage": "sage_rlver/test_turns", "intents": "empatheticdialogues_intents"}


def run(which: str, data: Path, out: Path, *, force: bool, smoke: bool = False) -> None:
    from care_lab.data.results import attach_records, ledger_entry, record_test_read, set_items

    out.mkdir(parents=True, exist_ok=True)
    records = out / f"{which}.jsonl"
    read_file = out / f"{which}.read.json"
    read: Any = None
    if smoke:
        read_file.write_text(
            json.dumps({"data": "smoke (selection data)", "reads": 0}, indent=2) + "\n", encoding="utf-8"
        )
    elif read_file.is_file():  # a resumed run is the same read
        read = ledger_entry(LEDGER_NAMES[which], json.loads(read_file.read_text(encoding="utf-8"))["reads"])
    else:
        read = record_test_read(
            LEDGER_NAMES[which],
            artifact=ARTIFACT,
            command=" ".join(sys.argv),
            rule=RULE,
            items=sage_sample_keys(data) if which == "sage" else (),
            artifact_files=model_files(),
            force=force,
        )
        summary = {"data": read.data, "artifact": read.artifact, "reads": read.reads, "time": read.time}
        read_file.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    items = (
        smoke_items(data, which) if smoke else sage_items(data, read) if which == "sage" else intent_items(data, read)
    )
    if read is not None and not read.items:
        read = set_items(read, [item["id"] for item in items])  # the sample is drawn from the data: named now
    done = _done(records)
    scorer = Scorer()
    with records.open("a", encoding="utf-8") as sink:
        for n, item in enumerate(items, start=1):
            if item["id"] in done:
                continue
            start = time.perf_counter()
            replies = [item["reply"]] + ([item["other"]] if "other" in item else [])
            scored = scorer.score(item["context"], replies)
            record = {k: v for k, v in item.items() if k not in ("context", "reply", "other")}
            record.update(scored, seconds=round(time.perf_counter() - start, 1))
            sink.write(json.dumps(record, ensure_ascii=False) + "\n")
            sink.flush()
            print(f"{which} {n}/{len(items)} {item['id']} {record['seconds']} s", flush=True)
    if read is not None:
        regenerate = f"git checkout {read.commit} && python benchmarks/bench_addons.py --set {which} --force-test-read"
        attach_records(read, _records(records), regenerate=regenerate)


# -- the report ------------------------------------------------------------------------------------------


Has = Callable[[dict[str, Any], str], bool]


def _paired(
    units: Sequence[dict[str, Any]],
    value: Callable[[Sequence[dict[str, Any]], str], float | None],
    a: str,
    b: str,
    has: Has,
) -> dict[str, Any]:
    """The paired bootstrap of ``a`` minus ``b`` over the items where both arms have a value (its n says how many)."""
    both = [u for u in units if has(u, a) and has(u, b)]

    def diff(sample: Sequence[dict[str, Any]]) -> float | None:
        x, y = value(sample, a), value(sample, b)
        return None if x is None or y is None else x - y

    return bootstrap(both, diff, resamples=RESAMPLES, seed=0).to_json()


def _sage_has(record: dict[str, Any], name: str) -> bool:
    return name in ("length", "feeling_words") or record["replies"][0]["rewards"].get(name) is not None


def _weights_has(record: dict[str, Any], name: str) -> bool:
    return name in record["weights"]


def _one(
    units: Sequence[dict[str, Any]], value: Callable[[Sequence[dict[str, Any]], str], float | None], a: str
) -> Any:
    return bootstrap(units, lambda s: value(s, a), resamples=RESAMPLES, seed=0).to_json()


def _sage_spearman(sample: Sequence[dict[str, Any]], name: str) -> float | None:
    pairs = [(r["replies"][0]["rewards"].get(name), r["delta"]) for r in sample]
    if name in ("length", "feeling_words"):
        pairs = [(r["replies"][0][name], r["delta"]) for r in sample]
    pairs = [(x, y) for x, y in pairs if x is not None]
    if len(pairs) < 3:
        return None
    value = spearman([x for x, _ in pairs], [y for _, y in pairs])
    return None if value is None or math.isnan(value) else value


def _intent_mean(
    metric: Callable[[dict[str, float], str], float],
) -> Callable[[Sequence[dict[str, Any]], str], float | None]:
    def value(sample: Sequence[dict[str, Any]], name: str) -> float | None:
        scores = [metric(r["weights"][name], r["dimension"]) for r in sample if name in r["weights"]]
        return sum(scores) / len(scores) if scores else None

    return value


def _pair_wins(sample: Sequence[dict[str, Any]], name: str) -> float | None:
    wins = []
    for r in sample:
        ref, other = r["replies"]
        if name in ("length", "feeling_words"):
            a, b = ref[name], other[name]
        else:
            a, b = ref["rewards"].get(name), other["rewards"].get(name)
        if a is not None and b is not None:
            wins.append(1.0 if a > b else 0.5 if a == b else 0.0)
    return sum(wins) / len(wins) if wins else None


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _prior() -> str:
    """The dimension most frequent among ESConv train supporter strategies (train data, so allowed)."""
    from care_lab.data.esconv import load_esconv

    counts: dict[str, int] = dict.fromkeys((d.value for d in DIMENSIONS), 0)
    for dialogue in load_esconv(default_data_dir() / "esconv" / "train.jsonl").records:
        for turn in dialogue.supporter_turns():
            for dimension, count in turn.counts.items():
                counts[Dimension(dimension).value] += count
    return max(sorted(counts), key=lambda d: counts[d])


def label_baselines(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What a classifier of these items must beat, from their labels alone: always naming the sample's
    majority dimension, and the project's turn-position prior (fitted on ESConv train) at each item's
    supporter-turn number. Both as top-dimension match and as r_align with one count."""
    from care_lab.data.esconv import load_esconv
    from care_lab.data.priorities import fit_top_priors
    from care_lab.data.roles import require_role

    train = default_data_dir() / "esconv" / "train.jsonl"
    require_role(train, "fit", what="the turn-position prior's training data")
    priors = fit_top_priors(t for d in load_esconv(train).records for t in d.supporter_turns())
    shares = {d.value: sum(r["dimension"] == d.value for r in rows) / len(rows) for d in DIMENSIONS}
    majority = max(sorted(shares), key=lambda d: shares[d])

    def one_hot(dimension: str) -> dict[str, float]:
        return {d.value: float(d.value == dimension) for d in DIMENSIONS}

    out: dict[str, dict[str, Any]] = {}
    for name, metric in (("top_dimension_match", lambda w, d: float(top_match(w, d))), ("r_align", align)):
        prior = [metric(one_hot(priors.top(r["turn_number"]).value), r["dimension"]) for r in rows]
        out[name] = {
            "majority_of_sample": {
                "value": sum(metric(one_hot(majority), r["dimension"]) for r in rows) / len(rows),
                "dimension": majority,
                "n": len(rows),
                "note": "the sample's own majority class: a reference, not a method",
            },
            "turn_position_prior": {"value": sum(prior) / len(prior), "n": len(rows), "fitted_on": str(train.name)},
            "dimension_shares": shares,
        }
    return out


def report(out: Path, results: Path) -> dict[str, Any]:
    from care_lab.data.results import ledger_entry, write_results

    metrics: dict[str, Any] = {}
    baselines: dict[str, Any] = {}
    decisions: dict[str, Any] = {}
    reads: dict[str, Any] = {}
    sage_path, intents_path = out / "sage.jsonl", out / "intents.jsonl"
    outside: dict[str, list[dict[str, Any]]] = {a: [] for a in ADDONS}
    order: list[str] = []
    if sage_path.is_file():
        sage = _records(sage_path)
        reads["sage"] = json.loads((out / "sage.read.json").read_text(encoding="utf-8"))
        systems = sorted({r["system"] for r in sage})
        groups = {s: [r for r in sage if r["system"] == s] for s in systems} | {"pooled": sage}  # within first
        for group, units in groups.items():
            key = f"sage/{group}/spearman_vs_emotion_change"
            order.append(key)
            metrics[key] = {"care": _one(units, _sage_spearman, "written"), "n": len(units)}
            for addon in ADDONS:
                metrics[key][addon] = _one(units, _sage_spearman, addon)
                paired = _paired(units, _sage_spearman, addon, "written", _sage_has)
                metrics[key][f"{addon} - care"] = paired
                outside[addon].append({"measure": key, **paired})
            baselines[key] = {b: _one(units, _sage_spearman, b) for b in ("length", "feeling_words", "uniform", "base")}
    if intents_path.is_file():
        intents = _records(intents_path)
        reads["intents"] = json.loads((out / "intents.read.json").read_text(encoding="utf-8"))
        prior = _prior()
        labels = label_baselines(intents) if all("turn_number" in r for r in intents) else {}
        for name, metric in (("top_dimension_match", lambda w, d: float(top_match(w, d))), ("r_align", align)):
            key = f"intents/{name}"
            order.append(key)
            value = _intent_mean(metric)
            metrics[key] = {"care": _one(intents, value, "written"), "n": len(intents)}
            for addon in ("weights_head", "expected_weights"):
                metrics[key][addon] = _one(intents, value, addon)
                paired = _paired(intents, value, addon, "written", _weights_has)
                metrics[key][f"{addon} - care"] = paired
                outside[addon].append({"measure": key, **paired})
            prior_w = {d.value: (1.0 if d.value == prior else 0.0) for d in DIMENSIONS}
            baselines[key] = {b: _one(intents, value, b) for b in ("uniform", "base")}
            baselines[key]["prior"] = {
                "value": sum(metric(prior_w, r["dimension"]) for r in intents) / len(intents),
                "dimension": prior,
            }
            baselines[key] |= labels.get(name, {})
        key = "intents/reference_over_other_conversation (the fit's construct: reported only)"
        metrics[key] = {"care": _one(intents, _pair_wins, "written"), "n": len(intents)}
        for addon in ADDONS:
            metrics[key][addon] = _one(intents, _pair_wins, addon)
        baselines[key] = {b: _one(intents, _pair_wins, b) for b in ("length", "feeling_words", "uniform", "base")}
    for addon, measures in outside.items():
        above = [m["measure"] for m in measures if m.get("low") is not None and m["low"] > 0]
        below = [m["measure"] for m in measures if m.get("high") is not None and m["high"] < 0]
        decisions[addon] = {
            "stays": bool(above) and not below,
            "above_zero_on": above,
            "below_zero_on": below,
            "measures": len(measures),
        }
    data = [LEDGER_NAMES[k] for k in reads]
    entries = [ledger_entry(LEDGER_NAMES[k], r["reads"]) for k, r in reads.items() if r.get("reads")]
    test_reads = max((r["reads"] for r in reads.values()), default=0)
    command = "python benchmarks/bench_addons.py --report --out " + str(out)
    write_results(
        results,
        command,
        data=data,
        role="test" if test_reads else "selection",  # a smoke run reads selection data only
        test_reads=test_reads,
        metrics=metrics,
        baselines=baselines,
        extra={"rule": RULE, "reads": reads, "decisions": decisions, "resamples": RESAMPLES, "order": order},
        reads=entries,
    )
    return decisions


def labels_only(data: Path, results: Path, *, force: bool) -> dict[str, Any]:
    """Read the EmpatheticIntents sample's labels alone (no model) and add their baselines to ``results``."""
    from care_lab.data.results import attach_records, ledger_entry, record_test_read, set_items, write_results
    from care_sdk.prompts import generator_position

    read = record_test_read(
        LEDGER_NAMES["intents"],
        artifact="labels-only",
        command=" ".join(["python", *sys.argv]),
        rule=RULE,
        labels_only=True,
        force=force,
    )
    chosen = intent_sample(data, read)
    read = set_items(read, [t.id for t in chosen])
    rows = [
        {
            "id": t.id,
            "dimension": t.dimension.value,
            "intent": t.intent,
            "turn_number": generator_position(t.context)[1],
        }
        for t in chosen
    ]
    attach_records(read, rows)
    labels = label_baselines(rows)
    payload = json.loads(results.read_text(encoding="utf-8"))
    for name, values in labels.items():
        payload["baselines"][f"intents/{name}"] |= values | {"read": read.reads}
    reads = [ledger_entry(LEDGER_NAMES[k], r["reads"]) for k, r in payload["extra"]["reads"].items()]
    payload["extra"]["labels_only_read"] = {"data": read.data, "reads": read.reads, "time": read.time}
    write_results(
        results,
        payload["command"],
        data=payload["data"],
        role=payload["role"],
        test_reads=max(payload["test_reads"], read.reads),
        metrics=payload["metrics"],
        baselines=payload["baselines"],
        extra=payload["extra"],
        reads=[*reads, read],
    )
    return labels


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=("sage", "intents"), help="the test set to score")
    parser.add_argument("--out", type=Path, default=Path("runs/addons"), help="records directory")
    parser.add_argument("--report", action="store_true", help="write the results file from the records")
    parser.add_argument("--results", type=Path, default=Path("benchmarks/results/addons.json"))
    parser.add_argument("--force-test-read", action="store_true", help="read again for an artifact already read")
    parser.add_argument("--smoke", action="store_true", help="score two selection items shaped like --set's")
    parser.add_argument("--labels-only", action="store_true", help="the intents sample's label baselines (no model)")
    args = parser.parse_args(argv)
    if args.labels_only:
        print(json.dumps(labels_only(default_data_dir(), args.results, force=args.force_test_read), indent=2))
        return 0
    if args.report:
        print(json.dumps(report(args.out, args.results), indent=2))
        return 0
    if args.set is None:
        parser.error("--set or --report")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    run(args.set, default_data_dir(), args.out, force=args.force_test_read, smoke=args.smoke)
    return 0


if __name__ == "__main__":
    sys.exit(main())
