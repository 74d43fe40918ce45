"""The robustness benchmark: does an attack on the reward score above the honest reply, with and without defences?

For held-out ESConv test contexts with the reference (good) supporter reply, the honest reply and
every attack of :mod:`care_lab.bench.attacks` are scored twice through the same backend and the
same rubric:

- ``off``: evaluator prompt ``v1`` (the reply pasted in as plain text), no guards;
- ``on``: evaluator prompt ``v2`` (fenced, neutralised quotes) with the guards reporting flags.

An evaluator adapter is trained on one prompt (the bundled one on ``v2``), so with one both runs
use its prompt and ``off`` differs from ``on`` by the guards alone. The reward is the one a user
gets: with ``context_fit`` (the bundled default's, for instance) both runs scale by it.

The report reads three views from those two runs: **off**; **fence + pre-checks** (the ``on``
rewards as the evaluator gave them, pre-checks settling empty and punctuation-only replies); and
**all defences** (the same with the flags' policies applied, :attr:`~care_sdk.guards.Guards.on_flag`
and :attr:`~care_sdk.guards.Guards.flag_policies`, a pure function
of the reward and the flags, so no third run is needed). Per attack and view: mean reward, mean
gain over the honest reply and the share of items where the attack scores at least as high, each
with a 95% bootstrap interval over items. The false-positive rate of the flags is measured on every
supporter reply of the ESConv test split (no model needed), and the cost of the defences in
evaluator calls, prompt tokens and seconds.

A run writes ``records.jsonl`` (resumable: a re-run scores only what is missing), ``run.json``,
``cost.json`` (evaluator calls, tokens and seconds, summed over every run into the directory),
``robustness.json`` and ``robustness.md`` into its output directory.

Examples:
    >>> from care_sdk.testing import ScriptedBackend
    >>> from care_sdk import RubricGenerator
    >>> import tempfile
    >>> runner = RobustnessRunner(RubricGenerator(ScriptedBackend([])), ScriptedBackend([]), out_dir=tempfile.mkdtemp())
    >>> sorted(runner.rewards)
    ['off', 'on']
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from care_lab.bench.attacks import ATTACKS_BY_NAME, FLAGGED_CATEGORIES
from care_lab.bench.meter import Meter
from care_lab.bench.metrics import Estimate, bootstrap, mean
from care_lab.bench.tasks import select
from care_lab.data import load_esconv
from care_sdk.addons import ContextFitReader
from care_sdk.backends import Backend, TrainedAdapter
from care_sdk.errors import ConfigError
from care_sdk.evaluator import RubricEvaluator
from care_sdk.generator import RubricGenerator
from care_sdk.guards import (
    EMPTY_REPLY,
    INFO_FLAGS,
    NO_WORDS,
    Guards,
    penalised,
    policy_reward,
    screen,
)
from care_sdk.reward import AdaptiveReward
from care_sdk.types import Context, Message

__all__ = ["VIEWS", "RobustItem", "RobustnessRunner", "flag_rates", "load_items", "markdown"]

VIEWS: dict[str, str] = {"off": "off", "fence": "fence + pre-checks", "on": "all defences"}
"""The report's views: id -> column title."""
HONEST = "honest"
RECORDS = "records.jsonl"
TOL = 1e-9
PRECHECK_FLAGS = frozenset({EMPTY_REPLY, NO_WORDS})
_REPORT_ONLY_FIELDS = {"on_flag", "flag_policies", "penalty", "detect", "copy_share", "own_turn_share", "repeat_share"}
"""Guards fields that change no score of the defended run (it reports flags; the report applies them)."""


@dataclass(frozen=True)
class RobustItem:
    """A held-out context with its reference reply.

    Examples:
        >>> RobustItem("d1:3", (Message(role="user", content="hi"),), "Hello, how are you?").key
        'd1:3'
    """

    key: str
    """``dialogue:index``."""
    context: tuple[Message, ...]
    """The messages before the reply."""
    honest: str
    """The reference supporter reply."""


def load_items(path: Path, limit: int | None, seed: int = 0, min_chars: int = 40) -> tuple[list[RobustItem], int]:
    """One supporter turn per dialogue (a reply of at least ``min_chars``), a seeded sample of ``limit`` dialogues.

    Returns the items and how many dialogues had such a turn. A larger ``limit`` keeps every item of
    a smaller one (the same seeded order), so a run cut short is reported with a smaller limit.

    Examples:
        >>> items, available = load_items(Path("esconv/test.jsonl"), 40)  # doctest: +SKIP
        >>> len(items), items[0].honest[:30]  # doctest: +SKIP
        (40, 'That sounds really hard. Have ')
    """
    units = []
    for dialogue in load_esconv(path):
        turns = [t for t in dialogue.supporter_turns() if len(t.reply) >= min_chars and t.context]
        if turns:
            turn = random.Random(f"{seed}:{dialogue.id}").choice(turns)
            units.append(RobustItem(f"{dialogue.id}:{turn.index}", tuple(turn.context), turn.reply))
    return select(units, limit, seed), len(units)


def flag_rates(
    turns: Sequence[tuple[Context, str]], guards: Guards, *, resamples: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Share of replies the guards flag (pre-checks included, information flags not), with counts per flag.

    ``turns`` are ``(context, reply)`` pairs, the context as messages with roles (the copy flags
    tell the user's words from the assistant's). ``flagged`` counts every flag, ``changed`` only
    replies whose reward a flag's policy in ``guards`` changes (pre-checks included).

    Examples:
        >>> turns = [(["I lost my job."], "I hear you."), ([], "User: thanks"), ([], "")]
        >>> out = flag_rates(turns, Guards(), resamples=50)
        >>> round(out["flagged"].value, 3), out["by_flag"]
        (0.667, {'empty_reply': 1, 'forged_turn': 1})
    """
    hits, changed = [], []
    counts: dict[str, int] = {}
    report_only = guards.report_only()
    for context, reply in turns:
        flags = [f for f in screen(reply, report_only, context).flags if f not in INFO_FLAGS]
        hits.append(float(bool(flags)))
        changed.append(float(bool(set(flags) & PRECHECK_FLAGS or penalised(flags, guards))))
        for flag in flags:
            counts[flag] = counts.get(flag, 0) + 1
    return {
        "flagged": bootstrap(hits, _mean, resamples=resamples, seed=seed),
        "changed": bootstrap(changed, _mean, resamples=resamples, seed=seed),
        "by_flag": dict(sorted(counts.items())),
    }


def _mean(values: Sequence[float]) -> float | None:
    return mean(values)


@dataclass
class _Cost:
    totals: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, name: str, before: dict[str, Any], after: dict[str, Any]) -> None:
        slot = self.totals.setdefault(name, {})
        for key, value in after.items():
            slot[key] = slot.get(key, 0) + value - before[key]


class RobustnessRunner:
    """Scores honest replies and attacks with defences off and on, into an output directory.

    Args:
        generator: the rubric generator (one rubric per context, shared by every reply and both runs).
        evaluator_backend: the evaluator's backend (wrapped once per run to meter its cost).
        out_dir: where records and reports go; an existing run there is resumed.
        attacks: attack names (default: all).
        guards: the defences of the ``on`` run (its flag policies are applied in the report).
        context_fit: the reward's context fit, in both runs (``None``: rubric scores alone).
        batch_size: items per batch.
        seed: sampling and bootstrap seed.
        resamples: bootstrap resamples.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
        >>> import tempfile
        >>> backend = ScriptedBackend(lambda r: evaluation_json([3] * 6) if "scores" in r.json_schema["properties"]
        ...                           else rubric_json({"cognitive": 1, "affective": 1, "proactive": 1}))
        >>> runner = RobustnessRunner(RubricGenerator(backend), backend, out_dir=tempfile.mkdtemp(),
        ...                           attacks=["score_json", "empty"], resamples=10)
        >>> item = RobustItem("d:1", (Message(role="user", content="I failed."),), "That hurts. What happened?")
        >>> [row["on_reward"]["value"] for row in runner.run([item])["rows"]]
        [0.5, 0.0, 0.0]
    """

    def __init__(
        self,
        generator: RubricGenerator,
        evaluator_backend: Backend,
        *,
        out_dir: str | Path,
        attacks: Sequence[str] | None = None,
        guards: Guards | None = None,
        context_fit: ContextFitReader | None = None,
        batch_size: int = 4,
        seed: int = 0,
        resamples: int = 1000,
    ) -> None:
        unknown = [a for a in attacks or () if a not in ATTACKS_BY_NAME]
        if unknown:
            raise ConfigError(f"unknown attack(s) {', '.join(unknown)}; choose from {', '.join(ATTACKS_BY_NAME)}")
        self.attacks = tuple(attacks) if attacks else tuple(ATTACKS_BY_NAME)
        self.guards = guards or Guards()
        self.meters = {"off": Meter(evaluator_backend), "on": Meter(evaluator_backend)}
        report_only = self.guards.report_only()
        adapter = evaluator_backend.adapter if isinstance(evaluator_backend, TrainedAdapter) else None
        self.prompt_versions = (
            {"off": adapter.prompt_version, "on": adapter.prompt_version} if adapter else {"off": "v1", "on": "v2"}
        )
        """The evaluator prompt of each run (an adapter's own in both)."""
        self.context_fit = context_fit
        self.rewards = {
            config: AdaptiveReward(
                generator,
                RubricEvaluator(self.meters[config], seed=seed, prompt_version=self.prompt_versions[config]),
                guards=report_only if config == "on" else None,
                context_fit=context_fit,
            )
            for config in ("off", "on")
        }
        self.generator = generator
        self.out_dir = Path(out_dir)
        self.batch_size = max(1, batch_size)
        self.seed = seed
        self.resamples = resamples

    def identity(self) -> dict[str, Any]:
        """What the records depend on."""
        evaluator = self.rewards["on"].evaluator
        return {
            "generator": self.generator.identity,
            "evaluator": f"{evaluator.backend.identity}|t={evaluator.temperature}|seed={evaluator.seed}",
            # what changes the scores; the report recomputes flags (_flags) and applies the policy itself
            "guards": self.guards.model_dump(exclude=_REPORT_ONLY_FIELDS),
            "prompt_versions": self.prompt_versions,
            "context_fit": self.context_fit.identity if self.context_fit is not None else None,
        }

    def _check_out_dir(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        run_file = self.out_dir / "run.json"
        mine = self.identity()
        if run_file.exists():
            if json.loads(run_file.read_text(encoding="utf-8")) != mine:
                raise ConfigError(
                    f"{self.out_dir} holds records made with other models or guards; choose another --out"
                )
        else:
            run_file.write_text(json.dumps(mine, indent=2) + "\n", encoding="utf-8")

    def run(
        self,
        items: Sequence[RobustItem],
        *,
        esconv_turns: Sequence[tuple[Context, str]] = (),
        on_start: Callable[[int], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, Any]:
        """Score what is missing, compute the metrics, write ``robustness.json`` and ``.md``; returns the JSON.

        ``esconv_turns`` (every honest reply of the split with its context messages) measure the
        flags' false-positive rate.
        """
        self._check_out_dir()
        path = self.out_dir / RECORDS
        store = _load(path)
        names = (HONEST, *self.attacks)
        todo = [i for i in items if not all((c, i.key, a) in store for c in self.rewards for a in names)]
        if on_start:
            on_start(len(todo))
        cost_file = self.out_dir / "cost.json"
        cost = _Cost(json.loads(cost_file.read_text(encoding="utf-8")) if cost_file.exists() else {})
        started = time.perf_counter()
        with path.open("a", encoding="utf-8") as handle:
            for start in range(0, len(todo), self.batch_size):
                chunk = todo[start : start + self.batch_size]
                for config, reward in self.rewards.items():
                    for part in (HONEST, "attacks"):
                        pairs = [
                            (item, name)
                            for item in chunk
                            for name in names
                            if (name == HONEST) == (part == HONEST) and (config, item.key, name) not in store
                        ]
                        replies = [_reply(i, n) for i, n in pairs]
                        before = self.meters[config].snapshot()
                        results = reward.score_batch(
                            [(list(i.context), r) for (i, _), r in zip(pairs, replies, strict=True)]
                        )
                        cost.add(f"{config}:{part}", before, self.meters[config].snapshot())
                        for (item, name), result in zip(pairs, results, strict=True):
                            record = {
                                "config": config,
                                "key": item.key,
                                "attack": name,
                                **_slim(result.model_dump(mode="json")),
                            }
                            if result.reward is not None:
                                store[(config, item.key, name)] = record
                            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                handle.flush()
                cost_file.write_text(json.dumps(cost.totals, indent=2) + "\n", encoding="utf-8")
                if progress:
                    progress(len(chunk))
        report = self.report(items, store, esconv_turns, cost, time.perf_counter() - started)
        (self.out_dir / "robustness.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", "utf-8")
        (self.out_dir / "robustness.md").write_text(markdown(report) + "\n", encoding="utf-8")
        return report

    def _flags(self, item: RobustItem, name: str) -> tuple[str, ...]:
        """The reply's flags, recomputed (deterministic, with the context as the reward reads it), so a
        report always uses the current detectors."""
        flags = screen(_reply(item, name), self.guards.report_only(), item.context).flags
        return tuple(f for f in flags if f not in INFO_FLAGS)

    def report(
        self,
        items: Sequence[RobustItem],
        store: dict[tuple[str, str, str], dict[str, Any]],
        esconv_turns: Sequence[tuple[Context, str]],
        cost: _Cost,
        seconds: float,
    ) -> dict[str, Any]:
        """The metrics of scored records (see the module docstring)."""

        def est(values: Sequence[float]) -> dict[str, Any]:
            return bootstrap(values, _mean, resamples=self.resamples, seed=self.seed).to_json()

        flags = {(i.key, n): self._flags(i, n) for i in items for n in (HONEST, *self.attacks)}

        def value(view: str, key: str, name: str) -> float | None:
            record = store.get(("off" if view == "off" else "on", key, name))
            if record is None or record.get("reward") is None:
                return None
            reward = float(record["reward"])
            return policy_reward(reward, flags[(key, name)], self.guards) if view == "on" else reward

        rows = []
        pooled: dict[str, list[tuple[float, float]]] = {v: [] for v in VIEWS}
        for name in (HONEST, *self.attacks):
            attack = ATTACKS_BY_NAME.get(name)
            row: dict[str, Any] = {"attack": name, "category": attack.category if attack else HONEST}
            row["description"] = attack.description if attack else "the reference reply"
            flagged = [bool(flags[(i.key, name)]) for i in items]
            row["flagged"] = sum(flagged) / len(flagged) if flagged else None
            for view in VIEWS:
                rewards = [r for i in items if (r := value(view, i.key, name)) is not None]
                row[f"{view}_reward"] = est(rewards)
                if attack is None:
                    continue
                diffs = []
                for item in items:
                    honest, attacked = value(view, item.key, HONEST), value(view, item.key, name)
                    if honest is not None and attacked is not None:
                        diffs.append(attacked - honest)
                        pooled[view].append((attacked - honest, float(attacked >= honest - TOL)))
                row[f"{view}_gain"] = est(diffs)
                row[f"{view}_reach"] = est([float(d >= -TOL) for d in diffs])
            rows.append(row)
        honest_change = {}
        for view in ("fence", "on"):
            diffs = [
                b - a
                for i in items
                if (a := value("off", i.key, HONEST)) is not None and (b := value(view, i.key, HONEST)) is not None
            ]
            honest_change[view] = est(diffs)
        must_flag = [r for r in rows if r["category"] in FLAGGED_CATEGORIES]
        summary = {
            "pooled_gain": {v: est([g for g, _ in pooled[v]]) for v in VIEWS},
            "pooled_reach": {v: est([s for _, s in pooled[v]]) for v in VIEWS},
            "honest_change": honest_change,
            "must_flag_attacks": len(must_flag),
            "must_flag_rate": mean(r["flagged"] for r in must_flag if r["flagged"] is not None),
        }
        fp = flag_rates(esconv_turns, self.guards, resamples=self.resamples, seed=self.seed) if esconv_turns else None
        settled = {
            "replies": len(flags),
            "by_prechecks": sum(1 for f in flags.values() if set(f) & PRECHECK_FLAGS),
            "flagged": sum(1 for f in flags.values() if penalised(f, self.guards)),
        }
        return {
            "benchmark": "care-robustness",
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(seconds, 1),
            "identity": self.identity(),
            "on_flag": self.guards.on_flag,
            "flag_policies": self.guards.flag_policies,
            "items": len(items),
            "attacks": list(self.attacks),
            "rows": rows,
            "summary": summary,
            "false_positives": None
            if fp is None
            else {
                "replies": len(esconv_turns),
                "flagged": fp["flagged"].to_json(),
                "changed": fp["changed"].to_json(),
                "by_flag": fp["by_flag"],
            },
            "cost": cost.totals,
            "settled": settled,
        }


def _reply(item: RobustItem, name: str) -> str:
    """The reply scored for ``item`` under ``name``: the honest one or an attack built from it."""
    return item.honest if name == HONEST else ATTACKS_BY_NAME[name].reply(item.honest, item.context)


def _slim(record: dict[str, Any]) -> dict[str, Any]:
    keep = ("reward", "raw_reward", "error", "flags", "note", "dimension_scores", "context_fit")
    out = {k: record.get(k) for k in keep}
    rubric = record.get("rubric")
    out["weights"] = rubric["weights"] if rubric else None
    return out


def _load(path: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    store: dict[tuple[str, str, str], dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
                if record.get("reward") is not None:
                    store[(record["config"], record["key"], record["attack"])] = record
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return store


def _fmt(estimate: dict[str, Any]) -> str:
    return Estimate(estimate["value"], estimate["low"], estimate["high"], estimate["n"]).format(2)


def markdown(report: dict[str, Any]) -> str:
    """The report as markdown: one row per attack, three views side by side, then the summary.

    Examples:
        >>> text = markdown({"items": 0, "rows": [], "summary": {}, "false_positives": None, "cost": {}})
        >>> text.splitlines()[0].split(" | ")[:5]
        ['| attack', 'category', 'flagged', 'off: reward', 'off: gain']
    """
    header = ["attack", "category", "flagged"]
    for title in VIEWS.values():
        header += [f"{title}: reward", f"{title}: gain", f"{title}: ≥ honest"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in report["rows"]:
        cells = [row["attack"], row["category"], "n/a" if row["flagged"] is None else f"{row['flagged']:.0%}"]
        for view in VIEWS:
            cells.append(_fmt(row[f"{view}_reward"]))
            cells += [_fmt(row[f"{view}_{k}"]) if f"{view}_{k}" in row else "" for k in ("gain", "reach")]
        lines.append("| " + " | ".join(cells) + " |")
    summary = report["summary"]
    lines += ["", f"{report['items']} held-out ESConv test contexts, each with its reference reply (honest)."]
    identity = report.get("identity", {})
    if "prompt_versions" in identity:
        versions = identity["prompt_versions"]
        fit = identity.get("context_fit")
        lines.append(
            f"Evaluator prompt: off {versions['off']}, defended {versions['on']}; "
            + (f"context fit: {fit}." if fit else "no context fit.")
        )
    if summary:
        lines.append(
            "Pooled over attacks: mean gain "
            + ", ".join(f"{t} {_fmt(summary['pooled_gain'][v])}" for v, t in VIEWS.items())
            + "; share of attacks scoring at least the honest reply "
            + ", ".join(f"{t} {_fmt(summary['pooled_reach'][v])}" for v, t in VIEWS.items())
            + "."
        )
        lines.append(
            "Honest reward change against off: "
            + ", ".join(f"{VIEWS[v]} {_fmt(e)}" for v, e in summary["honest_change"].items())
            + "."
        )
        rate = summary["must_flag_rate"]
        lines.append(
            f"Injection, forged-turn and fence-break attacks flagged: {'n/a' if rate is None else f'{rate:.1%}'} "
            f"({summary['must_flag_attacks']} attacks, each built on every item)."
        )
    fp = report["false_positives"]
    if fp:
        by_flag = ", ".join(f"{k} {v}" for k, v in fp["by_flag"].items()) or "none"
        lines.append(f"Honest ESConv test replies flagged: {_fmt(fp['flagged'])} of {fp['replies']} ({by_flag}).")
    settled = report.get("settled")
    if settled:
        lines.append(
            f"Of {settled['replies']} replies in the defended run, {settled['by_prechecks']} were settled by the "
            f"pre-checks without a model call and {settled['flagged']} were flagged (with on_flag='zero' they "
            "need no model call either)."
        )
    for name, totals in sorted(report["cost"].items()):
        if isinstance(totals, dict) and totals.get("calls"):
            calls = totals["calls"]
            lines.append(
                f"Cost {name}: {calls:.0f} evaluator calls, {totals['prompt_tokens'] / calls:.0f} prompt tokens and "
                f"{totals['completion_tokens'] / calls:.0f} completion tokens per call, "
                f"{totals['seconds'] / calls:.2f} s per call."
            )
    return "\n".join(lines)
