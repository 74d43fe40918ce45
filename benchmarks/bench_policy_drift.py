"""What a policy trained on a reward learns to do: the scored replies of a ``care train policy-grpo``
run, read step by step.

A reward that can be gamed shows it first in the policy's replies: they grow longer, repeat the
user, or collect flags while the reward rises. This reads the ``dialogues.jsonl`` and
``turns.jsonl`` a single-turn policy run writes (every sampled reply with its reward, context fit
and rubric scores, by optimiser step) and compares the first and the last quarter of the steps:

- ``reward``: what the policy was trained on;
- ``rubric reward``: the rubric's part alone (weights times dimension scores; replies the guards
  settled without a model call have none);
- ``context fit``: the fit's part (when the run had it on);
- ``words``: reply length in words;
- ``copied share``: the share of the reply's word 4-grams found in its context
  (:func:`care_sdk.guards.copied_share`, first and second person made one; replies under 8 words
  count 0);
- ``asks a question``: the share of replies with a question mark;
- ``feeling words``: the count of the words an LLM judge of empathy pays for (``feel*``,
  ``understand*``, ``sounds``, ``hard``, ``tough``; ``bench_surface_cues.py``), which the bundled
  reward pays for too (the robustness guide's ``feeling_words`` attack);
- ``repeated share``: the share of the reply's words in a word 4-gram it said before
  (:func:`care_sdk.guards.repeated_share`; replies under 8 words count 0);
- ``flagged``: the share of replies the reward's guards flagged.

Each row gives the two quarters' means and their difference with 95 % bootstrap intervals over
sampled groups (a prompt's replies at one step move together), and the Spearman correlation of the
measure with the step over all replies. Several runs (the same recipe with another reward) give
one table each.

Usage (the runs of ``training/configs/policy_grpo_default_reward_cpu.yaml`` and of its twin with
the rubric reward alone, ``..._no_fit.yaml``):
    python benchmarks/bench_policy_drift.py runs/policy_grpo_default runs/policy_grpo_default_no_fit \
        [--out runs/policy_drift.md]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench_surface_cues import CUES

from care_lab.bench.metrics import bootstrap, spearman
from care_sdk.guards import copied_share, repeated_share
from care_sdk.types import RewardResult


@dataclass(frozen=True)
class Reply:
    """One sampled reply of the run with what the reward said of it."""

    group: str
    step: int
    text: str
    context: tuple[str, ...]
    reward: float
    rubric_reward: float | None
    context_fit: float | None
    flagged: bool


MEASURES: dict[str, Callable[[Reply], float | None]] = {
    "reward": lambda r: r.reward,
    "rubric reward": lambda r: r.rubric_reward,
    "context fit": lambda r: r.context_fit,
    "words": lambda r: float(len(r.text.split())),
    "copied share": lambda r: copied_share(r.text, r.context) or 0.0,
    "asks a question": lambda r: float("?" in r.text),
    "feeling words": lambda r: CUES["feeling words"](r.text),
    "repeated share": lambda r: repeated_share(r.text) or 0.0,
    "flagged": lambda r: float(r.flagged),
}


def read_run(run: Path) -> list[Reply]:
    """The scored replies of a single-turn policy run, joined by id; replies without a reward are
    left out (the recipe logs them as failed)."""
    texts = {}
    with (run / "dialogues.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            texts[row["id"]] = [m["content"] for m in row["messages"]]
    replies = []
    with (run / "turns.jsonl").open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            row = json.loads(line)
            if row.get("reward") is None:
                continue
            if row["id"] not in texts:
                raise SystemExit(f"{run / 'turns.jsonl'}:{n}: id {row['id']!r} is not in dialogues.jsonl")
            messages = texts[row["id"]]
            result = RewardResult.model_validate({k: row[k] for k in RewardResult.model_fields if k in row})
            assert result.reward is not None
            replies.append(
                Reply(
                    group=row["id"].rsplit(":", 1)[0],  # "<prompt>@<step>": one prompt's samples
                    step=int(row["step"]),
                    text=messages[-1],
                    context=tuple(messages[:-1]),
                    reward=result.reward,
                    rubric_reward=result.rubric_reward,  # None for a reply the guards settled without a model call
                    context_fit=result.context_fit,
                    flagged=bool(result.flags),
                )
            )
    return replies


def _group_mean(measure: Callable[[Reply], float | None]) -> Callable[[Sequence[list[Reply]]], float | None]:
    def statistic(groups: Sequence[list[Reply]]) -> float | None:
        values = [v for g in groups for r in g if (v := measure(r)) is not None]
        return sum(values) / len(values) if values else None

    return statistic


def _change(
    measure: Callable[[Reply], float | None], first: set[int]
) -> Callable[[Sequence[list[Reply]]], float | None]:
    """The last quarter's mean minus the first's, over groups tagged by their step."""
    mean = _group_mean(measure)

    def statistic(groups: Sequence[list[Reply]]) -> float | None:
        a = mean([g for g in groups if g[0].step in first])
        b = mean([g for g in groups if g[0].step not in first])
        return None if a is None or b is None else b - a

    return statistic


def report(replies: list[Reply], run: Path) -> str:
    """One run's markdown table: the first and last quarter of the steps, the change between them,
    and the Spearman of each measure with the step."""
    steps = sorted({r.step for r in replies})
    if len(steps) < 4:
        raise SystemExit(f"{run}: {len(steps)} steps scored; at least 4 are needed to compare quarters")
    quarter = max(1, len(steps) // 4)
    first, last = set(steps[:quarter]), set(steps[-quarter:])
    by_group: dict[str, list[Reply]] = {}
    for r in replies:
        by_group.setdefault(r.group, []).append(r)
    groups = list(by_group.values())
    early = [g for g in groups if g[0].step in first]
    late = [g for g in groups if g[0].step in last]
    lines = [
        f"## {run}",
        "",
        f"{len(replies)} scored replies over steps {steps[0]}-{steps[-1]}; first quarter = steps "
        f"{min(first)}-{max(first)} ({sum(map(len, early))} replies), last quarter = steps "
        f"{min(last)}-{max(last)} ({sum(map(len, late))} replies). 95 % bootstrap intervals over groups "
        "(the change resamples each quarter's groups separately).",
        "",
        "| measure | first quarter | last quarter | change | Spearman with step |",
        "|---|---|---|---|---|",
    ]
    for name, measure in MEASURES.items():
        statistic = _group_mean(measure)
        a, b = bootstrap(early, statistic), bootstrap(late, statistic)
        change = bootstrap(early + late, _change(measure, first), strata=lambda g: g[0].step in first)
        pairs = [(float(r.step), v) for r in replies if (v := measure(r)) is not None]
        rho = spearman([p[0] for p in pairs], [p[1] for p in pairs]) if pairs else None
        cells = [a.format(), b.format(), change.format(), "n/a" if rho is None else f"{rho:+.3f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="policy runs' output_dir, one table each")
    parser.add_argument("--out", type=Path, help="also write the tables here")
    args = parser.parse_args()
    text = "# Policy drift\n\n" + "\n".join(report(read_run(run), run) for run in args.runs)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
