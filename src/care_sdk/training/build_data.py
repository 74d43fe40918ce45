"""``care train build-data``: SFT rubric targets and preference pairs from strategy-labelled dialogues.

Pipeline:

1. Load ESConv (its own train/valid/test splits) and, optionally, Lend-an-Ear (50 tactic-tagged
   conversations, split by a seeded hash of the conversation id).
2. SFT targets: for every supporter turn with mapped strategies, a **teacher** backend writes a
   rubric conditioned on the context, the reference reply, its strategies and their dimensions.
   Its weights must satisfy the r_align constraints against the turn's strategy counts (retried,
   then rejected or repaired, as configured); then **two judges** rate the target and only
   targets both accept are kept.
3. Preference pairs ``(context, chosen, rejected, chosen_strategy_counts)``: from Lend-an-Ear's
   judged system replies to the same turn (judge-score margin), and from ESConv (the reference
   reply vs. a supporter reply of another dialogue). An **annotator** backend labels the chosen
   reply's strategies where the data has none.
4. Every input (context) lands in one split only; outputs are JSONL files that
   ``datasets.load_dataset("json", ...)`` reads, plus ``report.json`` with every count.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from care_sdk.backends import Backend, GenerationRequest, resolve_backend
from care_sdk.data import (
    JudgedResponse,
    StrategyMap,
    SupportDialogue,
    SupportTurn,
    data_dir,
    default_strategy_map,
    load_esconv,
    load_judged_turns,
    load_lend_an_ear,
)
from care_sdk.prompts import fixed_criteria, parse_rubric, rubric_reply_json, rubric_schema
from care_sdk.training.config import BuildDataConfig
from care_sdk.training.prompts import (
    DATA_PROMPT_VERSION,
    annotator_messages,
    annotator_schema,
    judge_messages,
    judge_schema,
    parse_annotation,
    parse_verdict,
    teacher_messages,
)
from care_sdk.training.rewards import align_violations
from care_sdk.types import DIMENSIONS, Dimension, Message, Rubric

__all__ = ["SPLITS", "BuildReport", "build_data", "count_weights", "input_key", "split_of"]

SPLITS = ("train", "valid", "test")
"""Output splits, in order."""

V = TypeVar("V")
BATCH = 16


def count_weights(counts: Mapping[Dimension, int], smoothing: float = 0.5) -> dict[Dimension, float]:
    """Weights proportional to ``n_d + smoothing``: always satisfy the r_align constraints.

    Examples:
        >>> w = count_weights({Dimension.COGNITIVE: 2, Dimension.AFFECTIVE: 1, Dimension.PROACTIVE: 0})
        >>> [round(w[d], 3) for d in DIMENSIONS]
        [0.556, 0.333, 0.111]
    """
    raw = {d: counts.get(d, 0) + smoothing for d in DIMENSIONS}
    total = sum(raw.values())
    return {d: v / total for d, v in raw.items()}


def split_of(dialogue_id: str, *, seed: int, valid_fraction: float, test_fraction: float) -> str:
    """A deterministic split for a dialogue, from a seeded hash of its id.

    Examples:
        >>> split_of("conv-1", seed=0, valid_fraction=0.1, test_fraction=0.1) in SPLITS
        True
    """
    digest = hashlib.sha256(f"{seed}:{dialogue_id}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < test_fraction:
        return "test"
    if u < test_fraction + valid_fraction:
        return "valid"
    return "train"


def input_key(context: Sequence[Message]) -> str:
    """A hash of a context (the generator's input), used to keep each input in one split.

    Examples:
        >>> input_key([Message(role="user", content="hi")]) == input_key([Message(role="user", content="hi")])
        True
    """
    payload = json.dumps([[m.role, m.content] for m in context], ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass
class BuildReport:
    """Counts of everything build-data kept, rejected and why.

    Examples:
        >>> r = BuildReport()
        >>> r.sft["kept"] += 2
        >>> "kept" in r.table()
        True
    """

    sft: Counter[str] = field(default_factory=Counter)
    """SFT target counts: candidates, rejections by reason, kept per split."""
    pairs: Counter[str] = field(default_factory=Counter)
    """Preference-pair counts: candidates, rejections by reason, kept per source and split."""
    load_issues: list[str] = field(default_factory=list)
    """Issues the loaders reported (file, position, field)."""
    judge_reasons: list[str] = field(default_factory=list)
    """A sample of the judges' rejection reasons."""
    files: dict[str, int] = field(default_factory=dict)
    """Each written file and its number of records."""

    def table(self) -> str:
        """The counts as a plain-text table."""
        lines = [f"{'stage':<6} {'count':<36} value", f"{'-' * 6} {'-' * 36} -----"]
        for name, counter in (("sft", self.sft), ("pairs", self.pairs)):
            for key in sorted(counter):
                lines.append(f"{name:<6} {key:<36} {counter[key]}")
        for path, n in self.files.items():
            lines.append(f"file   {path:<36} {n}")
        if self.load_issues:
            lines.append(f"load issues: {len(self.load_issues)} (first: {self.load_issues[0]})")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the report."""
        return {
            "sft": dict(self.sft),
            "pairs": dict(self.pairs),
            "load_issues": self.load_issues,
            "judge_reasons": self.judge_reasons[:50],
            "files": self.files,
            "prompt_version": DATA_PROMPT_VERSION,
        }


def _ask(
    backend: Backend,
    prompts: Sequence[list[Message]],
    schema: dict[str, Any],
    parse: Callable[[str], V],
    *,
    max_tokens: int,
    attempts: int,
    seed: int,
    accept: Callable[[int, V], bool] | None = None,
) -> list[tuple[V | None, str | None]]:
    """Ask every prompt, retrying replies that fail to parse (or that ``accept`` refuses).

    Returns ``(value, None)`` for an accepted value, ``(last_value, reason)`` otherwise.
    """
    out: list[tuple[V | None, str | None]] = [(None, "not asked")] * len(prompts)
    pending = list(range(len(prompts)))
    for attempt in range(attempts):
        if not pending:
            break
        retry = []
        for start in range(0, len(pending), BATCH):
            chunk = pending[start : start + BATCH]
            requests = [
                GenerationRequest(
                    messages=tuple(prompts[i]),
                    json_schema=schema,
                    max_tokens=max_tokens,
                    temperature=0.0 if attempt == 0 else 0.7,
                    seed=seed + attempt,
                )
                for i in chunk
            ]
            for i, result in zip(chunk, backend.generate(requests), strict=True):
                if result.error is not None:
                    out[i] = (out[i][0], f"backend error: {result.error}")
                    continue  # already retried by the backend's own layer
                try:
                    value = parse(result.completions[0].text)
                except ValueError as exc:
                    out[i] = (out[i][0], f"unparsable: {exc}")
                    retry.append(i)
                    continue
                if accept is not None and not accept(i, value):
                    out[i] = (value, "not accepted")
                    retry.append(i)
                else:
                    out[i] = (value, None)
        pending = retry
    return out


class _Backends:
    """Resolves backend specs once each, so roles sharing a spec share one model."""

    def __init__(self) -> None:
        self._by_spec: dict[str, Backend] = {}

    def get(self, spec: str) -> Backend:
        if spec not in self._by_spec:
            self._by_spec[spec] = resolve_backend(spec)
        return self._by_spec[spec]

    def close(self) -> None:
        for backend in self._by_spec.values():
            backend.close()


def _truncate(context: Sequence[Message], keep: int | None) -> list[Message]:
    return list(context if keep is None else context[-keep:])


def _weights_json(weights: Mapping[Dimension, float]) -> dict[str, float]:
    return {d.value: round(weights[d], 4) for d in DIMENSIONS}


def _counts_json(counts: Mapping[Dimension, int]) -> dict[str, int]:
    return {d.value: int(counts.get(d, 0)) for d in DIMENSIONS}


def _load(cfg: BuildDataConfig, mapping: StrategyMap, report: BuildReport) -> list[tuple[SupportDialogue, str]]:
    root = Path(cfg.data_dir) if cfg.data_dir else data_dir()
    out: list[tuple[SupportDialogue, str]] = []
    for split in cfg.esconv_splits:
        loaded = load_esconv(root / "esconv" / f"{split}.jsonl", strategy_map=mapping)
        report.load_issues += [str(i) for i in loaded.issues]
        dialogues = loaded.records[: cfg.max_dialogues] if cfg.max_dialogues else loaded.records
        target = split if split in SPLITS else "train"
        out += [(d, target) for d in dialogues]
    if cfg.use_mint:
        loaded_lae = load_lend_an_ear(root / "mint_lend_an_ear", strategy_map=mapping)
        report.load_issues += [str(i) for i in loaded_lae.issues]
        dialogues = loaded_lae.records[: cfg.max_dialogues] if cfg.max_dialogues else loaded_lae.records
        for d in dialogues:
            out.append(
                (d, split_of(d.id, seed=cfg.seed, valid_fraction=cfg.valid_fraction, test_fraction=cfg.test_fraction))
            )
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


def _targets(
    candidates: list[tuple[SupportTurn, str]],
    cfg: BuildDataConfig,
    mapping: StrategyMap,
    backends: _Backends,
    report: BuildReport,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    k = cfg.criteria_per_dimension
    rubrics: list[tuple[Rubric, str] | None] = []
    if cfg.teacher is None:
        criteria = fixed_criteria()
        for turn, _ in candidates:
            rubrics.append((Rubric(weights=count_weights(turn.counts), criteria=criteria), "counts"))
    else:
        teacher = backends.get(cfg.teacher)
        prompts = [
            teacher_messages(
                _truncate(turn.context, cfg.max_context_messages),
                turn.reply,
                turn.strategies or (),
                {s: mapping.dimension(s) if mapping.knows(s) else None for s in turn.strategies or ()},
                turn.counts,
                criteria_per_dimension=k,
            )
            for turn, _ in candidates
        ]
        log(f"build-data: teacher {teacher.identity} writes {len(prompts)} target rubrics")
        answers = _ask(
            teacher,
            prompts,
            rubric_schema(k),
            parse_rubric,
            max_tokens=cfg.teacher_max_tokens,
            attempts=cfg.teacher_attempts,
            seed=cfg.seed,
            accept=lambda i, rubric: not align_violations(rubric, candidates[i][0].counts),
        )
        for (turn, _), (rubric, problem) in zip(candidates, answers, strict=True):
            if problem is None and rubric is not None:
                rubrics.append((rubric, "teacher"))
            elif rubric is None:
                report.sft["rejected: teacher reply unusable"] += 1
                rubrics.append(None)
            elif cfg.on_misaligned == "repair":
                report.sft["repaired: misaligned weights"] += 1
                repaired: dict[Dimension | str, float] = {d: w for d, w in count_weights(turn.counts).items()}
                rubrics.append((rubric.with_weights(repaired), "repaired"))
            else:
                report.sft["rejected: misaligned weights"] += 1
                rubrics.append(None)
    keep = [i for i, r in enumerate(rubrics) if r is not None]
    if cfg.judges is not None and keep:
        verdicts: list[list[tuple[tuple[bool, str] | None, str | None]]] = []
        for j, spec in enumerate(cfg.judges):
            judge = backends.get(spec)
            log(f"build-data: judge {j + 1} ({judge.identity}) rates {len(keep)} targets")
            prompts = []
            for i in keep:
                turn = candidates[i][0]
                target = rubrics[i]
                assert target is not None
                prompts.append(
                    judge_messages(
                        _truncate(turn.context, cfg.max_context_messages), turn.reply, turn.counts, target[0]
                    )
                )
            verdicts.append(
                _ask(
                    judge,
                    prompts,
                    judge_schema(),
                    parse_verdict,
                    max_tokens=cfg.judge_max_tokens,
                    attempts=2,
                    seed=cfg.seed + 101 * (j + 1),
                )
            )
        survivors = []
        for pos, i in enumerate(keep):
            accepted = True
            for j, per_judge in enumerate(verdicts):
                verdict, problem = per_judge[pos]
                if verdict is None or problem is not None:
                    report.sft[f"judge {j + 1}: error"] += 1
                    accepted = False
                elif not verdict[0]:
                    report.sft[f"judge {j + 1}: rejected"] += 1
                    if len(report.judge_reasons) < 200:
                        report.judge_reasons.append(f"judge {j + 1}: {verdict[1]}")
                    accepted = False
            if accepted:
                survivors.append(i)
            else:
                report.sft["rejected: by the judges"] += 1
        keep = survivors
    records = []
    for i in keep:
        turn, split = candidates[i]
        entry = rubrics[i]
        assert entry is not None
        rubric, origin = entry
        records.append(
            {
                "id": f"{turn.dialogue_id}#{turn.index}",
                "source": turn.source,
                "dialogue_id": turn.dialogue_id,
                "turn_index": turn.index,
                "split": split,
                "context": turn.context_messages(),
                "reference_reply": turn.reply,
                "strategies": list(turn.strategies or ()),
                "strategy_counts": _counts_json(turn.counts),
                "target": rubric_reply_json(rubric),
                "weights": _weights_json(rubric.weights),
                "target_origin": origin,
            }
        )
    return records


def _pair(
    turn_id: str,
    source: str,
    dialogue_id: str,
    index: int,
    split: str,
    context: Sequence[Message],
    chosen: str,
    rejected: str,
    strategies: Sequence[str] | None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "id": turn_id,
        "source": source,
        "dialogue_id": dialogue_id,
        "turn_index": index,
        "split": split,
        "context": [m.model_dump() for m in context],
        "chosen": chosen,
        "rejected": rejected,
        "chosen_strategies": list(strategies) if strategies is not None else None,
        **extra,
    }


def _mint_pairs(
    dialogues: list[tuple[SupportDialogue, str]],
    judged: Sequence[JudgedResponse],
    cfg: BuildDataConfig,
    report: BuildReport,
) -> list[dict[str, Any]]:
    by_id = {d.id: (d, split) for d, split in dialogues if d.source == "lend-an-ear"}
    groups: dict[tuple[str, int], list[JudgedResponse]] = defaultdict(list)
    for response in judged:
        groups[(response.conversation_id, response.turn_index)].append(response)
    out = []
    for (cid, index), responses in sorted(groups.items()):
        if cid not in by_id:
            continue
        dialogue, split = by_id[cid]
        if index >= len(dialogue.messages) or dialogue.messages[index].role != "assistant":
            report.pairs["mint: turn index does not match the conversation"] += 1
            continue
        report.pairs["mint: turns"] += 1
        ranked = sorted(responses, key=lambda r: (-r.aggregated_empathy, r.system))
        made = 0
        for best, worst in zip(ranked, reversed(ranked), strict=True):
            if made >= cfg.max_pairs_per_turn or best.aggregated_empathy - worst.aggregated_empathy < cfg.pref_margin:
                break
            if best.response.strip() == worst.response.strip():
                continue
            gold = best.system == "gold"
            strategies = dialogue.strategies[index] if gold else None
            out.append(
                _pair(
                    f"{cid}#{index}#{made}",
                    "lend-an-ear",
                    cid,
                    index,
                    split,
                    dialogue.messages[:index],
                    best.response,
                    worst.response,
                    strategies,
                    chosen_system=best.system,
                    rejected_system=worst.system,
                    margin=round(best.aggregated_empathy - worst.aggregated_empathy, 4),
                )
            )
            made += 1
        report.pairs["mint: pairs"] += made
        if made == 0:
            report.pairs["mint: turns without a pair above the margin"] += 1
    return out


def _esconv_pairs(
    candidates: list[tuple[SupportTurn, str]],
    pool: dict[str, list[SupportTurn]],
    cfg: BuildDataConfig,
    report: BuildReport,
) -> list[dict[str, Any]]:
    """The reference reply vs. a supporter reply drawn (seeded) from another ESConv dialogue of the same split."""
    rng = random.Random(cfg.seed)
    by_split: dict[str, list[SupportTurn]] = defaultdict(list)
    for turn, split in candidates:
        if turn.source == "esconv":
            by_split[split].append(turn)
    out = []
    for split, turns in sorted(by_split.items()):
        replies = [t for t in pool[split] if t.source == "esconv"]
        for turn in turns:
            others = [t for t in rng.sample(replies, min(len(replies), 8)) if t.dialogue_id != turn.dialogue_id]
            if not others:
                report.pairs["esconv: no reply from another dialogue"] += 1
                continue
            out.append(
                _pair(
                    f"{turn.dialogue_id}#{turn.index}",
                    "esconv",
                    turn.dialogue_id,
                    turn.index,
                    split,
                    turn.context,
                    turn.reply,
                    others[0].reply,
                    turn.strategies,
                    chosen_system="reference",
                    rejected_system=f"other:{others[0].dialogue_id}#{others[0].index}",
                    margin=None,
                )
            )
    return out


def _annotate(
    pairs: list[dict[str, Any]],
    cfg: BuildDataConfig,
    mapping: StrategyMap,
    backends: _Backends,
    report: BuildReport,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    todo = [i for i, p in enumerate(pairs) if p["chosen_strategies"] is None]
    if todo and cfg.annotator is None:
        report.pairs["dropped: no strategy labels (no annotator)"] += len(todo)
    elif todo:
        assert cfg.annotator is not None
        annotator = backends.get(cfg.annotator)
        log(f"build-data: annotator {annotator.identity} labels {len(todo)} replies")
        prompts = [
            annotator_messages(
                _truncate([Message.model_validate(m) for m in pairs[i]["context"]], cfg.max_context_messages),
                pairs[i]["chosen"],
            )
            for i in todo
        ]
        answers = _ask(
            annotator, prompts, annotator_schema(), parse_annotation, max_tokens=64, attempts=2, seed=cfg.seed + 7
        )
        for i, (labels, problem) in zip(todo, answers, strict=True):
            if labels is None or problem is not None:
                report.pairs["dropped: annotation failed"] += 1
                continue
            pairs[i]["chosen_strategies"] = labels
            pairs[i]["strategy_origin"] = "annotator"
            report.pairs["annotated"] += 1
    out = []
    for pair in pairs:
        if pair["chosen_strategies"] is None:
            continue
        pair.setdefault("strategy_origin", "label")
        pair["chosen_strategy_counts"] = _counts_json(mapping.counts(pair["chosen_strategies"]))
        out.append(pair)
    return out


def _separate(records: list[dict[str, Any]], report_counter: Counter[str]) -> dict[str, list[dict[str, Any]]]:
    """Assign records to splits; drop from valid/test any input already in an earlier split."""
    by_split: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    seen: set[str] = set()
    for split in SPLITS:
        keys_here: set[str] = set()
        for record in records:
            if record["split"] != split:
                continue
            key = input_key([Message.model_validate(m) for m in record["context"]])
            if key in seen:
                report_counter[f"dropped: input also in an earlier split ({split})"] += 1
                continue
            keys_here.add(key)
            by_split[split].append(record)
        seen |= keys_here
    return by_split


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")


def build_data(config: BuildDataConfig, *, log: Callable[[str], None] = print) -> BuildReport:
    """Run the data-construction pipeline and write its files under ``config.output_dir``.

    Writes ``sft/{train,valid,test}.jsonl``, ``pairs/{train,valid,test}.jsonl`` and
    ``report.json``, and prints the counts table through ``log``.

    Examples:
        >>> import tempfile
        >>> cfg = BuildDataConfig(output_dir=tempfile.mkdtemp(), teacher=None, judges=None, annotator=None,
        ...                       esconv_splits=("test",), use_mint=False, max_dialogues=2)
        >>> import os, pathlib
        >>> if (pathlib.Path(os.environ.get("CARE_DATA_DIR", "../shared/data")) / "esconv").exists():
        ...     assert build_data(cfg, log=lambda s: None).files
    """
    if config.targets == "templates":
        from care_sdk.training.rubric_targets import build_template_sft

        return build_template_sft(config, log=log)
    mapping = StrategyMap.from_file(config.strategy_map) if config.strategy_map else default_strategy_map()
    report = BuildReport()
    out_dir = Path(config.output_dir)
    dialogues = _load(config, mapping, report)
    candidates, pool = _sft_candidates(dialogues, config, mapping, report)
    backends = _Backends()
    try:
        sft_records = _targets(candidates, config, mapping, backends, report, log)
        pairs: list[dict[str, Any]] = []
        if config.use_mint:
            root = Path(config.data_dir) if config.data_dir else data_dir()
            judged = load_judged_turns(
                root / "mint_lend_an_ear" / "judged_turns" / "judged_turn_responses_gold_and_qwen3-4b_systems.jsonl"
            )
            report.load_issues += [str(i) for i in judged.issues]
            pairs += _mint_pairs(dialogues, judged.records, config, report)
        if config.esconv_pairs:
            pairs += _esconv_pairs(candidates, pool, config, report)
        pairs = _annotate(pairs, config, mapping, backends, report, log)
    finally:
        backends.close()
    for name, records, counter in (("sft", sft_records, report.sft), ("pairs", pairs, report.pairs)):
        for split, rows in _separate(records, counter).items():
            _write(out_dir / name / f"{split}.jsonl", rows)
            report.files[f"{name}/{split}.jsonl"] = len(rows)
            counter[f"kept: {split}"] = len(rows)
            for source, n in Counter(r["source"] for r in rows).items():
                counter[f"kept: {split} ({source})"] = n
    (out_dir / "report.json").write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False), encoding="utf-8")
    log(report.table())
    return report
