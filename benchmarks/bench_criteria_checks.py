"""Criteria a person can read: the bundled generator's criteria with the checks off and on, same run.

Contexts: every assistant turn of ``examples/dialogues.jsonl`` that follows a user message, and
``--limit`` distinct contexts of ESConv ``valid`` (role ``selection``): the first such supporter
turn of each dialogue, in file order. Both generators share one bundled model (llama.cpp, ``--threads`` threads, no
cache): ``check_criteria=False`` (the criteria as decoded) and the default ``check_criteria=True``
(a defective criterion taken from a retry of the rubric, else replaced by the fixed one). For each
it counts the defective criteria by kind (:func:`care_sdk.rubric_checks.criteria_defects`), the
rubrics that needed a retry and a fixed replacement, the rubric requests sent, and rubrics per
second. It also counts the detector's false positives where there must be none: the fixed
criteria and the template criteria of every training target built from ESConv ``train``
(:class:`care_lab.training.rubric_targets.TemplateTargets`, as ``training/configs/generator_data.yaml``
builds them).

Usage:
    python benchmarks/bench_criteria_checks.py [--data-dir ../shared/data] [--limit 40] [--threads 1]

Prints a markdown table and writes ``benchmarks/results/criteria_checks.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from care_lab.data import data_dir, default_strategy_map, load_esconv
from care_lab.data.results import write_results
from care_lab.data.roles import require_role
from care_lab.training.config import BuildDataConfig, load_config
from care_lab.training.rubric_targets import TemplateTargets
from care_sdk import Rubric, RubricGenerator
from care_sdk.backends import resolve_backend
from care_sdk.rubric_checks import CRITERION_DEFECTS, criteria_defects
from care_sdk.testing import RecordingBackend
from care_sdk.types import fixed_criteria

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path(__file__).parent / "results" / "criteria_checks.json"
EXAMPLES = ROOT / "examples" / "dialogues.jsonl"


def example_contexts(path: Path) -> list[list[dict[str, str]]]:
    """Every assistant turn's context in a dialogue file, once a user has spoken."""
    contexts = []
    for line in path.read_text(encoding="utf-8").splitlines():
        messages = json.loads(line)["messages"]
        contexts += [
            messages[:i]
            for i, m in enumerate(messages)
            if m["role"] == "assistant" and any(x["role"] == "user" for x in messages[:i])
        ]
    return contexts


def selection_contexts(path: Path, limit: int) -> list[list[dict[str, str]]]:
    """The first supporter turn after a user message of each dialogue, in file order, until ``limit``
    distinct contexts (many dialogues open with the same greeting, which would be one rubric)."""
    require_role(path, "select", what="the contexts of the criteria checks")
    contexts: dict[str, list[dict[str, str]]] = {}
    for dialogue in load_esconv(path).records:
        for turn in dialogue.supporter_turns():
            context = turn.context_messages()
            if any(m["role"] == "user" for m in context):
                contexts.setdefault(json.dumps(context, sort_keys=True), context)
                break
        if len(contexts) == limit:
            break
    return list(contexts.values())


def template_false_positives(root: Path) -> dict[str, Any]:
    """The detector on the fixed criteria and on the criteria of every template training target."""
    path = root / "esconv" / "train.jsonl"
    require_role(path, "select", what="the template targets the detector is checked on")
    config = load_config(BuildDataConfig, ROOT / "training" / "configs" / "generator_data.yaml")
    mapping = default_strategy_map()
    train = load_esconv(path, strategy_map=mapping).records
    targets = TemplateTargets(
        train,
        mapping,
        config.criteria_per_dimension,
        max_context_messages=config.max_context_messages,
        position_prior_weight=config.position_prior_weight,
    )
    rubrics = [
        [c.text for c in targets.rubric(turn, dialogue).criteria]
        for dialogue in train
        for turn in dialogue.supporter_turns(mapping)
        if turn.labelled and turn.context
    ]
    started = time.perf_counter()
    flagged = sum(d is not None for texts in rubrics for d in criteria_defects(texts))
    seconds = time.perf_counter() - started
    fixed = [c.text for c in fixed_criteria()]
    return {
        "template_targets": {
            "rubrics": len(rubrics),
            "criteria": sum(len(t) for t in rubrics),
            "flagged": flagged,
            "check_microseconds_per_rubric": round(1e6 * seconds / len(rubrics), 1),
        },
        "fixed_criteria": {"criteria": len(fixed), "flagged": sum(d is not None for d in criteria_defects(fixed))},
    }


def measure(generator: RubricGenerator, recorder: RecordingBackend, sets: dict[str, list[Any]]) -> dict[str, Any]:
    """One generator over every set: defects by kind, retries, replacements, requests, time."""
    out: dict[str, Any] = {}
    for name, contexts in sets.items():
        before = recorder.count()
        started = time.perf_counter()
        rubrics = generator.generate_batch(contexts)
        seconds = time.perf_counter() - started
        defects: Counter[str] = Counter()
        for rubric in rubrics:
            if isinstance(rubric, Rubric):
                defects.update(d for d in criteria_defects([c.text for c in rubric.criteria]) if d is not None)
        ok = [r for r in rubrics if isinstance(r, Rubric)]
        out[name] = {
            "rubrics": len(rubrics),
            "failed": len(rubrics) - len(ok),
            "criteria": sum(len(r.criteria) for r in ok),
            "defective_criteria": {kind: defects.get(kind, 0) for kind in CRITERION_DEFECTS},
            "rubrics_with_defects": sum(any(criteria_defects([c.text for c in r.criteria])) for r in ok),
            "rubrics_retried": sum(bool(r.repairs) for r in ok) if generator.criteria_retries else 0,
            "rubrics_with_fixed_criteria": sum(any(x.source != "retry" for x in r.repairs) for r in ok),
            "criteria_repaired": {
                source: sum(x.source == source for r in ok for x in r.repairs)
                for source in ("retry", "fixed", "dropped")
            },
            "requests": recorder.count() - before,
            "seconds": round(seconds, 2),
            "rubrics_per_second": round(len(rubrics) / seconds, 4),
            "repairs": [x.model_dump(mode="json") for r in ok for x in r.repairs],
        }
    return out


def table(report: dict[str, Any]) -> str:
    """Checks off against on, one row per set."""
    lines = [
        "| set | checks | rubrics | defective criteria (by kind) | retried | fixed used | requests | rubrics/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for variant in ("off", "on"):
        for name, row in report[variant].items():
            kinds = ", ".join(f"{k} {v}" for k, v in row["defective_criteria"].items() if v) or "0"
            lines.append(
                f"| {name} | {variant} | {row['rubrics']} | {kinds} | {row['rubrics_retried']} | "
                f"{row['rubrics_with_fixed_criteria']} | {row['requests']} | {row['rubrics_per_second']:.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="the data directory (default: $CARE_DATA_DIR)")
    parser.add_argument("--limit", type=int, default=40, help="ESConv valid dialogues (one context each)")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="the JSON results file (default: %(default)s)")
    args = parser.parse_args(argv)
    root = data_dir(args.data_dir)
    valid = root / "esconv" / "valid.jsonl"
    sets = {"examples": example_contexts(EXAMPLES), "selection": selection_contexts(valid, args.limit)}
    false_positives = template_false_positives(root)
    recorder = RecordingBackend(
        resolve_backend("default", role="generator", n_threads=args.threads, n_threads_batch=args.threads)
    )
    report = {
        "off": measure(RubricGenerator(recorder, cache=False, check_criteria=False), recorder, sets),
        "on": measure(RubricGenerator(recorder, cache=False), recorder, sets),
    }
    ratio = {
        name: round(report["on"][name]["rubrics_per_second"] / report["off"][name]["rubrics_per_second"], 3)
        for name in sets
    }
    command = f"python benchmarks/bench_criteria_checks.py --limit {args.limit} --threads {args.threads}"
    out = write_results(
        args.out,
        command,
        data=["examples/dialogues.jsonl", "esconv/valid.jsonl"],
        role="selection",
        test_reads=0,
        metrics={"checks_on": report["on"], "speed_on_over_off": ratio, "false_positives": false_positives},
        baselines={"checks_off": report["off"]},
        extra={
            "contexts": {name: len(c) for name, c in sets.items()},
            "generator": RubricGenerator(recorder).identity,
            "false_positive_data": "esconv/train.jsonl (template targets) and the fixed criteria",
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )
    print(table(report))
    print(f"\nrubrics per second, checks on / off: {ratio}")
    print(f"false positives: {json.dumps(false_positives)}")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
