"""The pairwise recipe of the bundled evaluator: the real reply's expected scores above worse replies' ones.

The recipe ``benchmarks/rules/contrast.md`` names (its addendum on a second pairwise route). On ESConv
``train`` turns (read through :mod:`care_lab.data`) under the template rubric the evaluator's SFT data
uses, each step takes one group: the real reply and four worse replies (:func:`negatives`): another
train dialogue's supporter reply of another emotion type, and three kinds drawn from eight: the real
reply cut to its first third of words, its words shuffled, and one text of each of six kinds written
for training only (:data:`WRITTEN`: dismissive, platitude, short, off-topic, harm-validating, another
language), never the contrast benchmark's texts. Later stages (:data:`STAGES`) add another dialogue's
reply of the same emotion type and, the third, a written bare question to every group. Every reply is
followed by the real reply's target score JSON (the SFT data's ``reference`` target), so the digits
before a criterion are the same for every reply and only the reply can move its score (each reply
followed by its own target lets later criteria copy the earlier digits). The loss is the SFT loss (the
token cross-entropy of the real reply's target) plus a hinge on the expected scores: for every criterion
and every worse reply, ``max(0, margin - (E_real - E_worse))``, where ``E`` is the expectation of the
scores ``1``-``5`` at the criterion's position, renormalised over the five tokens (what
``RubricEvaluator`` reads on an adapter whose training summary says ``"scores": "expected"``, as this
one's does). The prompt is shared by the group's replies up to the reply, so it is run once and its
cache repeated for the suffixes.

A new LoRA on every linear layer of every decoder layer is trained on top of the evaluator's SFT
adapter (``bundled:evaluator``, merged), and exported with it as one GGUF adapter: the bundled
evaluator (``make evaluator-adapter`` runs both recipes).

    CARE_DATA_DIR=../shared/data OMP_NUM_THREADS=2 \\
        python -m care_lab.training.evaluator_pairwise --out runs/evaluator_pairwise --steps 500 --threads 2

Examples:
    >>> import random
    >>> worse = negatives("I hear you, that sounds so hard to carry alone.", "Try a walk.", random.Random(0))
    >>> len(worse), worse[0].kind, worse[0].text
    (4, 'offcontext', 'Try a walk.')
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from care_sdk.backends.forced import common_prefix

__all__ = [
    "DRAWN_WRITTEN",
    "STAGES",
    "Group",
    "Negative",
    "Stage",
    "build_groups",
    "export",
    "negatives",
    "train",
    "write_curve",
    "written_replies",
]

MARGIN = 1.0
"""The hinge's margin, in score points."""
MIN_WORDS = 6
"""The smallest real reply a group is made from (its cut and shuffle must differ from it)."""
_SLOT = re.compile(r'"c\d+": (\d)')


@dataclass(frozen=True)
class Negative:
    """A worse reply and its kind (``offcontext``, ``cut``, ``shuffled``, or a kind of :func:`written_replies`)."""

    kind: str
    text: str


@dataclass(frozen=True)
class Group:
    """One step's data: a context, its rubric, the real reply and the worse ones, the real reply's target JSON."""

    context: list[dict[str, Any]]
    rubric: dict[str, Any]
    replies: tuple[str, ...]
    """The real reply first."""
    target: str
    """The real reply's target score JSON (every reply is followed by it)."""
    kinds: tuple[str, ...]


WRITTEN = Path(__file__).with_name("worse_replies.json")
"""The written training negatives, by kind (never the contrast benchmark's texts)."""
DRAWN = 3
"""Worse replies drawn per group beside another dialogue's reply."""
DRAWN_WRITTEN = ("dismissive", "harm_validating", "off_topic", "other_language", "platitude", "short")
"""The written kinds the drawn ones come from (``bare_question`` is only ever a stage's :attr:`Stage.always`)."""


def written_replies(path: Path = WRITTEN) -> dict[str, list[str]]:
    """The written training negatives by kind (``dismissive``, ``platitude``, ``short``, ``off_topic``,
    ``harm_validating``, ``other_language``, ``bare_question``).

    Examples:
        >>> sorted(written_replies())[:3]
        ['bare_question', 'dismissive', 'harm_validating']
    """
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {kind: list(texts) for kind, texts in raw.items() if not kind.startswith("_")}


def negatives(
    real: str,
    other: str,
    rng: random.Random,
    written: dict[str, list[str]] | None = None,
    *,
    same_emotion: str | None = None,
    drawn: int = DRAWN,
    always: Sequence[str] = (),
) -> list[Negative]:
    """The worse replies of one group: ``other`` (another dialogue's reply, of another emotion type) first,
    ``same_emotion`` (another dialogue's reply of the same emotion type, kind ``offcontext_same``) next when
    given, then ``drawn`` kinds drawn without replacement from the real reply's first third of words (at least
    two), its words shuffled until their order differs, and one text of each kind of :data:`DRAWN_WRITTEN`
    in ``written`` (:func:`written_replies` by default), then one text of each written kind of ``always``."""
    written = written_replies() if written is None else written
    words = real.split()
    shuffled = list(words)
    while shuffled == words:
        rng.shuffle(shuffled)
    pool = {"cut": " ".join(words[: max(2, len(words) // 3)]), "shuffled": " ".join(shuffled)}
    kinds = rng.sample([*pool, *sorted(k for k in written if k in DRAWN_WRITTEN)], drawn)
    chosen = [Negative(k, pool[k] if k in pool else rng.choice(written[k])) for k in kinds]
    chosen += [Negative(k, rng.choice(written[k])) for k in always]
    same = [Negative("offcontext_same", same_emotion)] if same_emotion is not None else []
    return [Negative("offcontext", other), *same, *chosen]


@dataclass(frozen=True)
class Stage:
    """What one run of the recipe draws and how long it runs: the groups' order, the worse replies of each
    group, its steps and minutes (every stage starts from the shipped evaluator adapter, merged).

    The recipe has three stages (:data:`STAGES`): the first trained on the SFT adapter, the second on the
    first's, with another conversation's reply of the same emotion type too, the third on the second's, with a
    written bare question in every group and one drawn kind.

    Examples:
        >>> STAGES[1].name, STAGES[1].same_emotion, STAGES[1].drawn
        ('evaluator-pairwise-v3', True, 2)
        >>> STAGES[2].always, STAGES[2].drawn
        (('bare_question',), 1)
    """

    name: str
    seed: int
    same_emotion: bool
    """Also another dialogue's reply of the same emotion type in every group."""
    drawn: int
    """Kinds drawn from the eight beside the other dialogues' replies."""
    steps: int
    minutes: float
    always: tuple[str, ...] = ()
    """Written kinds every group also holds, one text each (after the drawn ones)."""


STAGES = (
    Stage("evaluator-pairwise-v2", seed=0, same_emotion=False, drawn=DRAWN, steps=500, minutes=55.0),
    Stage("evaluator-pairwise-v3", seed=1, same_emotion=True, drawn=2, steps=450, minutes=50.0),
    Stage(
        "evaluator-pairwise-v5", seed=3, same_emotion=True, drawn=1, steps=400, minutes=42.0, always=("bare_question",)
    ),
)
"""The recipe's stages, in the order ``make evaluator-adapter`` runs them (``--stage 1``, ``2``, ``3``)."""


def build_groups(root: Path | None, limit: int, stage: Stage = STAGES[0]) -> list[Group]:
    """``limit`` groups from ESConv ``train`` turns (labelled, with a context, a mapped strategy, a template
    rubric without blocking problems and a real reply of :data:`MIN_WORDS` words), in the order of the
    ``stage``'s seed; the worse replies as it draws them."""
    from care_lab.training.config import BuildDataConfig
    from care_lab.training.evaluator_targets import esconv_scores
    from care_lab.training.rubric_targets import esconv_setup
    from care_sdk.types import Dimension

    config = BuildDataConfig(
        output_dir="unused",
        data_dir=str(root) if root else None,
        targets="evaluator",
        esconv_splits=("train",),
        use_mint=False,
        teacher=None,
        target_judges=None,
        max_context_messages=4,
    )
    setup = esconv_setup(config, "pairwise evaluator groups")
    written = written_replies()
    rng = random.Random(f"{stage.seed}:pairwise")
    turns = [
        (turn, dialogue)
        for dialogue in setup.loaded["train"].records
        for turn in dialogue.supporter_turns(setup.mapping)
        if turn.labelled and turn.context and any(turn.counts.values()) and len(turn.reply.split()) >= MIN_WORDS
    ]
    rng.shuffle(turns)
    by_emotion: dict[Any, list[tuple[Any, Any]]] = {}
    for turn, dialogue in turns:
        by_emotion.setdefault(dialogue.metadata.get("emotion_type"), []).append((turn, dialogue))
    groups: list[Group] = []
    for turn, dialogue in turns:
        if len(groups) == limit:
            break
        rubric, problems = setup.targets.build(turn, dialogue)
        if [p for p in problems if "names anything" not in p]:
            continue
        emotion = dialogue.metadata.get("emotion_type")
        other, other_dialogue = turns[rng.randrange(len(turns))]
        while other_dialogue.id == dialogue.id or other_dialogue.metadata.get("emotion_type") == emotion:
            other, other_dialogue = turns[rng.randrange(len(turns))]
        same = None
        if stage.same_emotion:
            kin = [t for t, d in by_emotion.get(emotion, []) if d.id != dialogue.id]
            if not kin:  # the only dialogue of its emotion type
                continue
            same = kin[rng.randrange(len(kin))]
        worse = negatives(
            turn.reply,
            other.reply,
            rng,
            written,
            same_emotion=same.reply if same else None,
            drawn=stage.drawn,
            always=stage.always,
        )
        covered: set[Dimension] = {d for d, n in turn.counts.items() if n > 0}
        scores = esconv_scores("reference", rubric, covered)
        groups.append(
            Group(
                context=turn.context_messages(),
                rubric=rubric.model_dump(mode="json"),
                replies=(turn.reply, *(n.text for n in worse)),
                target=json.dumps({"scores": {f"c{i + 1}": s for i, s in enumerate(scores)}}),
                kinds=("real", *(n.kind for n in worse)),
            )
        )
    return groups


@dataclass
class _Encoded:
    ids: list[list[int]]
    completion_start: list[int]
    """Per reply: the index of its first completion token."""
    slots: list[list[int]]
    """Per reply: the index of each criterion's score token."""


def _encode(group: Group, tokenizer: Any, choice_ids: Sequence[int]) -> _Encoded:
    from care_lab.training._common import evaluator_prompt_messages

    out = _Encoded([], [], [])
    target = group.target
    for reply in group.replies:
        messages = evaluator_prompt_messages(group.context, group.rubric, reply, keep=4)
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        full = tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": target}], tokenize=False)
        if not full.startswith(prompt):
            raise ValueError("the chat template does not extend the prompt with the completion")
        enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        start = next(i for i, (a, _) in enumerate(offsets) if a >= len(prompt))
        slots = []
        for match in _SLOT.finditer(full, len(prompt)):
            at = match.start(1)
            token = next(i for i, (a, b) in enumerate(offsets) if a <= at < b)
            if ids[token] != choice_ids[int(match.group(1)) - 1]:
                raise ValueError(f"score {match.group(1)} is not its own token in {full[at - 8 : at + 3]!r}")
            slots.append(token)
        out.ids.append(ids)
        out.completion_start.append(start)
        out.slots.append(slots)
    return out


def _group_loss(
    model: Any, enc: _Encoded, choice_ids: Sequence[int], pad: int, kinds: Sequence[str]
) -> tuple[Any, dict[str, float]]:
    """The SFT loss and the hinge of one group; the shared prompt runs once, its cache repeated per reply."""
    import torch
    import torch.nn.functional as F

    n = len(enc.ids)
    shared = min(common_prefix(enc.ids[0], ids) for ids in enc.ids[1:])
    shared = min(shared, min(enc.completion_start) - 1)  # the token before the completion is in every suffix
    prefix = torch.tensor([enc.ids[0][:shared]])
    cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
    cache.batch_repeat_interleave(n)
    tails = [ids[shared:] for ids in enc.ids]
    width = max(len(t) for t in tails)
    batch = torch.tensor([t + [pad] * (width - len(t)) for t in tails])  # right padding: real tokens never see it
    first, last = enc.completion_start[0] - shared, len(enc.ids[0]) - shared
    # logits only where the loss reads them (the real reply's completion, every reply's score positions)
    keep = sorted({*range(first - 1, last - 1), *(s - shared - 1 for slots in enc.slots for s in slots)})
    row = {position: j for j, position in enumerate(keep)}
    logits = model(input_ids=batch, past_key_values=cache, use_cache=True, logits_to_keep=torch.tensor(keep)).logits
    choices = torch.tensor(list(choice_ids))
    scores = torch.arange(1, len(choice_ids) + 1, dtype=logits.dtype)
    completion = [row[p] for p in range(first - 1, last - 1)]
    sft = F.cross_entropy(logits[0, completion], batch[0, first:last])  # the real reply's target
    expected = []
    for i in range(n):
        at = torch.tensor([row[s - shared - 1] for s in enc.slots[i]])
        probs = torch.softmax(logits[i, at][:, choices], dim=-1)
        expected.append(probs @ scores)
    gaps = torch.stack([expected[0] - e for e in expected[1:]])  # (worse replies, criteria)
    hinge = torch.clamp(MARGIN - gaps, min=0).mean()
    stats = {"sft": sft.item(), "hinge": hinge.item(), "gap": gaps.mean().item()}
    stats.update({f"gap_{k}": g.mean().item() for k, g in zip(kinds[1:], gaps, strict=True)})
    return sft + hinge, stats


def train(
    out: Path,
    *,
    stage: Stage = STAGES[0],
    steps: int | None = None,
    minutes: float | None = None,
    lr: float = 5e-4,
    warmup: int = 10,
    rank: int = 8,
    threads: int = 2,
    root: Path | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Train ``stage``'s pairwise LoRA on the shipped evaluator for ``steps`` groups or ``minutes`` (the stage's
    by default), whichever ends first; save it under ``out/adapter`` (also every 25 steps) and the per-step log
    under ``out/steps.jsonl``."""
    import torch
    from peft import LoraConfig, get_peft_model

    from care_lab.training._common import load_model

    steps = stage.steps if steps is None else steps
    minutes = stage.minutes if minutes is None else minutes
    torch.manual_seed(stage.seed)
    torch.set_num_threads(threads)
    groups = build_groups(root, steps, stage)
    model, tokenizer, _ = load_model("bundled:evaluator", "float32")
    model.config.use_cache = True
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=targets))
    choice_ids = [tokenizer.convert_tokens_to_ids(str(s)) for s in range(1, 6)]
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)

    def scale(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, scale)
    out.mkdir(parents=True, exist_ok=True)
    sink = (out / "steps.jsonl").open("w", encoding="utf-8")
    start = time.perf_counter()
    done = 0
    model.train()
    for step, group in enumerate(groups):
        if time.perf_counter() - start > minutes * 60:
            break
        t0 = time.perf_counter()
        loss, stats = _group_loss(
            model, _encode(group, tokenizer, choice_ids), choice_ids, tokenizer.pad_token_id, group.kinds
        )
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
        done = step + 1
        row = {
            "step": done,
            **{k: round(v, 4) for k, v in stats.items()},
            "seconds": round(time.perf_counter() - t0, 2),
        }
        sink.write(json.dumps(row) + "\n")
        sink.flush()
        log(json.dumps(row))
        if done % 25 == 0:
            model.save_pretrained(str(out / "adapter"))
    sink.close()
    model.save_pretrained(str(out / "adapter"))
    tokenizer.save_pretrained(str(out / "adapter"))
    summary = {
        "recipe": stage.name,
        "seed": stage.seed,
        "steps": done,
        "planned_steps": steps,
        "minutes": round((time.perf_counter() - start) / 60, 1),
        "lr": lr,
        "rank": rank,
        "margin": MARGIN,
        "threads": threads,
        "negatives": f"offcontext{' + offcontext_same' if stage.same_emotion else ''} + {stage.drawn} of cut, "
        f"shuffled, {', '.join(DRAWN_WRITTEN)}{''.join(f' + {k}' for k in stage.always)}",
        "start": "bundled:evaluator",
        "data": "esconv/train.jsonl",
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def export(out: Path, adapter: Path) -> Path:
    """Write the shipped evaluator adapter and the trained one as one GGUF evaluator adapter at ``adapter``."""
    from care_lab.training.export_adapter import export_lora_gguf
    from care_lab.training.models import adapter_chain
    from care_sdk.backends.llamacpp import default_model_path
    from care_sdk.backends.lora import read_adapter
    from care_sdk.bundled.adapters import bundled_adapter

    path = bundled_adapter("evaluator")
    if path is None:
        raise FileNotFoundError("this build ships no evaluator adapter to train on")
    shipped = read_adapter(path)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    adapter.parent.mkdir(parents=True, exist_ok=True)
    return export_lora_gguf(
        adapter_chain("bundled:evaluator", out / "adapter"),
        adapter,
        base_gguf=default_model_path(),
        role="evaluator",
        prompt_version=shipped.prompt_version,
        max_context_messages=shipped.max_context_messages,
        training={**summary, "scores": "expected"},  # read as trained: RubricEvaluator's default on this adapter
    )


def write_curve(out: Path, path: Path, command: str, block: int = 20) -> Path:
    """The run's training curve (``out/steps.jsonl``, means over blocks of ``block`` steps) and summary as a
    results file: each block's SFT loss, hinge and gap of the real reply's expected score over each worse kind's
    (points, on that block's train groups, each seen once)."""
    from care_lab.data.results import write_results

    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text(encoding="utf-8").splitlines()]
    keys = sorted({k for r in rows for k in r if k not in ("step", "seconds")})  # a gap per kind drawn
    blocks = [rows[i : i + block] for i in range(0, len(rows), block)]

    def mean(b: list[dict[str, Any]], k: str) -> float | None:
        values = [r[k] for r in b if k in r]
        return round(sum(values) / len(values), 3) if values else None

    curve = [{"last_step": b[-1]["step"], **{k: mean(b, k) for k in keys}} for b in blocks]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    seconds = sorted(r["seconds"] for r in rows)
    return write_results(
        path,
        command,
        data="esconv/train.jsonl",
        role="train",
        test_reads=0,
        metrics={"curve": curve, "steps": len(rows)},
        baselines={"first_block": curve[0]},
        extra={**summary, "median_step_seconds": seconds[len(seconds) // 2]},
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Train a ``--stage`` (``--steps``, ``--minutes``: the stage's by default) and export it with the shipped
    evaluator adapter to ``--adapter``; ``--export-only`` exports a finished run."""
    from care_lab.bench.contrast_run import PAIRWISE_ADAPTER

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", type=int, choices=range(1, len(STAGES) + 1), default=1)
    parser.add_argument("--out", default="runs/evaluator_pairwise")
    parser.add_argument("--adapter", default=str(PAIRWISE_ADAPTER))
    parser.add_argument("--steps", type=int)
    parser.add_argument("--minutes", type=float)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--curve", help="the curve's results file (default benchmarks/results/evaluator_pairwise[_<stage>].json)"
    )
    parser.add_argument("--export-only", action="store_true")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if not args.export_only:
        train(out, stage=STAGES[args.stage - 1], steps=args.steps, minutes=args.minutes, threads=args.threads)
    print(export(out, Path(args.adapter)))
    command = "python -m care_lab.training.evaluator_pairwise " + " ".join(argv or sys.argv[1:])
    curve = args.curve or f"benchmarks/results/evaluator_pairwise{'' if args.stage == 1 else f'_{args.stage}'}.json"
    print(write_curve(out, Path(curve), command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
