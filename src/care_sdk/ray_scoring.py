"""Scoring logged dialogues on a Ray cluster with Ray Data: the records of ``care score``, from actors.

Each actor (one CPU, one thread) builds its own reward once, in its own process, from a picklable
recipe: the keyword arguments of :meth:`care_sdk.AdaptiveReward.from_backend` (a bundled model on
one thread), or any picklable function that returns a reward; then it scores batches of turns with
:meth:`ray.data.Dataset.map_batches`; the driver reads the input, reports malformed lines (file and
line), appends each record to the output as it arrives and finally rewrites the output in input
order, exactly as :func:`care_sdk.score_files.score_file` does. A re-run with the same output
reuses every scored record, so an interrupted run loses nothing. Ray is an optional extra
(``pip install "care-sdk[ray]"``); importing this module does not import it.

Examples:
    >>> from care_sdk.testing import ScriptedBackend
    >>> build_in_actor({"backend": ScriptedBackend([]), "variant": "fixed_rubric"}).variant
    'fixed_rubric'
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from care_sdk.errors import InputError, MissingDependencyError
from care_sdk.score_files import RecordSink, ScoreSummary, finish_scoring, plan_scoring, scored_by, turn_record
from care_sdk.types import as_messages

if TYPE_CHECKING:
    import ray.data

    from care_sdk.reward import AdaptiveReward

__all__ = ["RewardRecipe", "build_in_actor", "connect", "one_thread", "require_ray", "score_dataset", "score_file"]

RewardRecipe = Mapping[str, Any] | Callable[[], "AdaptiveReward"]
"""How each actor builds its reward: the keyword arguments of :meth:`~care_sdk.AdaptiveReward.from_backend`,
or a function of no arguments that returns a reward; picklable either way."""


def require_ray() -> Any:
    """The ``ray`` module with ``ray.data`` loaded, or the error that names the extra to install.

    Raises:
        MissingDependencyError: Ray is not installed (``pip install "care-sdk[ray]"``).

    Examples:
        >>> require_ray().data is not None  # doctest: +SKIP
        True
    """
    try:
        import ray
        import ray.data
    except ImportError:
        raise MissingDependencyError("ray", extra="ray") from None
    return ray


def one_thread(spec: Any, role: str, threads: int = 1) -> Any:
    """``spec`` itself, or for the bundled model (``default``) its backend for ``role`` on ``threads``
    threads (decoding and prompts), as an actor holding one CPU should run it.

    Examples:
        >>> one_thread("openai:gpt-4o-mini", "evaluator")
        'openai:gpt-4o-mini'
    """
    from care_sdk.backends import resolve_backend, spec_per_role

    if not spec_per_role(spec):  # the bundled model (``default``): one backend per role
        return spec
    return resolve_backend(spec, role=role, n_threads=threads, n_threads_batch=threads)


def build_in_actor(recipe: RewardRecipe | None = None) -> AdaptiveReward:
    """The reward a ``recipe`` describes, built in the calling process (an actor's) with a one-thread
    bundled model: :meth:`~care_sdk.AdaptiveReward.from_backend` on the recipe's keyword arguments
    (each role's bundled spec turned into its backend on one thread, the generator's only when the
    variant has one), or the recipe called. ``None`` is full CARE on the bundled model.

    Examples:
        >>> from care_sdk.testing import ScriptedBackend
        >>> build_in_actor({"backend": ScriptedBackend([]), "variant": "uniform_weights"}).weights
        'uniform'
    """
    from care_sdk.reward import AdaptiveReward
    from care_sdk.variants import needs_generator

    if callable(recipe):
        return recipe()
    options = dict(recipe or {})
    backend = options.get("backend", "default")
    for role in ("generator", "evaluator"):
        if role == "evaluator" or needs_generator(options.get("variant", "care")):
            options[f"{role}_backend"] = one_thread(options.get(f"{role}_backend") or backend, role)
    return AdaptiveReward.from_backend(**options)


class _TurnScorer:
    """The Ray Data actor: builds its reward once, then scores batches of turns into record lines."""

    def __init__(self, recipe: RewardRecipe | None) -> None:
        os.environ["OMP_NUM_THREADS"] = "1"
        self.reward = build_in_actor(recipe)
        self.producer = scored_by(self.reward)

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        ids = [str(i) for i in batch["id"]]
        turns = [int(t) for t in batch["turn"]]
        items = [(as_messages(json.loads(c)), str(r)) for c, r in zip(batch["context"], batch["reply"], strict=True)]
        profiles = [json.loads(p) if p else None for p in batch.get("profile", [""] * len(items))]
        results = self.reward.score_batch(items, profiles)
        records = [
            json.dumps({**turn_record(i, t, result), "scored_by": self.producer}, ensure_ascii=False)
            for i, t, result in zip(ids, turns, results, strict=True)
        ]
        return {"id": ids, "turn": turns, "record": records}


def connect(address: str | None = "auto", **init_options: Any) -> None:
    """Join a Ray cluster (``"auto"``: the one this machine belongs to; ``"ray://HOST:PORT"`` or
    ``"HOST:PORT"``: that one; ``None``: a new local one), unless Ray is already initialised.

    Raises:
        MissingDependencyError: Ray is not installed.

    Examples:
        >>> connect(None, num_cpus=2, include_dashboard=False)  # doctest: +SKIP
    """
    ray = require_ray()
    if not ray.is_initialized():
        ray.init(address=address, **init_options)


def score_dataset(
    dataset: ray.data.Dataset,
    reward: RewardRecipe | None = None,
    *,
    workers: int = 2,
    batch_size: int = 8,
) -> ray.data.Dataset:
    """Score a Ray Dataset of turns: rows ``id``, ``turn``, ``context`` (the messages before the
    reply, as JSON text), ``reply`` and optionally ``profile`` (the user's profile as JSON text,
    empty for none); returns rows ``id``, ``turn`` and ``record`` (the
    ``care score`` record as one JSON line). Lazy, like every Ray Data transform.

    Args:
        dataset: the turns.
        reward: how each actor builds its reward, once (see :func:`build_in_actor`; default: full
            CARE on the bundled model).
        workers: actors, one CPU each.
        batch_size: turns per actor call (and per backend batch).

    Examples:
        >>> import ray.data  # doctest: +SKIP
        >>> rows = [{"id": "a", "turn": 1, "context": '[{"role": "user", "content": "hi"}]', "reply": "hello"}]
        >>> score_dataset(ray.data.from_items(rows)).take(1)[0]["record"][:9]  # doctest: +SKIP
        '{"id": "a'
    """
    ray = require_ray()
    return dataset.map_batches(
        _TurnScorer,
        fn_constructor_args=(reward,),
        batch_size=max(1, batch_size),
        batch_format="default",
        compute=ray.data.ActorPoolStrategy(size=max(1, workers)),
        num_cpus=1,
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
    )


def score_file(
    input_path: str | Path,
    out: str | Path | None = None,
    *,
    reward: RewardRecipe | None = None,
    address: str | None = "auto",
    workers: int = 2,
    batch_size: int = 8,
    on_input_error: Callable[[InputError], None] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> ScoreSummary:
    """Score every assistant turn of a JSONL dialogue file on a Ray cluster: the same records,
    resume and bad-input handling as :func:`care_sdk.score_files.score_file`.

    Args:
        input_path: dialogues, one ``{"id": ..., "messages": [...]}`` per line.
        out: output JSONL; when it exists, its scored records are reused (resume).
        reward: how each actor builds its reward (see :func:`build_in_actor`; default: full CARE
            on the bundled model).
        address: the cluster (see :func:`connect`); ignored when Ray is already initialised.
        workers: actors, one CPU each.
        batch_size: turns per actor call.
        on_input_error: called for each malformed line (which is skipped).
        on_record: called with each newly scored record.
        progress: called with the number of turns finished.

    Raises:
        MissingDependencyError: Ray is not installed.

    Examples:
        >>> summary = score_file("examples/dialogues.jsonl", "scores.jsonl", address=None)  # doctest: +SKIP
        >>> summary.ok  # doctest: +SKIP
        True
    """
    summary, turns, done, todo = plan_scoring(input_path, out, on_input_error)
    out_path = Path(out) if out is not None else None
    with RecordSink(done, out_path, on_record=on_record, progress=progress) as sink:
        if not todo:
            return finish_scoring(summary, turns, done, out_path)
        ray = require_ray()
        connect(address)
        rows = [
            {
                "id": str(d.id),
                "turn": t.index,
                "context": json.dumps([m.model_dump(mode="json") for m in t.context], ensure_ascii=False),
                "reply": t.reply,
                "profile": d.profile.model_dump_json() if d.profile is not None else "",
            }
            for d, t in todo
        ]
        scored = score_dataset(ray.data.from_items(rows), reward, workers=workers, batch_size=batch_size)
        for batch in scored.iter_batches(batch_size=None, batch_format="default"):
            sink.add_batch(json.loads(line) for line in batch["record"])
    return finish_scoring(summary, turns, done, out_path)
