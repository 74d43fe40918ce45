"""The bundled evaluator on held-out data, against its baselines, in one run.

Items (never trained on; the same items for every row):

- **Lend-an-Ear pairs**: the judged replies of the held-out conversations (``valid`` and ``test``
  of :func:`care_lab.data.lend_an_ear_split`), four systems per turn (the human reply and three
  Qwen3-4B systems); a pair is two replies to the same turn whose MINT judge scores (aggregated
  empathy) differ by at least 1. Metric: the share of pairs the reward orders as the judge does
  (ties count 1/2), 95 % bootstrap interval over turns; the same over the pairs of similar length
  (the longer reply at most 1.5 times the other's words), where length cannot be what orders them
  (``--lend-an-ear-systems all`` scores all twelve judged systems, for more such pairs).
- **ESConv test groups**: for a seeded sample of test contexts (one per dialogue), a group of 11
  replies: the reference, five supporter replies from other test dialogues, a platitude and an
  evasive reply (both from lists the evaluator's training data does not contain), and three
  echoes of the user (:data:`ECHOES`: their last message repeated, the reference with it
  appended, and it turned around into a reflection, "So you lost your job ..."). Metrics: the
  share of (reference, other dialogue's reply) pairs where the reference gets the higher reward
  (ties 1/2), the same against the platitude, the evasive reply and each echo, and the share of
  groups whose rewards are all equal (zero spread: GRPO learns nothing from them).
- **Expert agreement**: Spearman between the mean reward of the human replies of each held-out
  Lend-an-Ear conversation and the experts' mean aggregated rating of it (9 conversations: the
  interval is wide).
- **Length dependence**: Spearman between the reward and the reply's length in words over the
  Lend-an-Ear replies (how much of the ordering a policy could get by writing more), interval
  over turns.

Scores come from the evaluator's default mode: forced-position scoring on llama.cpp, which also
gives every score's distribution over 1-5, so the shipped reward is read two ways from the same
calls, the greedy scores and the logprob-expected scores.

Rows: the shipped reward (bundled generator + bundled evaluator) and the paper's ablations with the
shipped models (uniform weights, fixed criteria, fixed rubric); with stage ``rubrics-expected``, the
shipped reward on the same criteria and scores weighted as the generator adapter writes them (read
as expectations, the default before the weights head); with ``--compare-evaluator``,
another evaluator adapter under the same rubrics; the untrained evaluator under the
shipped rubrics (what the evaluator's training adds; on every Lend-an-Ear item and the subsample's
ESConv groups, since with the whole context it takes about 8 s an evaluation); reply length. On a seeded subsample of
groups: the untrained base model as both generator and evaluator (it writes rubrics about 9x
slower), and the shipped reward read two ways from the same calls, the greedy scores and the
logprob-expected scores (keeping logits for every position makes llama.cpp about 3x slower).
With stage ``context-fit``, more rows on every item (see :mod:`care_sdk.bundled.context_fit`): the
reply's PMI with its context on the bundled base model (nats), alone; and the shipped reward
with context fit (``fitted_reward``, the default floor, against the default baseline ``"Hi."`` or
those of ``--baselines``), through the shipped gate (``BUNDLED_GATE``, ``SUPPORT_GATE`` with
``--baselines support``) and through a gate fitted in
this run on ``--valid-pairs`` ESConv ``train`` pairs (reference against another train dialogue's
reply: a gate is fitted on train data only), never on the items measured; the same
on the logprob-expected scores; the plain product of the two (floor 0), the first form; and with
``--compare-evaluator``, the other adapter's reward with context fit through the shipped gate.
Rewards here are the reward formula on the evaluation, without the pre-checks of
:class:`~care_sdk.guards.Guards`, so that the model itself is measured; two rows apply the default
guards as the shipped reward does (a flagged reply, such as a copy of the dialogue, gets 0), with
and without context fit. Context fit discounts what the reply repeats from the context (the
default: the model reads the reply without it, and the fit is scaled by the reply's own share);
stage ``context-fit-as-written`` reads the reply whole, for one more row. Stage ``shift-check``
(after ``context-fit``, against "Hi.") reads the bundled shift check's factor of every reply
(:class:`~care_sdk.bundled.shift_check.ShiftCheck`), for the row of the default reward: context fit times
that factor, as ``AdaptiveReward.from_backend("default")`` pays.

Usage:
    python benchmarks/bench_evaluator.py --out runs/bench_evaluator [--stage rubrics|base|shipped|...|report]
        [--compare-evaluator runs/other_evaluator.gguf]   # with stage compare: another adapter, more rows
        [--valid-pairs 150]                               # with stage context-fit: pairs the gate is fitted on
        [--esconv-split valid --tasks esconv]             # ESConv valid groups only: to choose a setting
        [--lend-an-ear train --lend-an-ear-turns 60 --tasks lend-an-ear]  # Lend-an-Ear train turns: the same
        [--baselines support|esconv|chats]                # context fit against other baselines (its own --out)
        [--context-fit-window 10]                         # context fit reads another window (its own --out;
                                                          # its rows use the gate fitted on --valid-pairs)
Every model call's result is cached under ``--out`` (JSON lines), so a run resumes where it stopped
and stages can run in separate processes. Writes ``results.json`` and ``results.md``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _evaluator_items import items as load_items
from _evaluator_items import turn_per_dialogue
from _evaluator_metrics import (
    check_cache,
    checked_shares,
    guarded,
    metrics,
    own_shares,
    row_rewards,
    valid_gate,
    with_context_fit,
)
from _written_chats import CHATS

from care_lab.bench.metrics import (
    Estimate,
)
from care_lab.training.roles import Use
from care_sdk import ContextFit, RubricEvaluator, RubricGenerator
from care_sdk.backends import resolve_backend
from care_sdk.bundled.context_fit import (
    BASELINE_NAMES,
    DEFAULT_FLOOR,
    Gate,
    bundled_gate,
    fitted_reward,
    named_baselines,
)
from care_sdk.bundled.shift_check import ShiftCheck
from care_sdk.evaluator import expected_scores
from care_sdk.prompts import parse_evaluation
from care_sdk.types import Rubric, fixed_criteria

THREADS = 1
VARIANTS = ("care", "uniform_weights", "fixed_criteria", "fixed_rubric")


def _cache(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            out[record["key"]] = record["value"]
    return out


def _append(path: Path, key: str, value: Any) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"key": key, "value": value}, ensure_ascii=False) + "\n")


def rubrics(spec: str, items: list[dict[str, Any]], out: Path, weights_head: bool | None = None) -> dict[str, Any]:
    """The rubric of every group's context by generator ``spec`` (cached in ``rubrics_<spec>.jsonl``);
    with ``weights_head=False``, the bundled generator's rubrics with the weights its adapter writes,
    read as expectations (the default before the weights head; ``rubrics_<spec>_expected.jsonl``)."""
    path = out / f"rubrics_{spec}{'_expected' if weights_head is False else ''}.jsonl"
    done = _cache(path)
    backend = resolve_backend(spec, role="generator", n_threads=THREADS, n_ctx=4096)
    generator = RubricGenerator(backend, weights_head=weights_head)
    contexts = {it["group"]: it["context"] for it in items}
    for group, context in contexts.items():
        if group in done:
            continue
        start = time.perf_counter()
        try:
            rubric: Any = generator.generate(context).model_dump(mode="json")
        except Exception as exc:  # a failed rubric is recorded, never a silent default
            rubric = {"error": str(exc)}
        _append(path, group, {"rubric": rubric, "seconds": time.perf_counter() - start})
        done[group] = {"rubric": rubric}
    return done


def evaluations(
    spec: str,
    rubric_spec: str,
    criteria: str,
    items: list[dict[str, Any]],
    out: Path,
    rubric_of: dict[str, Any],
    logprobs: bool = False,
    adapter: str | None = None,
) -> dict[str, Any]:
    """Scores of every item by evaluator ``spec`` under ``rubric_spec``'s rubrics (``criteria``:
    ``generated`` or ``fixed``), greedy; with ``logprobs`` also the logprob-expected scores of the
    same call (llama.cpp then keeps logits for every position, about three times slower; a forced
    reply, the evaluator's default on llama.cpp, carries them without that cost). With
    ``adapter``, that GGUF adapter file replaces the bundled one (cached under ``compare``). Cached."""
    name = "compare" if adapter else spec
    path = out / f"evals_{name}_{rubric_spec}_{criteria}{'_logprobs' if logprobs else ''}.jsonl"
    done = _cache(path)
    options: dict[str, Any] = {"adapter": adapter} if adapter else {}
    evaluator = RubricEvaluator(
        resolve_backend(spec, role="evaluator", n_threads=THREADS, n_ctx=4096, logprobs=logprobs, **options),
        use_logprobs=logprobs,
    )
    for item in items:
        if item["key"] in done:
            continue
        record = rubric_of.get(item["group"], {}).get("rubric")
        if record is None or "error" in record:
            continue
        rubric = Rubric.model_validate(record)
        if criteria == "fixed":
            rubric = Rubric(weights=rubric.weights, criteria=fixed_criteria())
        request = evaluator.request(item["context"], rubric, item["reply"])
        value: dict[str, Any] = {}
        start = time.perf_counter()
        for _ in range(evaluator.max_attempts):
            completion = evaluator.backend.generate([request])[0].completions[0]
            try:
                sampled = parse_evaluation(completion.text, rubric)
            except ValueError as exc:
                value = {"error": str(exc), "text": completion.text}
                continue
            value = {"sampled": [s.score for s in sampled.scores]}
            if logprobs or completion.logprobs:  # a forced reply carries each slot's distribution
                value["expected"] = [s.score for s in expected_scores(sampled, completion).scores]
            break
        value["seconds"] = time.perf_counter() - start
        _append(path, item["key"], value)
        done[item["key"]] = value
    return done


def valid_pairs(
    count: int, seed: int, split: str = "train", use: Use = "fit"
) -> list[tuple[list[dict[str, Any]], str, str]]:
    """``(context, reference reply, reply from another dialogue)`` for ``count`` ESConv ``split``
    turns, one turn per dialogue, seeded: what the context-fit gate is fitted on (train pairs,
    ``use="fit"``; another split with ``use="evaluate"`` measures on it). The role guard refuses
    fitting on anything but train data."""
    rng = random.Random(seed)
    turns = turn_per_dialogue(split, rng, use)
    out = []
    for turn in turns[:count]:
        other = rng.choice([t for t in turns if t.dialogue_id != turn.dialogue_id])
        out.append((turn.context_messages(), turn.reply, other.reply))
    return out


def _fit_cache(out: Path, strip_copies: bool = True) -> Path:
    return out / ("context_fit.jsonl" if strip_copies else "context_fit_as_written.jsonl")


BASELINES = (*BASELINE_NAMES, "chats")
"""What ``--baselines`` names: the package's (:data:`~care_sdk.bundled.context_fit.BASELINE_NAMES`) and the
written chats of ``_written_chats.py``, a candidate that was not kept."""


GATES_WINDOW: int = inspect.signature(ContextFit).parameters["window"].default
"""``ContextFit``'s default window, the one the package's gates were fitted at: a context-fit run of
another ``--context-fit-window`` is read through the gate fitted on its own valid pairs."""


def baseline_pool(name: str) -> Sequence[Any]:
    """The contexts ``--baselines NAME`` compares a reply against."""
    return CHATS if name == "chats" else named_baselines(name)


def context_fit(
    items: list[dict[str, Any]],
    out: Path,
    valid_count: int,
    seed: int,
    strip_copies: bool = True,
    baselines: str = "neutral",
    window: int = GATES_WINDOW,
) -> dict[str, Any]:
    """The PMI of every item's reply with its context on the bundled base model
    (:class:`~care_sdk.ContextFit`, words repeated from the context stripped unless ``strip_copies``
    is off), and of ``valid_count`` ESConv train pairs the gate is fitted on (keys
    ``gate:<i>:reference`` / ``gate:<i>:other``). One batch per context, so its prompt is
    prefilled once; cached in ``context_fit.jsonl`` (``context_fit_as_written.jsonl``)."""
    path = _fit_cache(out, strip_copies)
    done = _cache(path)
    fit = ContextFit(
        resolve_backend("default", n_threads=THREADS),
        strip_copies=strip_copies,
        baselines=baseline_pool(baselines),
        gate=Gate(1.0, 0.0),  # the PMI is what is cached; the report applies the gates
        window=window,
    )
    groups: dict[str, list[tuple[str, Any, str]]] = defaultdict(list)
    for it in items:
        groups[it["group"]].append((it["key"], it["context"], it["reply"]))
    for i, (context, reference, other) in enumerate(valid_pairs(valid_count, seed, "train", "fit")):
        groups[f"gate:{i}"] += [(f"gate:{i}:reference", context, reference), (f"gate:{i}:other", context, other)]
    for members in groups.values():
        todo = [m for m in members if m[0] not in done]
        if not todo:
            continue
        start = time.perf_counter()
        values = fit.pmi_batch([(context, reply) for _, context, reply in todo])
        seconds = (time.perf_counter() - start) / len(todo)
        for (key, _, _), value in zip(todo, values, strict=True):
            record = {"error": str(value)} if isinstance(value, Exception) else {"pmi": value}
            done[key] = record | {"seconds": seconds}
            _append(path, key, done[key])
    return done


def shift_check(items: list[dict[str, Any]], out: Path, check: ShiftCheck | None = None) -> None:
    """The shift check's factor (:class:`~care_sdk.bundled.shift_check.ShiftCheck`; ``None``: the bundled
    one) of every item, from the context-fit stage's PMI against "Hi." and the reply's hidden
    states, a context's replies read together (each item's seconds are its share of its
    context's); cached with the check's identity (:func:`_evaluator_metrics.check_cache`)."""
    path = check_cache(out, check)
    done = _cache(path)
    pmi = {k: v["pmi"] for k, v in _cache(_fit_cache(out)).items() if "pmi" in v}
    check = check or ShiftCheck.bundled()
    fit = ContextFit(resolve_backend("default", n_threads=THREADS), gate=Gate(1.0, 0.0), check=check)
    groups: dict[str, list[dict[str, Any]]] = {}
    for it in items:
        if it["key"] in pmi and done.get(it["key"], {}).get("check") != check.identity:
            groups.setdefault(it["group"], []).append(it)
    for group in groups.values():  # one context's replies together: its prefix is read once
        start = time.perf_counter()
        values = fit.check_factors([(it["context"], it["reply"]) for it in group], [pmi[it["key"]] for it in group])
        seconds = (time.perf_counter() - start) / len(group)
        for it, value in zip(group, values, strict=True):
            record = {"error": str(value)} if isinstance(value, Exception) else {"factor": value}
            done[it["key"]] = record | {"check": check.identity, "seconds": seconds}
            _append(path, it["key"], done[it["key"]])


def _seconds(evals: dict[str, Any]) -> float | None:
    values = [v["seconds"] for v in evals.values() if "seconds" in v]
    return statistics.median(values) if values else None


FLOOR_SWEEP = (0.25, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""The floors a ``--esconv-split valid`` run reports besides 0 and the default, to choose one on valid data."""


def report(
    items: list[dict[str, Any]],
    out: Path,
    base_subsample: set[str],
    resamples: int,
    sweep_floors: bool = False,
    baselines: str = "neutral",
    window: int = GATES_WINDOW,
) -> dict[str, Any]:
    """Every row's metrics, written as ``results.json`` and ``results.md``; with ``sweep_floors``,
    the shipped reward with context fit (shipped gate) at every floor of :data:`FLOOR_SWEEP`. The
    shipped gate is the bundled one for the ``baselines`` and ``window`` the context-fit stage read
    with; where the package has none, the one fitted on the run's valid pairs."""
    shipped_gate = bundled_gate(baseline_pool(baselines)) if window == GATES_WINDOW else None
    shipped_rubrics = _cache(out / "rubrics_default.jsonl")
    base_rubrics = _cache(out / "rubrics_base.jsonl")
    sub = [it for it in items if it["group"] in base_subsample]
    rows: dict[str, dict[str, float | None]] = {}
    timing: dict[str, float | None] = {}
    generated = _cache(out / "evals_default_default_generated.jsonl")
    fixed = _cache(out / "evals_default_default_fixed.jsonl")
    timing["shipped evaluator"] = _seconds(generated)
    for variant in VARIANTS:
        weights = "uniform" if variant in ("uniform_weights", "fixed_rubric") else "generated"
        criteria = "fixed" if variant in ("fixed_criteria", "fixed_rubric") else "generated"
        evals = fixed if criteria == "fixed" else generated
        rows[f"shipped: {variant}"] = row_rewards(items, shipped_rubrics, evals, "sampled", weights, criteria)
    before_head = _cache(out / "rubrics_default_expected.jsonl")
    if before_head:  # the same criteria and scores, the weights the adapter writes (read as expectations)
        reweighted = {
            group: {"rubric": shipped_rubrics[group]["rubric"] | {"weights": value["rubric"]["weights"]}}
            for group, value in before_head.items()
            if group in shipped_rubrics
            and "error" not in value["rubric"]
            and "error" not in shipped_rubrics[group]["rubric"]
        }
        rows["shipped: care, the adapter's expected weights"] = row_rewards(
            items, reweighted, generated, "sampled", "generated", "generated"
        )
    if any("expected" in v for v in generated.values()):  # forced-position scoring reads them in the same call
        rows["shipped: care, expected scores"] = row_rewards(
            items, shipped_rubrics, generated, "expected", "generated", "generated"
        )
    compared = _cache(out / "evals_compare_default_generated.jsonl")
    if compared:
        timing["compared evaluator adapter"] = _seconds(compared)
        for how in ("sampled", "expected"):
            rows[f"compared evaluator adapter, shipped rubrics, {how} scores"] = row_rewards(
                items, shipped_rubrics, compared, how, "generated", "generated"
            )
    base_eval = _cache(out / "evals_base_default_generated.jsonl")
    timing["untrained evaluator (whole context)"] = _seconds(base_eval)
    rows["untrained evaluator, shipped rubrics"] = row_rewards(
        items, shipped_rubrics, base_eval, "sampled", "generated", "generated"
    )
    rows["reply length (words)"] = {it["key"]: float(len(it["reply"].split())) for it in items}
    full_base = _cache(out / "evals_base_base_generated.jsonl")
    rows["subsample: untrained base"] = row_rewards(sub, base_rubrics, full_base, "sampled", "generated", "generated")
    logprobs = _cache(out / "evals_default_default_generated_logprobs.jsonl")
    timing["shipped evaluator with logprobs"] = _seconds(logprobs)
    for how in ("sampled", "expected"):
        rows[f"subsample: shipped, {how} scores"] = row_rewards(
            sub, shipped_rubrics, logprobs, how, "generated", "generated"
        )
    rows["subsample: reply length"] = {it["key"]: float(len(it["reply"].split())) for it in sub}
    fitted = _cache(_fit_cache(out))
    pmi = {key: value["pmi"] for key, value in fitted.items() if "pmi" in value}
    as_written = {k: v["pmi"] for k, v in _cache(_fit_cache(out, strip_copies=False)).items() if "pmi" in v}
    gate: Gate | None = None
    bundled = shipped_gate is not None
    if pmi:
        gate = valid_gate(pmi)
        shipped_gate = shipped_gate or gate  # baselines without a bundled gate: its rows use the one fitted here
        if shipped_gate is None:
            raise SystemExit(
                "no bundled gate for these baselines and window: run the context-fit stage with --valid-pairs"
            )
        rows["bundled base model: context PMI (nats)"] = dict(pmi)
        greedy = rows["shipped: care"]
        forms = [
            ("shipped gate", shipped_gate, DEFAULT_FLOOR, greedy),
            ("shipped gate, plain product (floor 0)", shipped_gate, 0.0, greedy),
        ]
        if gate is not None:
            forms.insert(1, ("gate fitted here", gate, DEFAULT_FLOOR, greedy))
        expected = rows.get("shipped: care, expected scores")
        if expected is not None:
            forms.append(("shipped gate, expected scores", shipped_gate, DEFAULT_FLOOR, expected))
        adapter_weights = rows.get("shipped: care, the adapter's expected weights")
        if adapter_weights is not None:
            forms.append(("shipped gate, the adapter's expected weights", shipped_gate, DEFAULT_FLOOR, adapter_weights))
        if sweep_floors:
            forms += [(f"shipped gate, floor {floor}", shipped_gate, floor, greedy) for floor in FLOOR_SWEEP]
        own = own_shares(items)
        for name, use, floor, care in forms:
            rows[f"shipped: care with context fit, {name}"] = with_context_fit(care, pmi, own, use, floor)
        compared_greedy = rows.get("compared evaluator adapter, shipped rubrics, sampled scores")
        if compared_greedy is not None:  # the other adapter in the default reward's place
            rows["compared evaluator adapter with context fit, shipped gate"] = with_context_fit(
                compared_greedy, pmi, own, shipped_gate, DEFAULT_FLOOR
            )
        if as_written:
            rows["shipped: care with context fit, shipped gate, copies not discounted"] = {
                k: (
                    fitted_reward(r, shipped_gate(as_written[k]), DEFAULT_FLOOR)
                    if r is not None and k in as_written
                    else None
                )
                for k, r in greedy.items()
            }
        checked_cache = _cache(check_cache(out))
        checked = checked_shares(own, checked_cache)
        if checked and bundled and baselines == "neutral" and window == GATES_WINDOW:
            timing['shift check (reads of the reply after the context and after "Hi.")'] = _seconds(checked_cache)
            rows["shipped: care with context fit and the shift check (the default reward)"] = with_context_fit(
                greedy, pmi, checked, shipped_gate, DEFAULT_FLOOR
            )
        rows["shipped: care with context fit and the default guards"] = guarded(
            items, rows["shipped: care with context fit, shipped gate"]
        )
    rows["shipped: care with the default guards"] = guarded(items, rows["shipped: care"])
    results = {
        name: {metric: est.to_json() for metric, est in metrics(items, rewards, resamples).items()}
        for name, rewards in rows.items()
        if any(v is not None for v in rewards.values())  # a stage this run did not make has no row
    }
    counts = {
        "lend-an-ear items": sum(it["task"] == "lend-an-ear" for it in items),
        "lend-an-ear turns": len({it["group"] for it in items if it["task"] == "lend-an-ear"}),
        "esconv groups": len({it["group"] for it in items if it["task"] == "esconv"}),
        "base subsample groups": len(base_subsample),
    }
    if gate is not None:
        counts["context-fit gate pairs (ESConv train)"] = sum(k.startswith("gate:") for k in pmi) // 2
        timing["context fit (reads after the context and each baseline)"] = _seconds(fitted)
    payload = {
        "counts": counts,
        "median seconds per evaluation": timing,
        "context-fit gate": {
            "fitted here": vars(gate) if gate else None,
            "shipped": vars(shipped_gate) if bundled and shipped_gate else None,
        },
        "rows": results,
    }
    (out / "results.json").write_text(json.dumps(payload, indent=2), encoding="utf-8")
    names = list(next(iter(results.values())))
    lines = ["| row | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for row, values in results.items():
        cells = [Estimate(**values[m]).format() if m in values else "n/a" for m in names]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    lines += ["", json.dumps(counts), json.dumps(timing)]
    (out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return payload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/bench_evaluator")
    parser.add_argument("--esconv-contexts", type=int, default=24)
    parser.add_argument(
        "--esconv-split",
        choices=["test", "valid"],
        default="test",
        help="where the ESConv groups come from: valid to choose a setting, test to report it",
    )
    parser.add_argument(
        "--tasks",
        default="lend-an-ear,esconv",
        help="comma-separated: lend-an-ear, esconv (a valid-split run needs only esconv)",
    )
    parser.add_argument(
        "--lend-an-ear",
        choices=["held-out", "train"],
        default="held-out",
        help="whose Lend-an-Ear turns: the held-out conversations (to report), or the train conversations "
        "(to choose a context-fit setting; the evaluator was trained on them, so its rows are optimistic)",
    )
    parser.add_argument("--lend-an-ear-turns", type=int, help="keep this many Lend-an-Ear turns (seeded)")
    parser.add_argument(
        "--lend-an-ear-systems",
        choices=["four", "all"],
        default="four",
        help="whose judged replies: the human and three Qwen3-4B systems, or all twelve (more pairs of similar length)",
    )
    parser.add_argument("--base-groups", type=int, default=16, help="groups (turns) the untrained base row scores")
    parser.add_argument(
        "--compare-evaluator",
        metavar="GGUF",
        help="another evaluator adapter file: stage 'compare' scores every item with it, as more rows",
    )
    parser.add_argument(
        "--valid-pairs", type=int, default=150, help="ESConv train pairs the context-fit gate is fitted on"
    )
    parser.add_argument(
        "--baselines",
        choices=BASELINES,
        default="neutral",
        help='what context fit compares a reply against: "Hi." (neutral, the default), SUPPORT_CONVERSATIONS '
        "(support), four ESConv train contexts (esconv, from the data directory) or the written chats "
        "of _written_chats.py (chats, a candidate not kept); give "
        "it to the context-fit stages and the report, in a directory of its own",
    )
    stages = [
        "rubrics", "rubrics-expected", "base", "shipped", "shipped-fixed", "shipped-logprobs", "compare",
        "context-fit", "context-fit-as-written", "shift-check",
    ]  # fmt: skip
    parser.add_argument(
        "--context-fit-window", type=int, default=GATES_WINDOW, help="messages of context the context-fit stages read"
    )
    parser.add_argument("--stage", choices=[*stages, "report", "all"], default="all")
    parser.add_argument(
        "--shift-check", type=ShiftCheck.load, metavar="JSON", help="stage shift-check: this check, not the bundled one"
    )
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.stage == "compare" and not args.compare_evaluator:
        parser.error("--stage compare scores with another adapter: give it with --compare-evaluator GGUF")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    if not tasks or set(tasks) - {"lend-an-ear", "esconv"}:
        parser.error(f"--tasks takes lend-an-ear and/or esconv, got {args.tasks!r}")
    items = load_items(
        args.esconv_contexts,
        args.seed,
        args.esconv_split,
        tasks,
        args.lend_an_ear,
        args.lend_an_ear_turns,
        all_systems=args.lend_an_ear_systems == "all",
    )
    groups = sorted({it["group"] for it in items})
    subsample = set(random.Random(args.seed).sample(groups, min(args.base_groups, len(groups))))
    base_items = [it for it in items if it["group"] in subsample]
    lae_and_sub = [it for it in items if it["task"] == "lend-an-ear" or it["group"] in subsample]
    run: dict[str, Callable[[], Any]] = {
        "rubrics": lambda: rubrics("default", items, out),
        "rubrics-expected": lambda: rubrics("default", items, out, weights_head=False),
        "base": lambda: (
            evaluations("base", "default", "generated", lae_and_sub, out, rubrics("default", items, out)),
            evaluations("base", "base", "generated", base_items, out, rubrics("base", base_items, out)),
        ),
        "shipped": lambda: evaluations("default", "default", "generated", items, out, rubrics("default", items, out)),
        "shipped-fixed": lambda: evaluations("default", "default", "fixed", items, out, rubrics("default", items, out)),
        "shipped-logprobs": lambda: evaluations(
            "default", "default", "generated", base_items, out, rubrics("default", items, out), logprobs=True
        ),
        "compare": lambda: (
            evaluations(
                "default",
                "default",
                "generated",
                items,
                out,
                rubrics("default", items, out),
                adapter=args.compare_evaluator,
            )
            if args.compare_evaluator
            else None
        ),
        "context-fit": lambda: context_fit(
            items, out, args.valid_pairs, args.seed, baselines=args.baselines, window=args.context_fit_window
        ),
        "shift-check": lambda: shift_check(items, out, args.shift_check),
        "context-fit-as-written": lambda: context_fit(
            items,
            out,
            args.valid_pairs,
            args.seed,
            strip_copies=False,
            baselines=args.baselines,
            window=args.context_fit_window,
        ),
    }
    for stage in stages:
        if args.stage in (stage, "all"):
            print(f"{stage}: {len(items)} items", flush=True)
            run[stage]()
    if args.stage in ("report", "all"):
        report(
            items, out, subsample, args.resamples, args.esconv_split == "valid", args.baselines, args.context_fit_window
        )


if __name__ == "__main__":
    main()
