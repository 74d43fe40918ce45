"""The contrast benchmark on the bundled models: the real reply against replies any judge must rank lower.

Applies ``benchmarks/rules/contrast.md`` (written before any read). Three steps, each rerunnable:

    # the context-fit gate refitted on ESConv train pairs (train data only)
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py fit-gate
    # score the selection sample with each model arm (resumes from OUT/<arm>.jsonl)
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py score --arms method,base
    # read the records: writes benchmarks/results/contrast.json
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py report
    # contexts 31 to 60 of the rule's order, a sample of their own (runs/contrast/esconv-valid-from31,
    # benchmarks/results/contrast_from_31.json)
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py score --offset 30 --arms pairwise2,pairwise3
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py report --offset 30
    # the selection sample shaped like the test read (ESConv test, role selection: one user message before a
    # reply of 8+ words; 60 contexts; benchmarks/results/contrast_esconv_test.json)
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py score --set esconv-test --arms pairwise3,pairwise5
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py report --set esconv-test
    # its next 60 contexts, a sample of their own, where a fourth stage was tried and not kept
    # (benchmarks/results/contrast_esconv_test_from_61.json)
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py score --set esconv-test --offset 60 \
        --arms pairwise5,pairwise6,base       # then `report` with the same options
    # its contexts 121 to 180, where the default with the whole-message copy guard and its context-fit arms
    # were decided (benchmarks/results/contrast_esconv_test_from_121.json)
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py score --set esconv-test --offset 120 \
        --arms method                         # then `report` with the same options
    # the fresh test read, once, for what ships (through the test-read ledger), and its report
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py score --set intents --arms shipped,base
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py score --set sage --arms shipped,base
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py report --set intents   # and --set sage
    # a later artifact's fresh read: the next 60 intents contexts, outside the dialogues the earlier reads
    # took (read 4: --skip-reads 1 --out runs/contrast/intents4; read 5: --skip-reads 2 --out
    # runs/contrast/intents5; read 6, the default as it ships:)
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py score --set intents --skip-reads 3 \
        --out runs/contrast/intents6 --arms shipped,base      # then `report` with the same options
    # read 7: the same models with the whole-message copy guard (a forced read, marked in the ledger)
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py score --set intents --skip-reads 4 \
        --out runs/contrast/intents7 --arms shipped,base --force-test-read   # then `report --skip-reads 4 ...`
    # SAGE for the default as it ships (read 4 of that set): --skip-reads 2 --out runs/contrast/sage4
    # SAGE for the second-stage default (read 3 of that set), outside read 2's rollouts
    CARE_DATA_DIR=../shared/data python benchmarks/bench_contrast.py score --set sage --skip-reads 1 \
        --out runs/contrast/sage3 --arms shipped             # then `report` with the same options

``fit-gate`` writes ``benchmarks/results/context_fit_gate.json``: per ESConv train dialogue, the
first supporter turn the rule's sample would take, ordered the same way, the first 150; each real
reply against the next one's (another conversation's reply), PMI read by the bundled base model
(window 6, against "Hi."), a logistic gate fitted on the two.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from care_lab.bench.contrast import ContrastItem, order_key, summarise
from care_lab.bench.contrast_cli import format_summary
from care_lab.bench.contrast_run import (
    FIT_FLOORS,
    MIN_REAL_WORDS,
    MODEL_ARMS,
    PAIRWISE_ADAPTERS,
    esconv_items,
    merge_records,
    read_records,
    score_arm,
)
from care_lab.data.locations import data_dir
from care_lab.data.results import write_results
from care_sdk.bundled.context_fit import ContextFit, Gate

RESULTS = Path("benchmarks/results")
RULE = "benchmarks/rules/contrast.md"
GATE_FILE = RESULTS / "context_fit_gate.json"
SELECTION = "esconv/valid.jsonl"
MIN_INTENT_WORDS = 8
"""The test read's smallest real reply (words), which the sample shaped like it takes too."""
SELECTION_SETS = {
    "esconv-valid": (SELECTION, {"min_users": 2, "min_words": MIN_REAL_WORDS}, 30),
    "esconv-test": ("esconv/test.jsonl", {"min_users": 1, "min_words": MIN_INTENT_WORDS}, 60),
}
"""The selection samples: their file, their turns' shape (:func:`esconv_items`) and how many contexts a run
scores by default. ``esconv-test`` (role ``selection``) is shaped like the test read: one user message before a
reply of at least 8 words."""
GATE_PAIRS = 150
VALID_GATE = Gate(slope=0.1599, intercept=-2.1270)
"""The gate shipped before this benchmark, fitted on 150 ESConv valid pairs (selection data): reported beside."""


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
        baselines={"valid_gate": {"slope": VALID_GATE.slope, "intercept": VALID_GATE.intercept}},
        extra={"window": 6, "neutral": "Hi.", "seconds": round(seconds, 1)},
    )
    print(json.dumps({"slope": gate.slope, "intercept": gate.intercept}))


# -- the fresh test read (benchmarks/rules/contrast.md, "The samples") -------------------------------------

LEDGER_NAMES = {"intents": "empatheticdialogues_intents", "sage": "sage_rlver/test_turns"}
TEST_LIMITS = {"intents": 60, "sage": 30}
_CJK = re.compile(r"[\u3000-\u30ff\u3400-\u9fff\uff00-\uffef]")


def model_files() -> list[Path]:
    """Every model file the shipped default loads: the base GGUF, both adapters and the context-fit gate."""
    from care_sdk.backends.llamacpp import default_model_path
    from care_sdk.bundled.adapters import bundled_adapter
    from care_sdk.bundled.context_fit import GATE_FILE

    root = Path(bundled_adapter("generator") or "").parent
    return [default_model_path(), root / "generator.gguf", root / "evaluator.gguf", root / GATE_FILE]


def _context(messages: Sequence[Any]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


def after_reads(groups: dict[str, list[Any]], skip: int, limit: int) -> dict[str, list[Any]]:
    """Each group's turns (in the rule's order) left after ``skip`` earlier reads, each of which took the first
    ``limit`` turns left of every group; the dialogues those turns belong to are left out too.

    Examples:
        >>> from types import SimpleNamespace as T
        >>> turns = [T(dialogue_id=d) for d in "aabc"]
        >>> [t.dialogue_id for t in after_reads({"": turns}, 1, 1)[""]]
        ['b', 'c']
    """
    for _ in range(skip):
        taken = {t.dialogue_id for turns in groups.values() for t in turns[:limit]}
        groups = {g: [t for t in turns if t.dialogue_id not in taken] for g, turns in groups.items()}
    return groups


def intent_test_items(root: Path, read: Any, skip: int = 0) -> list[ContrastItem]:
    """Listener turns of dialogues outside the 150 that bench_addons read, a speaker message before them, a
    reply of at least 8 words; ordered by the contrast salt, the first 60. ``skip``: how many earlier contrast
    reads drew from this order; each took the first 60 of what was left, and the dialogues they took are left
    out too (the rule's second pairwise addendum reads the next 60)."""
    from _addons_samples import intent_sample

    from care_lab.data.intents import load_intent_turns

    read_before = {t.dialogue_id for t in intent_sample(root, read)}
    turns = [
        t
        for t in load_intent_turns(root / "empatheticdialogues_intents", test_read=read).records
        if t.dialogue_id not in read_before
        and any(m.role == "user" for m in t.context)
        and len(t.reply.split()) >= MIN_INTENT_WORDS
    ]
    ordered = after_reads({"": sorted(turns, key=lambda t: order_key(t.id))}, skip, TEST_LIMITS["intents"])[""]
    chosen = ordered[: TEST_LIMITS["intents"]]
    return [ContrastItem(t.id, _context(t.context), t.reply) for t in chosen]


def sage_test_items(root: Path, read: Any, skip: int = 0) -> list[ContrastItem]:
    """SAGE test turns outside the 60 that bench_addons sampled; per system the first 30 by the contrast salt,
    the systems in turn. English contexts first, as the rule says; the rollouts hold none (every context
    is Chinese), so the sample is the Chinese contexts, which the rule reports apart and never chooses on.
    ``skip``: how many earlier contrast reads drew from this order; each took the first 30 of each system's
    turns that were left, and the rollouts (a system's conversation with one profile) they took are left
    out too."""
    from _addons_samples import sage_sample_keys

    from care_lab.data.sage_turns import sage_rollout_files, sage_test_turns

    sampled = set(sage_sample_keys(root))
    turns = [t for t in sage_test_turns(sage_rollout_files(root), test_read=read) if t.key not in sampled and t.context]
    english = [t for t in turns if not any(_CJK.search(m.content) for m in t.context)]
    by_model: dict[str, list[Any]] = {}
    for turn in english or turns:
        by_model.setdefault(turn.model, []).append(turn)
    ordered = {m: sorted(by_model[m], key=lambda t: order_key(t.key)) for m in sorted(by_model)}
    samples = [turns[: TEST_LIMITS["sage"]] for turns in after_reads(ordered, skip, TEST_LIMITS["sage"]).values()]
    chosen = [t for group in zip(*samples, strict=True) for t in group]
    return [ContrastItem(t.key, _context(t.context), t.reply, group=t.model) for t in chosen]


def test_read_items(which: str, root: Path, out: Path, *, force: bool, skip: int = 0) -> tuple[Any, list[ContrastItem]]:
    """Record the read in the ledger (once: a resumed run is the same read), draw the sample, name its items."""
    import json

    from care_lab.data.results import ledger_entry, record_test_read, set_items

    read_file = out / "read.json"
    if read_file.is_file():
        read = ledger_entry(LEDGER_NAMES[which], json.loads(read_file.read_text(encoding="utf-8"))["reads"])
    else:
        read = record_test_read(
            LEDGER_NAMES[which],
            artifact="bundled-default",
            command=" ".join(["python", *sys.argv]),
            rule=RULE,
            artifact_files=model_files(),
            force=force,
        )
        out.mkdir(parents=True, exist_ok=True)
        read_file.write_text(json.dumps({"data": read.data, "reads": read.reads}) + "\n", encoding="utf-8")
    items = intent_test_items(root, read, skip) if which == "intents" else sage_test_items(root, read, skip)
    if not read.items:
        read = set_items(read, [item.id for item in items])  # drawn from the data: named before any is scored
    return read, items


def _gates() -> dict[str, Gate]:
    import json

    gates = {"valid": VALID_GATE}
    if GATE_FILE.is_file():
        metrics = json.loads(GATE_FILE.read_text(encoding="utf-8"))["metrics"]
        gates["train"] = Gate(slope=metrics["slope"], intercept=metrics["intercept"])
    return gates


def report(which: str, items: list[ContrastItem], out: Path, read: Any, skip: int = 0, offset: int = 0) -> None:
    """Summarise the arms' records (within each SAGE system first, pooled second) into the results file
    (``contrast.json`` for the selection sample, ``contrast_from_<first>.json`` for one that starts further
    on, ``contrast_esconv_test.json`` for the sample shaped like the test read; ``contrast_test_<set>.json``
    for a test read; ``contrast_test_<set>_<read number>.json`` for one that skipped earlier reads' samples)."""
    from care_lab.data.results import attach_records

    arms = {arm: read_records(out / f"{arm}.jsonl") for arm in MODEL_ARMS}
    gates = _gates() if any("pmi" in r for rows in arms.values() for r in rows.values()) else {}
    # the contexts every model arm scored (a read cut short is reported with its n); the replies are
    # drawn from the whole sample, so another conversation's reply is the one that was scored
    scored = [set(r) for r in arms.values() if r]
    records = [r for r in merge_records(items, arms, gates) if all(r["id"] in ids for ids in scored)]
    names = ["length", "feeling_words", *[a for a in MODEL_ARMS if arms[a]]]
    names += [f"{fit}_{g}" for g in gates if arms["method"] for fit in FIT_FLOORS]
    names += [f"{a}_{fit}" for a in PAIRWISE_ADAPTERS if arms[a] and gates for fit in FIT_FLOORS]
    if arms["shipped"]:
        names.append("method")  # read from the shipped default's own evaluations
    summary = summarise(records, names)
    groups = sorted({r["group"] for r in records if r["group"]})
    within = {g: summarise([r for r in records if r["group"] == g], names) for g in groups}
    seconds = {a: sum(r.get("seconds", 0.0) for r in arms[a].values()) for a in MODEL_ARMS if arms[a]}
    baseline_names = ("length", "feeling_words", "base")
    test = read is not None
    if test:
        attach_records(read, records, regenerate=f"git checkout {read.commit} && python {' '.join(sys.argv)}")
    write_results(
        RESULTS
        / (
            f"contrast{'_esconv_test' if which == 'esconv-test' else ''}{f'_from_{offset + 1}' if offset else ''}.json"
            if not test
            else f"contrast_test_{which}{f'_{read.reads}' if skip else ''}.json"
        ),
        " ".join(["python", *sys.argv]),
        data=SELECTION_SETS[which][0] if not test else LEDGER_NAMES[which],
        role="selection" if not test else "test",
        test_reads=0 if not test else read.reads,
        metrics={
            "within": {g: {k: v for k, v in w.items() if k not in baseline_names} for g, w in within.items()},
            **{k: v for k, v in summary.items() if k not in baseline_names},
        },
        baselines={
            "within": {g: {k: v for k, v in w.items() if k in baseline_names} for g, w in within.items()},
            **{k: v for k, v in summary.items() if k in baseline_names},
        },
        extra={
            "contexts": len(records),
            **({"first_context": offset + 1} if offset else {}),
            "sample": len(items),
            "rule": RULE,
            "gates": {name: {"slope": g.slope, "intercept": g.intercept} for name, g in gates.items()},
            "seconds_per_context": {a: round(s / max(1, len(arms[a])), 2) for a, s in seconds.items()},
        },
    )
    for group, table in within.items():
        print(f"-- {group}\n{format_summary(table)}")
    print(("-- all\n" if within else "") + format_summary(summary))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("fit-gate", "score", "report"))
    parser.add_argument("--set", dest="which", choices=(*SELECTION_SETS, *LEDGER_NAMES), default="esconv-valid")
    parser.add_argument("--arms", default="method,base")
    parser.add_argument(
        "--limit", type=int, help="a selection set: N contexts of the rule's order (30; esconv-test 60)"
    )
    parser.add_argument(
        "--offset", type=int, default=0, help="a selection set: after the first OFFSET (a sample of its own)"
    )
    parser.add_argument("--out", help="the records' folder (default: runs/contrast/<set>)")
    parser.add_argument("--force-test-read", action="store_true", help="read a test set again (the ledger marks it)")
    parser.add_argument(
        "--skip-reads",
        type=int,
        default=0,
        help="leave out the samples of this many earlier contrast reads of the set (intents 1: the next 60, "
        "outside read 3's; sage 1: the next 30 of each system, outside read 2's rollouts)",
    )
    args = parser.parse_args()
    root = data_dir(None)
    if args.step == "fit-gate":
        fit_gate(root)
        return 0
    out = Path(args.out or f"runs/contrast/{args.which}{f'-from{args.offset + 1}' if args.offset else ''}")
    read = None
    if args.which in SELECTION_SETS:
        path, shape, limit = SELECTION_SETS[args.which]
        items = esconv_items(root / path, args.offset + (args.limit or limit), **shape)[args.offset :]
    else:
        read, items = test_read_items(args.which, root, out, force=args.force_test_read, skip=args.skip_reads)
    if args.step == "score":
        for arm in args.arms.split(","):
            score_arm(arm, items, out, progress=lambda line: print(line, file=sys.stderr, flush=True))
        return 0
    report(args.which, items, out, read, args.skip_reads, args.offset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
