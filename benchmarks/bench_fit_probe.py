"""Does the bundled model's hidden state tell a reply written for the context better than its PMI does?

Context fit reads one number per reply, its PMI with the context (``ContextFit.pmi``): on ESConv
valid pairs it puts the reference reply above another dialogue's reply about 0.80-0.90 of the
time. This asks whether a linear ranking probe on the base model's layer-``--layer`` hidden states
adds to it. For each (context, reply), with the base model read as raw text (``User: ...`` /
``Supporter: ...`` lines, the last 6 messages):

- ``pmi``: the reply's PMI with its context, as the default ``ContextFit`` reads it;
- ``shift``: the mean hidden state of the reply's tokens read after the context, minus the same
  read after ``User: Hi.`` (how the context moves the model's reading of the reply);
- ``match``: the mean hidden state of the context times (elementwise) that of the reply after
  ``Hi.`` (whether they are about the same things).

The probe is a logistic regression on the difference of two replies' features (the reference's
minus the other's), so it scores a reply for ranking within one context, as the evaluator
benchmark's "reference > other" counts; its L2 penalty is chosen by 5-fold cross-validation on
``--train`` ESConv **train** pairs (one turn per dialogue, seeded). It is measured once on
``--valid`` ESConv **valid** pairs (the pairs context fit's gates are fitted on, seed 1): the share
where the reference scores higher, PMI alone beside it, with 95 % bootstrap intervals over
contexts and the paired difference. A screen, not a shipped setting: a probe that does not beat PMI
alone here gets no further run.

With ``--run DIR`` (a ``bench_evaluator.py`` run and its item options), the ``shift`` probe fitted
on the train pairs takes PMI's place in context fit on that run's items, through a gate fitted on
the train pairs' out-of-fold probe scores: the shipped reward read that way, and the probe alone,
beside the run's own rows (today's reward with context fit, PMI alone), with paired differences.
``--contrasts all`` fits the probe on every contrast the reward must keep besides: training
platitudes, evasive replies and echoes of the user against the reference on 200 of the train
contexts, and the Lend-an-Ear judge's pairs on 80 train-conversation turns outside the 60
selection turns (cached beside the other features); ``--with-pmi`` has the probe read the reply's
PMI besides the shift (on the ESConv train pairs).

Features are cached in ``--out`` (``features-<split>-L<layer>-<reads>.jsonl``) and in the run
(``fit_probe_shift-L<layer>-<reads>.jsonl``), so a run resumes; the names carry the layer read and how
the shifts were read (:data:`~care_sdk.bundled.shift_check.READS`), so a cache read another way is never
mixed in: a run with another layer, or after the reads change, starts its own files.

Usage:
    python benchmarks/bench_fit_probe.py --out runs/fit_probe [--train 600] [--valid 150] [--layer 15]
    python benchmarks/bench_fit_probe.py --out runs/fit_probe --train 400 --run runs/x46/valid --run-seed 2 \
        --esconv-contexts 48 --esconv-split valid --tasks esconv
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_evaluator import THREADS, valid_pairs

from care_lab.bench.metrics import bootstrap
from care_sdk import ContextFit
from care_sdk.backends import resolve_backend
from care_sdk.bundled.context_fit import Gate
from care_sdk.bundled.shift_check import NEUTRAL_PREFIX, READS, ShiftReader, check_prefix

WINDOW = 6  # messages of context read, as ContextFit's default window
PENALTIES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
"""The L2 penalties cross-validation chooses from."""


def _reader(layer: int) -> ShiftReader:
    """The shipped check's reader (:class:`~care_sdk.bundled.shift_check.ShiftReader`) on the bundled base model."""
    return ShiftReader(resolve_backend("default", n_threads=THREADS), layer=layer, window=WINDOW)


def cache_file(folder: Path, stem: str, layer: int) -> Path:
    """The cache ``stem`` in ``folder``, named by the layer read and the way shifts are read (:data:`READS`)."""
    return folder / f"{stem}-L{layer}-{READS}.jsonl"


def cached_shifts(path: Path, replies: list[tuple[str, Any, str]], layer: int) -> dict[str, list[float]]:
    """The ``shift`` of every ``(key, context, reply)``, read where ``path`` (JSON lines of ``key``
    and ``shift``) does not already hold it, and appended there."""
    done = {r["key"]: r["shift"] for r in map(json.loads, path.read_text().splitlines())} if path.exists() else {}
    todo = [r for r in replies if r[0] not in done]
    if todo:
        reader = _reader(layer)
        with path.open("a", encoding="utf-8") as handle:
            for n, (key, context, reply) in enumerate(todo):
                done[key] = np.array(reader.shift(context, reply)).round(5).tolist()
                handle.write(json.dumps({"key": key, "shift": done[key]}) + "\n")
                if n % 50 == 0:
                    print(f"{path.name}: {n + 1}/{len(todo)}", flush=True)
    return done


def features(split: str, count: int, seed: int, out: Path, layer: int) -> list[dict[str, Any]]:
    """Cached features of ``count`` (reference, other) pairs of ``split``."""
    path = cache_file(out, f"features-{split}", layer)
    done = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    pairs = valid_pairs(count, seed, split, "fit" if split == "train" else "evaluate")
    if len(done) >= len(pairs):
        return done[: len(pairs)]
    reader = _reader(layer)
    fit = ContextFit(reader.backend, gate=Gate(1.0, 0.0))
    with path.open("a", encoding="utf-8") as handle:
        for i, (context, reference, other) in enumerate(pairs):
            if i < len(done):
                continue
            start = time.perf_counter()
            pmi = fit.pmi_batch([(context, reference), (context, other)])
            prefix = check_prefix(context, WINDOW)
            ctx = np.array(reader.backend.hidden_state_means([prefix], layer)[0])
            row: dict[str, Any] = {"i": i}
            for name, reply, value in (("reference", reference, pmi[0]), ("other", other, pmi[1])):
                after_context = np.array(reader.reply_mean(prefix, reply))
                after_hi = np.array(reader.reply_mean(NEUTRAL_PREFIX, reply))
                row[name] = {
                    "pmi": None if isinstance(value, Exception) else value,
                    "shift": (after_context - after_hi).round(5).tolist(),
                    "match": (ctx * after_hi).round(5).tolist(),
                }
            row["seconds"] = time.perf_counter() - start
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            done.append(row)
            if i % 25 == 0:
                print(f"{split}: {i + 1}/{len(pairs)} ({row['seconds']:.1f} s)", flush=True)
    return done


def matrix(rows: list[dict[str, Any]], blocks: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(reference features, other features) of the rows both of whose PMI could be read."""
    usable = [r for r in rows if r["reference"]["pmi"] is not None and r["other"]["pmi"] is not None]

    def one(side: dict[str, Any]) -> list[float]:
        return [v for b in blocks for v in ([side[b]] if b == "pmi" else side[b])]

    return np.array([one(r["reference"]) for r in usable]), np.array([one(r["other"]) for r in usable])


def fit_probe(diff: np.ndarray, penalty: float) -> np.ndarray:
    """Logistic regression without intercept on ``diff`` (label 1) and ``-diff`` (label 0), L2 ``penalty``."""
    import torch

    x = torch.tensor(np.concatenate([diff, -diff]), dtype=torch.float64)
    y = torch.tensor([1.0] * len(diff) + [0.0] * len(diff), dtype=torch.float64)
    w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> Any:
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w, y) + penalty * (w @ w)
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach().numpy()


def choose_penalty(diff: np.ndarray, grid: tuple[float, ...], seed: int) -> tuple[float, dict[float, float]]:
    """The penalty of the best 5-fold cross-validated pair accuracy on train."""
    order = list(range(len(diff)))
    random.Random(seed).shuffle(order)
    folds = [order[k::5] for k in range(5)]
    scores = {}
    for penalty in grid:
        hits = []
        for k in range(5):
            held = set(folds[k])
            w = fit_probe(diff[[i for i in order if i not in held]], penalty)
            hits += [float(diff[i] @ w > 0) + 0.5 * float(diff[i] @ w == 0) for i in folds[k]]
        scores[penalty] = float(np.mean(hits))
    return max(scores, key=lambda p: scores[p]), scores


def contrast_features(out: Path, seed: int, contexts: int, lae_turns: int, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """``shift`` features of (better, worse) pairs of every contrast the reward must keep, none from a
    selection set: on the first ``contexts`` ESConv train pairs' contexts, the reference against a
    training platitude, a training evasive reply and an echo of the user's last message; and the
    Lend-an-Ear judge's pairs (margin >= 1) on ``lae_turns`` train-conversation turns outside the
    60 selection turns (seed 1). Cached in ``features-contrasts-...`` (:func:`cache_file`)."""
    from _evaluator_items import items as load_items

    from care_lab.bench.metrics import preference_pairs
    from care_lab.training.evaluator_targets import EVASIVE_REPLIES, PLATITUDES

    rng = random.Random(seed)
    replies: list[tuple[str, Any, str]] = []  # (key, context, reply)
    pairs: list[tuple[str, str]] = []  # (better key, worse key)
    for i, (context, reference, _) in enumerate(valid_pairs(contexts, seed, "train")):
        said = next(m["content"] for m in reversed(context) if m["role"] == "user").strip()
        replies.append((f"esconv:{i}:reference", context, reference))
        for kind, reply in (
            ("platitude", rng.choice(PLATITUDES)),
            ("evasive", rng.choice(EVASIVE_REPLIES)),
            ("echo", said),
        ):
            replies.append((f"esconv:{i}:{kind}", context, reply))
            pairs.append((f"esconv:{i}:reference", f"esconv:{i}:{kind}"))
    selection = {it["group"] for it in load_items(0, 1, "valid", ("lend-an-ear",), "train", 60, use="select")}
    lae = [it for it in load_items(0, 1, "valid", ("lend-an-ear",), "train", use="fit") if it["group"] not in selection]
    turns = sorted({it["group"] for it in lae})
    kept = set(random.Random(seed).sample(turns, min(lae_turns, len(turns))))
    judged: dict[str, dict[str, float]] = {}
    for it in lae:
        if it["group"] in kept:
            replies.append((f"lae:{it['key']}", it["context"], it["reply"]))
            judged.setdefault(it["group"], {})[f"lae:{it['key']}"] = it["judge"]
    pairs += [(p.better, p.worse) for p in preference_pairs(judged, margin=1.0)]
    done = cached_shifts(cache_file(out, "features-contrasts", layer), replies, layer)
    print(f"contrast pairs: {len(pairs)} ({sum(k.startswith('lae:') for k, _ in pairs)} Lend-an-Ear)", flush=True)
    return np.array([done[b] for b, _ in pairs]), np.array([done[w] for _, w in pairs])


def shift_probe(
    train: list[dict[str, Any]],
    seed: int,
    extra: tuple[np.ndarray, np.ndarray] | None = None,
    blocks: tuple[str, ...] = ("shift",),
) -> tuple[np.ndarray, np.ndarray, Gate]:
    """The ``shift`` probe fitted on the train pairs (penalty by cross-validation), its feature scale,
    and a gate fitted on the train pairs' out-of-fold probe scores (reference: written for the context).
    ``extra`` (better, worse) pairs are fitted on as well (the gate reads only the train pairs);
    ``blocks``: the features read (``("pmi", "shift")`` adds the reply's PMI)."""
    ref, oth = matrix(train, blocks)
    n_train = len(ref)  # the rows the gate reads; ``extra`` follows them
    scale = np.concatenate([ref, oth]).std(axis=0) + 1e-8
    if extra is not None:
        ref, oth = np.concatenate([ref, extra[0]]), np.concatenate([oth, extra[1]])
    diff = (ref - oth) / scale
    penalty, _ = choose_penalty(diff, PENALTIES, seed)
    order = list(range(len(diff)))
    random.Random(seed).shuffle(order)
    written_for, other = [], []
    for k in range(5):  # the gate reads out-of-fold scores: a probe's scores on its own train pairs overstate it
        held = order[k::5]
        w_k = fit_probe(diff[[i for i in order if i not in set(held)]], penalty)
        gate_rows = [i for i in held if i < n_train]  # other conversations' replies: what the gate is about
        written_for += list((ref[gate_rows] / scale) @ w_k)
        other += list((oth[gate_rows] / scale) @ w_k)
    return fit_probe(diff, penalty), scale, Gate.fit(written_for, other)


def apply(args: argparse.Namespace, train: list[dict[str, Any]]) -> None:
    """The probe in context fit's place on a ``bench_evaluator.py`` run's items: its rows beside the
    run's own (the shipped reward with context fit, PMI alone), with paired differences."""
    import bench_evaluator as bench
    from _evaluator_items import items as load_items
    from _evaluator_metrics import metrics, own_shares, row_rewards, with_context_fit
    from compare_baselines import paired, units

    from care_sdk.bundled.context_fit import BUNDLED_GATE, DEFAULT_FLOOR

    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    items = load_items(
        args.esconv_contexts, args.run_seed, args.esconv_split, tasks, args.lend_an_ear, args.lend_an_ear_turns
    )
    replies = [(it["key"], it["context"], it["reply"]) for it in items]
    done = cached_shifts(cache_file(args.run, "fit_probe_shift", args.layer), replies, args.layer)
    extra = contrast_features(args.out, args.seed, 200, 80, args.layer) if args.contrasts == "all" else None
    blocks = ("pmi", "shift") if args.with_pmi else ("shift",)
    w, scale, gate = shift_probe(train, args.seed, extra, blocks)
    print(f"probe gate (fitted on the train pairs' out-of-fold scores): {gate}")
    pmi = {k: v["pmi"] for k, v in bench._cache(args.run / "context_fit.jsonl").items() if "pmi" in v}
    read = {k: ([pmi[k]] if args.with_pmi else []) + v for k, v in done.items() if k in pmi or not args.with_pmi}
    score = {k: float((np.array(v) / scale) @ w) for k, v in read.items()}
    own = own_shares(items)
    rubric = row_rewards(
        items,
        bench._cache(args.run / "rubrics_default.jsonl"),
        bench._cache(args.run / "evals_default_default_generated.jsonl"),
        "sampled",
        "generated",
        "generated",
    )
    rows = {
        "shipped reward with context fit (today)": with_context_fit(rubric, pmi, own, BUNDLED_GATE, DEFAULT_FLOOR),
        "shipped reward, the shift probe in PMI's place": with_context_fit(rubric, score, own, gate, DEFAULT_FLOOR),
        "PMI alone": {it["key"]: pmi.get(it["key"]) for it in items},
        "shift probe alone": {it["key"]: score.get(it["key"]) for it in items},
    }
    out: dict[str, Any] = {}
    grouped = {name: units(items, values) for name, values in rows.items()}
    for name, values in rows.items():
        estimates = metrics(items, values, args.resamples)
        out[name] = {m: e.to_json() for m, e in estimates.items()}
        print(name)
        for metric, estimate in estimates.items():
            print(f"    {metric:40s} {estimate.format()}")
    for new, old in (
        ("shipped reward, the shift probe in PMI's place", "shipped reward with context fit (today)"),
        ("shift probe alone", "PMI alone"),
    ):
        for metric in grouped[new]:
            diff = paired(grouped[new][metric], grouped[old][metric], args.resamples)
            out[new][f"{metric}, minus {old}"] = diff.to_json()
            print(f"{new} minus {old}: {metric} {diff.format()}")
    (args.run / f"fit_probe_results_{args.contrasts}{'_pmi' if args.with_pmi else ''}.json").write_text(
        json.dumps(out, indent=1) + "\n", encoding="utf-8"
    )


def export(args: argparse.Namespace, train: list[dict[str, Any]]) -> None:
    """Fit the probe on PMI and the shift (as ``--with-pmi``) on the train pairs and write it as a
    :class:`~care_sdk.bundled.shift_check.ShiftCheck` with ``--saturation`` (and ``--reply-tokens``: the
    check then reads a reply's shift over its first N tokens; it is fitted on whole replies either
    way, most of ESConv's within 32 tokens)."""
    from care_sdk.bundled.shift_check import ShiftCheck

    w, scale, gate = shift_probe(train, args.seed, None, ("pmi", "shift"))
    check = ShiftCheck(
        layer=args.layer,
        window=WINDOW,
        weights=[round(float(v), 6) for v in w],
        scale=[round(float(v), 6) for v in scale],
        slope=round(float(gate.slope), 6),
        intercept=round(float(gate.intercept), 6),
        saturation=args.saturation,
        training=(
            f"{len(train)} ESConv train pairs (seed {args.seed}: a reference reply and another train "
            f"conversation's reply), layer {args.layer}, window {WINDOW}; the gate fitted on the probe's "
            f"out-of-fold scores: benchmarks/bench_fit_probe.py --train {args.train} --export PATH "
            f"--saturation {args.saturation}" + (f" --reply-tokens {args.reply_tokens}" if args.reply_tokens else "")
        ),
        reply_tokens=args.reply_tokens,
    )
    check.save(args.export)
    print(f"wrote {args.export}: {check.identity}, gate slope {check.slope} intercept {check.intercept}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/fit_probe"))
    parser.add_argument("--train", type=int, default=600)
    parser.add_argument("--valid", type=int, default=150)
    parser.add_argument("--layer", type=int, default=15)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument(
        "--run", type=Path, help="a bench_evaluator.py run: the probe in context fit's place on its items"
    )
    parser.add_argument(
        "--contrasts",
        choices=["other", "all"],
        default="other",
        help="with --run: the probe fitted on other conversations' replies only, or also on platitudes, "
        "evasive replies, echoes and Lend-an-Ear judged pairs of train turns outside the selection set",
    )
    parser.add_argument(
        "--with-pmi", action="store_true", help="with --run: the probe reads the reply's PMI besides the shift"
    )
    parser.add_argument(
        "--export", type=Path, help="write the PMI + shift probe fitted on the train pairs as a ShiftCheck (JSON)"
    )
    parser.add_argument("--saturation", type=float, default=0.5, help="with --export: the check's saturation")
    parser.add_argument(
        "--reply-tokens", type=int, help="with --export: the check reads a reply's shift over its first N tokens"
    )
    parser.add_argument("--run-seed", type=int, default=2, help="that run's --seed")
    parser.add_argument("--esconv-contexts", type=int, default=48)
    parser.add_argument("--esconv-split", choices=["test", "valid"], default="valid")
    parser.add_argument("--tasks", default="esconv")
    parser.add_argument("--lend-an-ear", choices=["held-out", "train"], default="held-out")
    parser.add_argument("--lend-an-ear-turns", type=int)
    args = parser.parse_args()
    if args.with_pmi and args.contrasts == "all":
        parser.error("--with-pmi reads PMI, which the contrasts of --contrasts all were not read with")
    args.out.mkdir(parents=True, exist_ok=True)
    train = features("train", args.train, args.seed, args.out, args.layer)
    if args.export:
        export(args, train)
        return
    if args.run:
        apply(args, train)
        return
    valid = features("valid", args.valid, args.seed, args.out, args.layer)
    results: dict[str, Any] = {}
    outcomes: dict[str, list[float]] = {}
    for name, blocks in {
        "PMI alone": ("pmi",),
        "shift": ("shift",),
        "PMI + shift": ("pmi", "shift"),
        "PMI + match": ("pmi", "match"),
        "PMI + shift + match": ("pmi", "shift", "match"),
    }.items():
        ref_t, oth_t = matrix(train, blocks)
        ref_v, oth_v = matrix(valid, blocks)
        scale = np.concatenate([ref_t, oth_t]).std(axis=0) + 1e-8  # standardised on train
        diff_t, diff_v = (ref_t - oth_t) / scale, (ref_v - oth_v) / scale
        if blocks == ("pmi",):
            penalty, cv, w = 0.0, {}, np.ones(1)  # PMI alone: its sign, nothing to fit
        else:
            penalty, cv = choose_penalty(diff_t, PENALTIES, args.seed)
            w = fit_probe(diff_t, penalty)
        margin = diff_v @ w
        outcomes[name] = [float(m > 0) + 0.5 * float(m == 0) for m in margin]
        estimate = bootstrap(outcomes[name], lambda s: float(np.mean(s)), resamples=args.resamples)
        results[name] = {"valid": estimate.to_json(), "penalty": penalty, "cv accuracy on train": cv}
        print(f"{name:22s} valid reference > other {estimate.format()}  (penalty {penalty}; cv {cv})", flush=True)
    base = outcomes["PMI alone"]
    for name, values in outcomes.items():
        if name == "PMI alone" or len(values) != len(base):
            continue
        paired = bootstrap(
            list(zip(values, base, strict=True)),
            lambda s: float(np.mean([a - b for a, b in s])),
            resamples=args.resamples,
        )
        results[name]["minus PMI alone"] = paired.to_json()
        print(f"{name:22s} minus PMI alone {paired.format()}")
    seconds = [r["seconds"] for r in train + valid]
    results["counts"] = {
        "train pairs": len(train),
        "valid pairs": len(valid),
        "median seconds a pair": float(np.median(seconds)),
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
