"""``care eval sim-user``'s runner: episodes against the emotion-tracking simulated user, resumable, with a report.

An output directory holds ``records.jsonl`` (one episode a line, appended as batches finish; a
re-run rolls out only the profiles without a finished episode), ``run.json`` (the policy's,
simulator's and judge's identities and the thresholds; another setting is refused) and
``simuser.json`` / ``simuser.md``: success rate, failure rate and mean final emotion with
bootstrap intervals over episodes, the optional independent judge's mean score, errors apart.
With a :class:`~care_lab.simulation.consistency.StateReader`, every policy reply is read for the
state it acknowledges and each episode gets its consistency score (tracking) beside its emotion
change (improvement); the report then has one row per simulated-user type
(:mod:`care_lab.simulation.adversarial`), cooperative and adversarial side by side.

Examples:
    >>> from care_sdk.testing import ScriptedBackend
    >>> import tempfile
    >>> turn = '{"reason": "Heard.", "emotion": 90, "reply": "Thanks.", "end": false}'
    >>> sim = EmotionSimulator(ScriptedBackend(lambda r: turn))
    >>> runner = SimUserRunner(BackendPolicy(ScriptedBackend(lambda r: "I hear you.")), sim, out_dir=tempfile.mkdtemp())
    >>> p = UserProfile(id="p1", source="demo", persona="", situation="", goal="", opening="I'm lost.")
    >>> report = runner.run([p])
    >>> report.metrics["success_rate"].value, report.metrics["mean_final_emotion"].value
    (1.0, 90.0)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from care_lab._run_dir import RECORDS, check_identity, file_hashes, load_records, run_meta
from care_lab.bench.metrics import Estimate, bootstrap, mean
from care_lab.data.roles import data_role
from care_lab.evals.simuser import EmotionSimulator, SimEpisode, run_sim_episodes
from care_lab.simulation.adversarial import ADVERSARIAL_PROMPT_VERSION
from care_lab.simulation.consistency import StateReader
from care_lab.simulation.episodes import BackendPolicy
from care_lab.simulation.judge import DialogueJudge
from care_lab.simulation.profiles import UserProfile
from care_sdk.errors import CareError
from care_sdk.jsonl import replace_jsonl
from care_sdk.types import Message

__all__ = ["SimUserReport", "SimUserRunner"]


@dataclass
class SimUserReport:
    """The outcome of a simulated-user run.

    Examples:
        >>> SimUserReport(metrics={}, meta={}, counts={"success": 1}).to_json()["counts"]
        {'success': 1}
    """

    metrics: dict[str, Estimate]
    """``success_rate``, ``failure_rate``, ``mean_final_emotion`` and, with a judge, ``mean_judge_score``."""
    meta: dict[str, Any]
    """Models, thresholds, data hashes, timings."""
    counts: dict[str, int]
    """Episodes per status (``success``, ``failure``, ``neither``, ``error``), unjudged ones and, with a
    reader, replies whose reading failed (``unread``)."""
    by_user_type: dict[str, dict[str, Estimate]] = field(default_factory=dict)
    """Per simulated-user type: ``success_rate``, ``failure_rate``, ``mean_final_emotion``,
    ``mean_emotion_change`` and, with a reader, ``consistency`` and ``direction_agreement``."""
    scored: int = 0
    """Episodes rolled out in this run."""
    reused: int = 0
    """Episodes reused from an earlier run."""

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return {
            **self.meta,
            "counts": self.counts,
            "episodes_scored": self.scored,
            "episodes_reused": self.reused,
            "metrics": {k: v.to_json() for k, v in self.metrics.items()},
            "by_user_type": {t: {k: v.to_json() for k, v in m.items()} for t, m in self.by_user_type.items()},
        }

    def markdown(self) -> str:
        """The report as markdown."""
        lines = ["| metric | n | value [95 % CI] |", "|---|---|---|"]
        lines += [f"| {name.replace('_', ' ')} | {est.n} | {est.format()} |" for name, est in self.metrics.items()]
        settings = self.meta.get("settings", {})
        if self.by_user_type:
            names = list(next(iter(self.by_user_type.values())))
            lines += ["", "| user type | " + " | ".join(n.replace("_", " ") for n in names) + " |"]
            lines.append("|---|" + "---|" * len(names))
            for user_type, row in self.by_user_type.items():
                cells = [f"{row[n].format()} (n={row[n].n})" for n in names]
                lines.append(f"| {user_type} | " + " | ".join(cells) + " |")
        lines += [
            "",
            f"Success: final emotion >= {settings.get('success')}; failure: <= {settings.get('failure')}; "
            f"start {settings.get('initial_emotion')}, at most {settings.get('max_turns')} policy turns. "
            f"Episodes: {', '.join(f'{k} {v}' for k, v in self.counts.items())} (errors are left out of the rates).",
            "",
            f"- policy: `{self.meta.get('policy')}`",
            f"- simulator: `{self.meta.get('simulator')}`",
            f"- judge: `{self.meta.get('judge')}`",
        ]
        if self.meta.get("reader"):
            lines.append(f"- state reader: `{self.meta['reader']}`")
        lines += [f"- data `{path}`: `{digest}`" for path, digest in self.meta.get("data", {}).items()]
        if self.meta.get("seconds_per_episode") is not None:
            lines.append(
                f"\nTime: {self.meta['seconds_per_episode']:.1f} s per episode "
                f"({self.meta['cpu_seconds_per_episode']:.1f} s of processor time) in this run."
            )
        return "\n".join(lines)


class SimUserRunner:
    """Rolls a policy out against :class:`EmotionSimulator` users and reports the SAGE-style metrics.

    Args:
        policy: the policy under test.
        simulator: the simulated user (its backend set apart from the policy's).
        judge: an optional independent judge of each finished episode.
        reader: reads every policy reply for the state it acknowledges (the consistency score).
        out_dir: where records and reports go; an existing run there is resumed.
        max_turns: policy turns per episode, as in :func:`run_sim_episodes`.
        initial_emotion: the users' starting emotion, as in :func:`run_sim_episodes`.
        success: an episode succeeds at or above this emotion.
        failure: an episode fails at or below this emotion.
        system_prompt: the policy's system prompt.
        batch_size: episodes rolled out together (and per checkpoint).
        resamples: bootstrap resamples.
        seed: bootstrap seed.
        sources: data files to hash into the report.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> import tempfile
        >>> b = ScriptedBackend(lambda r: "x")
        >>> runner = SimUserRunner(BackendPolicy(b), EmotionSimulator(b), out_dir=tempfile.mkdtemp())
        >>> runner.identity()["settings"]["success"]
        80
    """

    def __init__(
        self,
        policy: BackendPolicy,
        simulator: EmotionSimulator,
        *,
        out_dir: str | Path,
        judge: DialogueJudge | None = None,
        reader: StateReader | None = None,
        max_turns: int = 5,
        initial_emotion: int = 30,
        success: int = 80,
        failure: int = 10,
        system_prompt: str | None = None,
        batch_size: int = 8,
        resamples: int = 1000,
        seed: int = 0,
        sources: Sequence[Path] = (),
    ) -> None:
        self.policy, self.simulator, self.judge, self.reader = policy, simulator, judge, reader
        self.out_dir = Path(out_dir)
        self.max_turns, self.initial_emotion, self.success, self.failure = max_turns, initial_emotion, success, failure
        self.system_prompt = system_prompt
        self.settings: dict[str, Any] = {
            "max_turns": max_turns,
            "initial_emotion": initial_emotion,
            "success": success,
            "failure": failure,
            "system_prompt": system_prompt,
        }
        self.batch_size = max(1, batch_size)
        self.resamples, self.seed = resamples, seed
        self.sources = list(sources)

    def identity(self) -> dict[str, Any]:
        """What the records depend on: the three models and the settings."""
        policy = self.policy
        return {
            "policy": (
                f"{policy.backend.identity}|t={policy.temperature}|seed={policy.seed}|max_tokens={policy.max_tokens}"
            ),
            "simulator": self.simulator.identity,
            "judge": self.judge.identity if self.judge is not None else None,
            "settings": self.settings,
            **({"reader": self.reader.identity} if self.reader is not None else {}),
        }

    def run(
        self,
        profiles: Sequence[UserProfile],
        *,
        on_start: Callable[[int], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> SimUserReport:
        """Roll out what is missing, then write ``simuser.json`` and ``simuser.md``."""
        started = time.perf_counter()
        identity = self.identity()
        if any(p.user_type != "cooperative" for p in profiles):
            identity["user_behaviours"] = ADVERSARIAL_PROMPT_VERSION
        check_identity(self.out_dir, identity, merge="")
        path = self.out_dir / RECORDS
        store = load_records(path, lambda r: str(r["id"]))
        todo = [p for p in profiles if store.get(p.id, {}).get("status") in (None, "error")]
        if on_start:
            on_start(len(todo))
        wall, cpu = time.perf_counter(), time.process_time()
        with path.open("a", encoding="utf-8") as handle:
            for start in range(0, len(todo), self.batch_size):
                chunk = todo[start : start + self.batch_size]
                episodes = run_sim_episodes(
                    chunk,
                    self.policy,
                    self.simulator,
                    max_turns=self.max_turns,
                    initial_emotion=self.initial_emotion,
                    success=self.success,
                    failure=self.failure,
                    system_prompt=self.system_prompt,
                )
                records = [e.to_json() for e in episodes]
                if self.judge is not None:
                    verdicts = self.judge.judge_batch([[Message(**m) for m in r["messages"]] for r in records])
                    for record, verdict in zip(records, verdicts, strict=True):
                        failed = isinstance(verdict, CareError)
                        record["judge_score"] = None if failed else verdict.score  # type: ignore[union-attr]
                        record["judge_reason"] = None if failed else verdict.reason  # type: ignore[union-attr]
                        record["judge_error"] = str(verdict) if failed else None
                if self.reader is not None:
                    self._read(episodes, records)
                for record in records:
                    store[record["id"]] = record
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                handle.flush()
                if progress:
                    progress(len(chunk))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        ids = [p.id for p in profiles]
        replace_jsonl(path, [store[i] for i in ids if i in store] + [r for k, r in store.items() if k not in set(ids)])
        done = [store[i] for i in ids if i in store]
        meta = {
            **run_meta("care-eval-sim-user", time.perf_counter() - started),
            **identity,
            "profiles": len(profiles),
            "user_types": list(dict.fromkeys(p.user_type for p in profiles)),
            "data": file_hashes(self.sources),
            **_data_role(self.sources),
            "resamples": self.resamples,
            "seed": self.seed,
            "seconds_per_episode": wall / len(todo) if todo else None,
            "cpu_seconds_per_episode": cpu / len(todo) if todo else None,
        }
        return self._report(done, meta, scored=len(todo), reused=len(profiles) - len(todo))

    def _read(self, episodes: Sequence[SimEpisode], records: list[dict[str, Any]]) -> None:
        """Read every policy reply of the episodes (one batch) and add each episode's consistency."""
        assert self.reader is not None
        replies = [[m.content for m in e.messages if m.role == "assistant"] for e in episodes]
        # reply t answers the user at the emotion before it: the initial one, then each rated one
        states = [
            [e.initial_emotion, *(int(t["emotion"]) for t in e.trace)][: len(r)]
            for e, r in zip(episodes, replies, strict=True)
        ]
        for episode, record, (score, mine) in zip(
            episodes, records, self.reader.score_episodes(replies, states), strict=True
        ):
            record["readings"] = [r.model_dump() if not isinstance(r, CareError) else {"error": str(r)} for r in mine]
            record["consistency"] = score.to_json()
            record["emotion_change"] = episode.final_emotion - episode.initial_emotion

    def _report(
        self, records: list[dict[str, Any]], meta: dict[str, Any], *, scored: int, reused: int
    ) -> SimUserReport:
        counts = {s: sum(1 for r in records if r["status"] == s) for s in ("success", "failure", "neither", "error")}
        valid = [r for r in records if r["status"] != "error"]

        def rate(status: str) -> Callable[[Sequence[dict[str, Any]]], float | None]:
            return lambda sample: mean(float(r["status"] == status) for r in sample)

        def stat(key: str) -> Callable[[Sequence[dict[str, Any]]], float | None]:
            return lambda sample: mean(float(r[key]) for r in sample)

        def change(sample: Sequence[dict[str, Any]]) -> float | None:
            return mean(float(r["final_emotion"] - r["initial_emotion"]) for r in sample)

        def read_mean(key: str) -> Callable[[Sequence[dict[str, Any]]], float | None]:
            return lambda sample: mean(float(r["consistency"][key]) for r in sample)

        boot = {"resamples": self.resamples, "seed": self.seed}
        metrics = {
            "success_rate": bootstrap(valid, rate("success"), **boot),  # type: ignore[arg-type]
            "failure_rate": bootstrap(valid, rate("failure"), **boot),  # type: ignore[arg-type]
            "mean_final_emotion": bootstrap(valid, stat("final_emotion"), **boot),  # type: ignore[arg-type]
        }
        if self.judge is not None:
            judged = [r for r in records if r.get("judge_score") is not None]
            counts["unjudged"] = len(records) - len(judged)
            metrics["mean_judge_score"] = bootstrap(judged, stat("judge_score"), **boot)  # type: ignore[arg-type]
        if self.reader is not None:
            counts["unread"] = sum(int(r.get("consistency", {}).get("unread", 0)) for r in records)
        types = list(dict.fromkeys(str(r.get("user_type", "cooperative")) for r in records))
        by_type: dict[str, dict[str, Estimate]] = {}
        if self.reader is not None or types != ["cooperative"]:
            for user_type in types:
                mine = [r for r in valid if r.get("user_type", "cooperative") == user_type]
                row = {
                    "success_rate": bootstrap(mine, rate("success"), **boot),  # type: ignore[arg-type]
                    "failure_rate": bootstrap(mine, rate("failure"), **boot),  # type: ignore[arg-type]
                    "mean_final_emotion": bootstrap(mine, stat("final_emotion"), **boot),  # type: ignore[arg-type]
                    "mean_emotion_change": bootstrap(mine, change, **boot),  # type: ignore[arg-type]
                }
                if self.reader is not None:
                    for name, key in (("consistency", "tracking"), ("direction_agreement", "direction")):
                        read = [r for r in mine if r.get("consistency", {}).get(key) is not None]
                        row[name] = bootstrap(read, read_mean(key), **boot)  # type: ignore[arg-type]
                by_type[user_type] = row
        report = SimUserReport(metrics, meta, counts, scored=scored, reused=reused, by_user_type=by_type)
        (self.out_dir / "simuser.json").write_text(json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n")
        (self.out_dir / "simuser.md").write_text(report.markdown() + "\n", encoding="utf-8")
        return report


def _data_role(sources: Sequence[Path]) -> dict[str, Any]:
    """The profiles' declared data role (``None`` when undeclared or mixed) and ``test_reads``: 0 for data
    that is not a test set (this command records no test read; ``None`` for test data)."""
    roles = {data_role(p) for p in sources}
    role = roles.pop() if len(roles) == 1 else None
    if role == "by-record":
        role = None
    return {"role": role, "test_reads": 0 if role in ("train", "selection", "eval-only") else None}
