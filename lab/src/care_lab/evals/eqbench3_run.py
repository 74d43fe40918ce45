"""``care eval eqbench3``'s runner: policies through the EQ-Bench 3 scenarios, judged by rubric and pairwise.

An output directory holds:

- ``transcripts.jsonl``: one record per policy, scenario and iteration: the messages, the parsed
  sections, the debrief, the status (``complete``; ``incomplete`` when no respondent turn reaches
  :data:`~care_lab.evals.eqbench3.MIN_REPLY_CHARS` characters, which the benchmark does not judge;
  ``error``) and the rubric verdict;
- ``pairwise.jsonl``: one record per comparison (two policies, a scenario, an order);
- ``run.json``: the policies', the judge's identities and the settings (a policy may join a run;
  another judge or setting is refused);
- ``eqbench3.json`` / ``eqbench3.md``: the report.

A re-run with the same directory rolls out, judges and compares only what is missing or failed.

Examples:
    >>> import tempfile
    >>> from care_lab.evals.eqbench3 import Scenario
    >>> from care_sdk.testing import ScriptedBackend
    >>> data = EqBench3Data(Path("."), (Scenario("401", "Analytical Interpretation", "t", ("Read this.",)),), {},
    ...     {"master_analysis": "{scenario_prompt}", "rubric_prompt_analysis": "{transcript}{output_format}"},
    ...     {"analysis": ("depth_of_insight",)})
    >>> judge = ScriptedBackend(lambda r: '{"chain_of_thought_reasoning": "ok", "depth_of_insight": 12}')
    >>> runner = EqBench3Runner({"p": ScriptedBackend(lambda r: "An analysis. " * 10)}, judge, data,
    ...                         out_dir=tempfile.mkdtemp())
    >>> runner.run().rubric["p"].value
    60.0
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from care_lab._run_dir import check_identity, file_hashes, load_records, run_meta
from care_lab.bench.metrics import Estimate, bootstrap, mean
from care_lab.evals.eqbench3 import MIN_REPLY_CHARS, EqBench3Data, Scenario, parse_sections, turn_message
from care_lab.evals.eqbench3_judge import (
    pairwise_criteria,
    pairwise_fraction,
    pairwise_prompt,
    pairwise_schema,
    parse_pairwise,
    parse_rubric_scores,
    plus_tally,
    rubric_prompt,
    rubric_schema,
    task_rubric_score,
)
from care_sdk.backends import Backend, GenerationRequest, resolve_backend
from care_sdk.backends.base import Completion
from care_sdk.errors import CareError
from care_sdk.jsonl import replace_jsonl
from care_sdk.plans import drive, parse_plan
from care_sdk.types import Message

__all__ = ["EQBENCH3_PROTOCOL", "EqBench3Report", "EqBench3Runner"]

EQBENCH3_PROTOCOL = "eqbench3-3c21bcc"
"""The benchmark version followed: the EQ-bench/eqbench3 commit whose data and code this mirrors."""

TRANSCRIPTS = "transcripts.jsonl"
PAIRWISE = "pairwise.jsonl"

Tick = Callable[[int], None]
Comparison = tuple[tuple[str, str, str, int, str], Scenario, tuple[Any, Any]]
"""A comparison to ask: its key (a, b, scenario, iteration, order), the scenario, both transcripts."""


@dataclass
class EqBench3Report:
    """The outcome of an EQ-Bench 3 run.

    Examples:
        >>> EqBench3Report(rubric={}, criteria={}, pairwise={}, counts={}, meta={}).to_json()["rubric"]
        {}
    """

    rubric: dict[str, Estimate]
    """Each policy's rubric score (0-100): the mean over scenarios of the mean of the "higher is
    better" criteria, times 5, with a bootstrap interval over scenarios."""
    criteria: dict[str, dict[str, float | None]]
    """Each policy's mean score (0-20) on every rubric criterion, style descriptors included."""
    pairwise: dict[str, dict[str, Any]]
    """For ``"A vs B"``: A's mean margin-weighted result (``fraction``, an :class:`Estimate`; 0.5 is
    a draw), and the comparisons A won, tied and lost."""
    counts: dict[str, dict[str, int]]
    """Each policy's transcripts by status, and the ones whose rubric verdict failed."""
    meta: dict[str, Any]
    """Models, settings, data hashes, skipped scenarios, time per item."""

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return {
            **self.meta,
            "counts": self.counts,
            "rubric": {k: v.to_json() for k, v in self.rubric.items()},
            "criteria": self.criteria,
            "pairwise": {k: {**v, "fraction": v["fraction"].to_json()} for k, v in self.pairwise.items()},
        }

    def markdown(self) -> str:
        """The report as markdown: the rubric table, the pairwise table, then what was run."""
        lines = [
            "| policy | scenarios judged | rubric score (0-100) [95 % CI] | incomplete | errors |",
            "|---|---|---|---|---|",
        ]
        for label, est in self.rubric.items():
            c = self.counts.get(label, {})
            lines.append(
                f"| {label} | {est.n} | {est.format(1)} | {c.get('incomplete', 0)} | "
                f"{c.get('error', 0) + c.get('rubric_error', 0)} |"
            )
        if self.pairwise:
            lines += [
                "",
                "| comparison | comparisons | A's result [95 % CI] | A won / tied / lost |",
                "|---|---|---|---|",
            ]
            for name, row in self.pairwise.items():
                lines.append(
                    f"| {name} | {row['comparisons']} | {row['fraction'].format()} | "
                    f"{row['won']} / {row['tied']} / {row['lost']} |"
                )
        settings = self.meta.get("settings", {})
        lines += [
            "",
            f"EQ-Bench 3 ({EQBENCH3_PROTOCOL}), {self.meta.get('scenarios')} scenarios x "
            f"{settings.get('iterations')} iteration(s); respondent budget {settings.get('max_tokens')} tokens a turn.",
            f"- judge: `{self.meta.get('judge')}`",
        ]
        lines += [f"- policy {label}: `{ident}`" for label, ident in self.meta.get("policies", {}).items()]
        lines += [f"- skipped scenario {sid}: {why}" for sid, why in self.meta.get("skipped", {}).items()]
        lines += [f"- data `{path}`: `{digest}`" for path, digest in self.meta.get("data", {}).items()]
        wall, cpu = self.meta.get("seconds_per_item", {}), self.meta.get("cpu_seconds_per_item", {})
        timed = [f"{k} {v:.1f} s ({cpu[k]:.1f} s of processor time)" for k, v in wall.items() if v is not None]
        if timed:
            lines.append("\nTime per item in this run: " + ", ".join(timed) + ".")
        return "\n".join(lines)


def _key(record: Mapping[str, Any]) -> tuple[str, str, int]:
    return (record["policy"], record["scenario"], int(record["iteration"]))


def _pair_key(record: Mapping[str, Any]) -> tuple[str, str, str, int, str]:
    return (record["a"], record["b"], record["scenario"], int(record["iteration"]), record["order"])


class EqBench3Runner:
    """Runs policies through EQ-Bench 3 and judges them with the benchmark's rubric and pairwise prompts.

    Args:
        policies: label -> the policy's backend (spec or :class:`~care_sdk.backends.Backend`).
        judge: the judge's backend, set apart from the policies and from any CARE reward.
        data: the benchmark's files (:func:`~care_lab.evals.eqbench3.load_eqbench3`).
        out_dir: where records and reports go; an existing run there is resumed.
        iterations: runs of each scenario per policy.
        max_tokens: a respondent turn's token budget (the benchmark allows 12,000).
        judge_max_tokens: a verdict's token budget (the benchmark allows 8,000).
        max_reasoning_chars: the judge's reasoning is bounded to this many characters.
        pairwise: compare every two policies on every scenario, in both orders.
        batch_size: scenarios rolled out, or verdicts asked, together.
        max_attempts: judge replies tried per verdict before it fails.
        resamples: bootstrap resamples.
        seed: bootstrap seed; it also seeds the respondents' sampling.

    Examples:
        >>> import tempfile
        >>> from care_sdk.testing import ScriptedBackend
        >>> b = ScriptedBackend(lambda r: "x")
        >>> data = EqBench3Data(Path("."), (), {}, {}, {})
        >>> EqBench3Runner({"p": b}, b, data, out_dir=tempfile.mkdtemp()).identity()["settings"]["temperature"]
        0.7
    """

    def __init__(
        self,
        policies: Mapping[str, str | Backend | Any],
        judge: str | Backend | Any,
        data: EqBench3Data,
        *,
        out_dir: str | Path,
        iterations: int = 1,
        max_tokens: int = 2048,
        judge_max_tokens: int = 1024,
        max_reasoning_chars: int = 2000,
        pairwise: bool = True,
        batch_size: int = 4,
        max_attempts: int = 2,
        resamples: int = 1000,
        seed: int = 0,
    ) -> None:
        if not policies:
            raise ValueError("at least one policy is needed")
        self.policies = {label: resolve_backend(spec) for label, spec in policies.items()}
        self.judge = resolve_backend(judge)
        self.data = data
        self.out_dir = Path(out_dir)
        self.iterations = max(1, iterations)
        self.judge_max_tokens, self.max_reasoning_chars = judge_max_tokens, max_reasoning_chars
        self.pairwise = pairwise and len(self.policies) > 1
        self.batch_size, self.max_attempts = max(1, batch_size), max(1, max_attempts)
        self.resamples, self.seed = resamples, seed
        # The benchmark samples turns at 0.7 (with min_p 0.1, which the backends here do not offer)
        # and the debrief at 0.5; the judge is greedy.
        self.settings: dict[str, Any] = {
            "iterations": self.iterations,
            "max_tokens": max_tokens,
            "temperature": 0.7,
            "debrief_temperature": 0.5,
            "seed": seed,
        }
        # (wall seconds, processor seconds, items) per kind of item, for the report's time per item
        self._timing: dict[str, list[float]] = {
            k: [0.0, 0.0, 0] for k in ("transcript", "rubric verdict", "pairwise verdict")
        }

    def identity(self) -> dict[str, Any]:
        """What the records depend on: the policies, the judge and the settings."""
        return {
            "protocol": EQBENCH3_PROTOCOL,
            "judge": f"{self.judge.identity}|max_tokens={self.judge_max_tokens}|reasoning={self.max_reasoning_chars}",
            "settings": self.settings,
            "policies": {label: backend.identity for label, backend in self.policies.items()},
        }

    def run(
        self,
        scenarios: Sequence[Scenario] | None = None,
        *,
        on_start: Callable[[int], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> EqBench3Report:
        """Roll out, judge and compare what is missing, then write ``eqbench3.json`` and ``eqbench3.md``.

        ``on_start`` gets the number of steps to do (transcripts, rubric verdicts, comparisons);
        ``progress`` is called as they finish.
        """
        started = time.perf_counter()
        chosen = list(scenarios if scenarios is not None else self.data.scenarios)
        check_identity(self.out_dir, self.identity(), merge="policies")
        t_path, p_path = self.out_dir / TRANSCRIPTS, self.out_dir / PAIRWISE
        transcripts: dict[Hashable, dict[str, Any]] = load_records(t_path, _key)
        comparisons: dict[Hashable, dict[str, Any]] = load_records(p_path, _pair_key)
        keys = [(label, s.id, i) for label in self.policies for s in chosen for i in range(self.iterations)]
        to_roll = [k for k in keys if transcripts.get(k, {}).get("status") in (None, "error")]
        to_judge = [k for k in keys if transcripts.get(k, {}).get("rubric") is None]
        pairs = list(itertools.combinations(self.policies, 2)) if self.pairwise else []
        if on_start:
            on_start(len(to_roll) + len(to_judge) + len(pairs) * len(chosen) * self.iterations * 2)
        tick = progress or (lambda n: None)
        with t_path.open("a", encoding="utf-8") as handle:
            self._transcripts_stage(to_roll, transcripts, handle, tick)
            self._rubric_stage([transcripts[k] for k in to_judge], handle, tick)
        with p_path.open("a", encoding="utf-8") as handle:
            self._pairwise_stage(pairs, chosen, transcripts, comparisons, handle, tick)
        wanted = set(keys)
        others = [r for k, r in transcripts.items() if k not in wanted]  # other scenarios of earlier runs
        replace_jsonl(t_path, [transcripts[k] for k in keys if k in transcripts] + others)
        replace_jsonl(p_path, list(comparisons.values()))
        meta = {
            **run_meta("care-eval-eqbench3", time.perf_counter() - started),
            **self.identity(),
            "scenarios": len(chosen),
            "scenario_ids": [s.id for s in chosen],
            "skipped": self.data.skipped,
            "data": file_hashes(self.data.files),
            "resamples": self.resamples,
            "seconds_per_item": {k: w / n if n else None for k, (w, _, n) in self._timing.items()},
            "cpu_seconds_per_item": {k: c / n if n else None for k, (_, c, n) in self._timing.items()},
        }
        chosen_ids = {s.id for s in chosen}
        compared = [
            r
            for r in comparisons.values()
            if r["scenario"] in chosen_ids and r["iteration"] < self.iterations and r["error"] is None
        ]
        return self._report([transcripts[k] for k in keys if k in transcripts], compared, pairs, meta)

    # -- stages ---------------------------------------------------------------------------------

    def _transcripts_stage(
        self, keys: Sequence[tuple[str, str, int]], store: dict[Hashable, dict[str, Any]], handle: IO[str], tick: Tick
    ) -> None:
        """Roll out the missing transcripts, policy by policy, a batch of scenarios at a time."""
        scenarios = {s.id: s for s in self.data.scenarios}
        for label in self.policies:
            todo = [(scenarios[sid], i) for lab, sid, i in keys if lab == label]
            for start in range(0, len(todo), self.batch_size):
                chunk = todo[start : start + self.batch_size]
                for record in self._roll_out(label, chunk):
                    store[_key(record)] = record
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                handle.flush()
                tick(len(chunk))

    def _rubric_stage(self, records: Sequence[dict[str, Any]], handle: IO[str], tick: Tick) -> None:
        """Judge the complete transcripts without a rubric verdict; the others have nothing to judge."""
        ready = [r for r in records if r["status"] == "complete"]
        tick(len(records) - len(ready))
        for start in range(0, len(ready), self.batch_size):
            chunk = ready[start : start + self.batch_size]
            self._judge_rubrics(chunk)
            for record in chunk:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            tick(len(chunk))

    def _pairwise_stage(
        self,
        pairs: Sequence[tuple[str, str]],
        scenarios: Sequence[Scenario],
        transcripts: Mapping[Hashable, dict[str, Any]],
        store: dict[Hashable, dict[str, Any]],
        handle: IO[str],
        tick: Tick,
    ) -> None:
        """Compare every two policies on every scenario in both orders, where both transcripts are complete."""
        todo: list[Comparison] = []
        for (a, b), scenario, i in itertools.product(pairs, scenarios, range(self.iterations)):
            sides = (transcripts.get((a, scenario.id, i)), transcripts.get((b, scenario.id, i)))
            for order in ("forward", "reversed"):
                key = (a, b, scenario.id, i, order)
                done = store.get(key, {}).get("error", "missing") is None
                if done or not all(side and side["status"] == "complete" for side in sides):
                    tick(1)  # done before, or a side has no judgeable transcript
                else:
                    todo.append((key, scenario, (sides[0], sides[1])))
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            for record in self._compare(chunk):
                store[_pair_key(record)] = record
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            tick(len(chunk))

    def _roll_out(self, label: str, todo: Sequence[tuple[Scenario, int]]) -> list[dict[str, Any]]:
        """One batch of scenarios for one policy, all advancing turn by turn, then the debriefs."""
        backend = self.policies[label]
        clocks = time.perf_counter(), time.process_time()
        states: list[dict[str, Any]] = [
            {
                "policy": label,
                "scenario": s.id,
                "iteration": i,
                "kind": s.kind,
                "messages": [],
                "parsed": [],
                "debrief": None,
                "status": "running",
                "error": None,
                "rubric": None,
                "rubric_error": None,
            }
            for s, i in todo
        ]

        positions = {sid: n for n, sid in enumerate(self.data.scenario_ids)}

        def ask(indices: list[int], temperature: float, step: int) -> list[str | CareError]:
            # a seed per scenario, iteration and step: the same transcripts whatever the batching
            requests = [
                GenerationRequest(
                    messages=tuple(Message(**m) for m in states[k]["messages"]),
                    max_tokens=self.settings["max_tokens"],
                    temperature=temperature,
                    seed=self.seed + 100_000 * todo[k][1] + 1000 * step + positions.get(todo[k][0].id, 0),
                    purpose="eqbench3 respondent",
                )
                for k in indices
            ]
            results = backend.generate(requests)
            return [r.error if r.error is not None else r.completions[0].text.strip() for r in results]

        def advance(indices: list[int], temperature: float, step: int, store: Callable[[int, str], None]) -> None:
            for k, reply in zip(indices, ask(indices, temperature, step), strict=True):
                if isinstance(reply, CareError):
                    states[k].update(status="error", error=str(reply))
                else:
                    store(k, reply)

        for turn in range(max(len(s.prompts) for s, _ in todo)):
            live = [k for k, (s, _) in enumerate(todo) if states[k]["status"] == "running" and turn < len(s.prompts)]
            for k in live:
                scenario = todo[k][0]
                states[k]["messages"].append(
                    {"role": "user", "content": turn_message(self.data, scenario, scenario.prompts[turn])}
                )

            def keep_turn(k: int, reply: str) -> None:
                states[k]["messages"].append({"role": "assistant", "content": reply})
                states[k]["parsed"].append(parse_sections(todo[k][0].kind, reply))

            if live:
                advance(live, self.settings["temperature"], turn, keep_turn)
        debriefs = [k for k, (s, _) in enumerate(todo) if states[k]["status"] == "running" and s.debriefed]
        if debriefs:
            requests_messages = {k: list(states[k]["messages"]) for k in debriefs}
            for k in debriefs:
                states[k]["messages"].append({"role": "user", "content": self.data.templates["debrief"]})

            def keep_debrief(k: int, reply: str) -> None:
                states[k]["debrief"] = reply

            advance(debriefs, self.settings["debrief_temperature"], 999, keep_debrief)
            for k in debriefs:
                states[k]["messages"] = requests_messages[k]  # the debrief prompt is not part of the transcript
        for state in states:
            if state["status"] == "running":
                replies = [m["content"] for m in state["messages"] if m["role"] == "assistant"]
                long_enough = any(len(r.strip()) >= MIN_REPLY_CHARS for r in replies)
                state["status"] = "complete" if long_enough else "incomplete"
        self._clock("transcript", clocks, len(todo))
        return states

    def _clock(self, what: str, since: tuple[float, float], items: int) -> None:
        totals = self._timing[what]
        totals[0] += time.perf_counter() - since[0]
        totals[1] += time.process_time() - since[1]
        totals[2] += items

    def _verdicts(
        self,
        prompts: Sequence[str],
        schemas: Sequence[dict[str, Any]],
        parse: Callable[[int, Completion], Any],
        what: str,
    ) -> list[Any]:
        requests = [
            GenerationRequest(
                messages=(Message(role="user", content=prompt),),
                json_schema=schema,
                max_tokens=self.judge_max_tokens,
                temperature=0.0,
                seed=self.seed,
                purpose=what,
            )
            for prompt, schema in zip(prompts, schemas, strict=True)
        ]
        clocks = time.perf_counter(), time.process_time()
        out = drive(parse_plan(requests, parse, what=what, max_attempts=self.max_attempts), self.judge)
        self._clock(what, clocks, len(requests))
        return out

    def _judge_rubrics(self, records: Sequence[dict[str, Any]]) -> None:
        """Ask the rubric verdict of finished transcripts; store scores or the error in each record."""
        scenarios = {s.id: s for s in self.data.scenarios}
        criteria = [self.data.criteria["analysis" if r["kind"] == "analysis" else "standard"] for r in records]
        prompts = [
            rubric_prompt(self.data, scenarios[r["scenario"]], r["messages"], r["parsed"], r["debrief"])
            for r in records
        ]
        schemas = [rubric_schema(c, self.max_reasoning_chars) for c in criteria]
        verdicts = self._verdicts(
            prompts, schemas, lambda i, completion: parse_rubric_scores(completion.text, criteria[i]), "rubric verdict"
        )
        for record, verdict in zip(records, verdicts, strict=True):
            if isinstance(verdict, CareError):
                record.update(rubric=None, rubric_error=str(verdict))
            else:
                record.update(rubric={"scores": verdict, "score": task_rubric_score(verdict)}, rubric_error=None)

    def _compare(self, todo: Sequence[Comparison]) -> list[dict[str, Any]]:
        """Ask the pairwise verdicts; ``a`` is respondent A0493 in the forward order, A0488 reversed."""
        prompts, schemas, criteria = [], [], []
        for (_, _, _, _, order), scenario, (side_a, side_b) in todo:
            first, second = (side_a, side_b) if order == "forward" else (side_b, side_a)
            template = self.data.templates["pairwise_analysis" if scenario.kind == "analysis" else "pairwise"]
            criteria.append(pairwise_criteria(template))
            prompts.append(pairwise_prompt(self.data, scenario, first, second))
            schemas.append(pairwise_schema(criteria[-1], self.max_reasoning_chars))
        verdicts = self._verdicts(
            prompts, schemas, lambda i, completion: parse_pairwise(completion.text, criteria[i]), "pairwise verdict"
        )
        records = []
        for ((a, b, sid, it, order), _, _), verdict in zip(todo, verdicts, strict=True):
            record: dict[str, Any] = {"a": a, "b": b, "scenario": sid, "iteration": it, "order": order}
            if isinstance(verdict, CareError):
                record.update(verdict=None, error=str(verdict))
            else:
                outcome, plus_first, plus_second = plus_tally(verdict)
                outcome_a, plus_a, plus_b = (
                    (outcome, plus_first, plus_second) if order == "forward" else (1 - outcome, plus_second, plus_first)
                )
                record.update(
                    verdict=verdict,
                    error=None,
                    outcome_a=outcome_a,
                    plus_a=plus_a,
                    plus_b=plus_b,
                    fraction_a=pairwise_fraction(outcome_a, plus_a, plus_b),
                )
            records.append(record)
        return records

    # -- report ---------------------------------------------------------------------------------

    @staticmethod
    def _rubric_score(sample: Sequence[dict[str, Any]]) -> float | None:
        return mean(5 * r["rubric"]["score"] for r in sample)

    @staticmethod
    def _mean_fraction(sample: Sequence[list[dict[str, Any]]]) -> float | None:
        return mean(c["fraction_a"] for unit in sample for c in unit)

    def _report(
        self,
        records: Sequence[dict[str, Any]],
        comparisons: Sequence[dict[str, Any]],
        pairs: Sequence[tuple[str, str]],
        meta: dict[str, Any],
    ) -> EqBench3Report:
        rubric: dict[str, Estimate] = {}
        criteria: dict[str, dict[str, float | None]] = {}
        counts: dict[str, dict[str, int]] = {}
        for label in self.policies:
            mine = [r for r in records if r["policy"] == label]
            scored = [r for r in mine if r["rubric"] is not None and r["rubric"]["score"] is not None]
            counts[label] = {s: sum(1 for r in mine if r["status"] == s) for s in ("complete", "incomplete", "error")}
            counts[label]["rubric_error"] = sum(1 for r in mine if r["status"] == "complete" and r["rubric"] is None)
            rubric[label] = bootstrap(scored, self._rubric_score, resamples=self.resamples, seed=self.seed)
            names = sorted({c for r in scored for c in r["rubric"]["scores"]})
            criteria[label] = {
                c: mean(r["rubric"]["scores"][c] for r in scored if c in r["rubric"]["scores"]) for c in names
            }
        table: dict[str, dict[str, Any]] = {}
        for a, b in pairs:
            mine = [c for c in comparisons if (c["a"], c["b"]) == (a, b)]
            units: dict[tuple[str, int], list[dict[str, Any]]] = {}
            for c in mine:
                units.setdefault((c["scenario"], c["iteration"]), []).append(c)
            table[f"{a} vs {b}"] = {
                "fraction": bootstrap(
                    list(units.values()), self._mean_fraction, resamples=self.resamples, seed=self.seed
                ),
                "comparisons": len(mine),
                "won": sum(1 for c in mine if c["outcome_a"] == 1.0),
                "tied": sum(1 for c in mine if c["outcome_a"] == 0.5),
                "lost": sum(1 for c in mine if c["outcome_a"] == 0.0),
            }
        report = EqBench3Report(rubric=rubric, criteria=criteria, pairwise=table, counts=counts, meta=meta)
        (self.out_dir / "eqbench3.json").write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n")
        (self.out_dir / "eqbench3.md").write_text(report.markdown() + "\n", encoding="utf-8")
        return report
