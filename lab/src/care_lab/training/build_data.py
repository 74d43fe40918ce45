"""``care train build-data``: SFT rubric targets and preference pairs from strategy-labelled dialogues.

Pipeline:

1. Load ESConv (its own train/valid/test splits) and, optionally, Lend-an-Ear (50 tactic-tagged
   conversations, split once for every use by :func:`care_lab.data.splits.lend_an_ear_split`).
2. SFT targets (:mod:`care_lab.training.targets`): a **teacher** writes a good rubric for every
   selected supporter turn, given the context, the reference reply and its strategies; **target
   judges** keep the ones that are specific and consistent with the reference. Alignment with the
   strategy counts is measured and reported, and enforced only when ``on_misaligned`` says so.
3. Preference pairs (:mod:`care_lab.training.pairs`), every pair from one context: candidate
   replies from the ``candidates`` backends (and the reference reply) compared by three
   **judges** (majority vote, ties dropped), plus Lend-an-Ear's judged system replies. An
   **annotator** labels the chosen reply's strategies where the data has none.
4. Every input (context) lands in one split only; outputs are JSONL files that
   ``datasets.load_dataset("json", ...)`` reads, ``roles.json`` declares each file's data role
   (:mod:`care_lab.data.roles`: ``train`` for the train split, ``selection`` for ``valid`` and
   ``test``, which come from ESConv valid/test and the held-out Lend-an-Ear conversations), every
   record carries its ``split`` and ``role``, and ``report.json`` holds every count and the pairs'
   length balance.

Every input file goes through the role guard: the ``train`` outputs read only ``train`` data
(``fit``), the other outputs only ``train`` or ``selection`` data; ``test`` and ``eval-only``
data are never read.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from care_lab.data import (
    StrategyMap,
    SupportDialogue,
    SupportTurn,
    data_dir,
    default_strategy_map,
    load_esconv,
    load_judged_turns,
    load_lend_an_ear,
)
from care_lab.data.judged_pairs import HUMAN_SYSTEMS
from care_lab.data.roles import OUTPUT_ROLES, Role, require_role, write_roles
from care_lab.data.splits import lend_an_ear_role, lend_an_ear_split
from care_lab.training.build_report import BuildReport
from care_lab.training.config import BuildDataConfig
from care_lab.training.pairs import (
    annotate,
    candidate_pairs,
    length_balance,
    mint_pairs,
    offcontext_pairs,
)
from care_lab.training.targets import BuildContext, build_targets, count_weights
from care_sdk.backends import BackendPool
from care_sdk.types import Message, as_messages

__all__ = ["SPLITS", "BuildReport", "build_data", "count_weights", "input_key"]

SPLITS: tuple[str, ...] = ("train", "valid", "test")
"""Output splits, in order (each output file's data role: :data:`~care_lab.data.roles.OUTPUT_ROLES`)."""


def input_key(context: Sequence[Message]) -> str:
    """A hash of a context (the generator's input), used to keep each input in one split.

    Examples:
        >>> input_key([Message(role="user", content="hi")]) == input_key([Message(role="user", content="hi")])
        True
    """
    payload = json.dumps([[m.role, m.content] for m in context], ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _load(cfg: BuildDataConfig, mapping: StrategyMap, report: BuildReport) -> list[tuple[SupportDialogue, str]]:
    root = Path(cfg.data_dir) if cfg.data_dir else data_dir()
    out: list[tuple[SupportDialogue, str]] = []
    for split in cfg.esconv_splits:
        path = root / "esconv" / f"{split}.jsonl"
        target = split if split in SPLITS else "train"
        require_role(path, "fit" if target == "train" else "select", what=f"build-data's {target} split")
        loaded = load_esconv(path, strategy_map=mapping)
        report.load_issues += [str(i) for i in loaded.issues]
        dialogues = loaded.records[: cfg.max_dialogues] if cfg.max_dialogues else loaded.records
        out += [(d, target) for d in dialogues]
    if cfg.use_mint:
        loaded_lae = load_lend_an_ear(root / "mint_lend_an_ear", strategy_map=mapping)
        report.load_issues += [str(i) for i in loaded_lae.issues]
        dialogues = loaded_lae.records[: cfg.max_dialogues] if cfg.max_dialogues else loaded_lae.records
        records = [{"id": d.id, "role": lend_an_ear_role(d.id)} for d in dialogues]
        conversations = root / "mint_lend_an_ear" / "lend_an_ear_eval" / "lend_an_ear_50_conversations.csv"
        require_role(conversations, "select", records=records)
        for d in dialogues:
            out.append((d, lend_an_ear_split(d.id)))
    return out


def _sft_candidates(
    dialogues: Iterable[tuple[SupportDialogue, str]], cfg: BuildDataConfig, mapping: StrategyMap, report: BuildReport
) -> tuple[list[tuple[SupportTurn, str]], dict[str, list[SupportTurn]]]:
    """The turns to build targets for (``max_turns`` per split), and every usable supporter turn by split."""
    per_split: Counter[str] = Counter()
    pool: dict[str, list[SupportTurn]] = defaultdict(list)
    out = []
    for dialogue, split in dialogues:
        for turn in dialogue.supporter_turns(mapping):
            if not turn.labelled:
                continue
            report.sft["candidates"] += 1
            if cfg.skip_unmapped and not any(turn.counts.values()):
                report.sft["skipped: no mapped strategy"] += 1
                continue
            pool[split].append(turn)
            if cfg.max_turns is not None and per_split[split] >= cfg.max_turns:
                continue
            per_split[split] += 1
            out.append((turn, split))
    return out, pool


def _separate(records: list[dict[str, Any]], report_counter: Counter[str]) -> dict[str, list[dict[str, Any]]]:
    """Assign records to splits; drop from valid/test any input already in an earlier split."""
    by_split: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    seen: set[str] = set()
    for split in SPLITS:
        keys_here: set[str] = set()
        for record in records:
            if record["split"] != split:
                continue
            key = input_key(as_messages(record["context"]))
            if key in seen:
                report_counter[f"dropped: input also in an earlier split ({split})"] += 1
                continue
            keys_here.add(key)
            by_split[split].append({**record, "role": OUTPUT_ROLES[split]})
        seen |= keys_here
    return by_split


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")


def _human_counts(pairs: list[dict[str, Any]], counter: Counter[str]) -> None:
    for pair in pairs:
        origin = pair.get("origin", pair["source"])
        counter[f"kept: {pair['split']} ({origin})"] += 1
        if pair.get("chosen_system") in HUMAN_SYSTEMS:
            counter[f"human reply chosen ({origin})"] += 1
        if pair.get("rejected_system") in HUMAN_SYSTEMS:
            counter[f"human reply rejected ({origin})"] += 1


def build_data(
    config: BuildDataConfig, *, pool: BackendPool | None = None, log: Callable[[str], None] = print
) -> BuildReport:
    """Run the data-construction pipeline and write its files under ``config.output_dir``.

    Writes ``sft/{train,valid,test}.jsonl``, ``pairs/{train,valid,test}.jsonl``, ``roles.json``
    (each file's data role: ``train``, or ``selection`` for valid and test) and ``report.json``,
    and prints the counts table through ``log``.

    Args:
        config: the stage's settings.
        pool: backends to use by spec (e.g. scripted backends in tests); built from the specs when omitted.
        log: where progress lines go.

    Examples:
        >>> import tempfile
        >>> cfg = BuildDataConfig(output_dir=tempfile.mkdtemp(), teacher=None, target_judges=None, judges=None,
        ...                       annotator=None, esconv_splits=("test",), use_mint=False, max_dialogues=2)
        >>> import os, pathlib
        >>> if (pathlib.Path(os.environ.get("CARE_DATA_DIR", "no-data-dir")) / "esconv").exists():
        ...     assert build_data(cfg, log=lambda s: None).files["roles.json"] == 6
    """
    if config.targets == "templates":
        from care_lab.training.rubric_targets import build_template_sft

        return build_template_sft(config, log=log)
    if config.targets == "evaluator":
        from care_lab.training.evaluator_targets import build_evaluator_sft

        return build_evaluator_sft(config, log=log)
    mapping = StrategyMap.from_file(config.strategy_map) if config.strategy_map else default_strategy_map()
    report = BuildReport()
    out_dir = Path(config.output_dir)
    dialogues = _load(config, mapping, report)
    candidates, turn_pool = _sft_candidates(dialogues, config, mapping, report)
    backends = pool if pool is not None else BackendPool()
    try:
        ctx = BuildContext(config, mapping, backends, report, log)
        sft_records = build_targets(candidates, ctx)
        per_split: Counter[str] = Counter()
        contexts = []
        for turn, split in candidates:
            per_split[split] += 1
            if config.pair_contexts is None or per_split[split] <= config.pair_contexts:
                contexts.append((turn, split))
        pairs = candidate_pairs(contexts, ctx)
        if config.use_mint:
            root = Path(config.data_dir) if config.data_dir else data_dir()
            judged = load_judged_turns(
                root / "mint_lend_an_ear" / "judged_turns" / "judged_turn_responses_gold_and_qwen3-4b_systems.jsonl"
            )
            report.load_issues += [str(i) for i in judged.issues]
            pairs += mint_pairs(dialogues, judged.records, ctx)
        if config.offcontext_pairs:
            pairs += offcontext_pairs(candidates, turn_pool, ctx)
        pairs = annotate(pairs, ctx)
    finally:
        if pool is None:
            backends.close()
    roles: dict[str, Role] = {}
    written: list[dict[str, Any]] = []
    for name, records, counter in (("sft", sft_records, report.sft), ("pairs", pairs, report.pairs)):
        for split, rows in _separate(records, counter).items():
            _write(out_dir / name / f"{split}.jsonl", rows)
            roles[f"{name}/{split}.jsonl"] = OUTPUT_ROLES[split]
            report.files[f"{name}/{split}.jsonl"] = len(rows)
            counter[f"kept: {split}"] = len(rows)
            if name == "pairs":
                written += rows
                _human_counts(rows, counter)
            else:
                for source, n in Counter(r["source"] for r in rows).items():
                    counter[f"kept: {split} ({source})"] = n
    report.lengths = length_balance(written)
    write_roles(out_dir, roles)
    report.files["roles.json"] = len(roles)
    (out_dir / "report.json").write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False), encoding="utf-8")
    log(report.table())
    return report
