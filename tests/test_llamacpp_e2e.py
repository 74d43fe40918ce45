"""End to end on the real bundled SmolLM2-135M-Instruct via llama.cpp."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from care_sdk import (
    AdaptiveReward,
    Backend,
    Dimension,
    GenerationRequest,
    Message,
    Rubric,
    RubricEvaluator,
    RubricGenerator,
)
from care_sdk.prompts import rubric_schema
from care_sdk.testing import RecordingBackend
from scored import records_without_provenance

pytestmark = pytest.mark.slow

CONTEXT = [
    {"role": "user", "content": "I got laid off this morning after twelve years at the same company."},
    {"role": "assistant", "content": "That's a huge shock. How are you feeling right now?"},
    {"role": "user", "content": "Numb. And scared about the mortgage, my wife's hours were just cut too."},
]


def test_rubric_is_schema_valid_and_normalised(llama_backend: Backend) -> None:
    generator = RubricGenerator(llama_backend, cache=False)
    raw = llama_backend.generate([generator.request(CONTEXT)])[0].text
    data = json.loads(raw)
    schema = rubric_schema()
    assert set(data) == set(schema["required"])
    for dim in Dimension:
        assert len(data["criteria"][dim.value]) == 2
        assert all(8 <= len(c) <= 200 for c in data["criteria"][dim.value])
    rubric = generator.generate(CONTEXT)
    assert sum(rubric.weights.values()) == pytest.approx(1.0)
    assert all(w >= 0 for w in rubric.weights.values())
    assert {c.dimension for c in rubric.criteria} == set(Dimension)


def test_a_rubric_the_window_has_no_room_for_is_written_on_fewer_messages(model_path: Path) -> None:
    """A prompt that fits the window with too little room left for the rubric: llama.cpp starts it
    and stops where the window ends, and the generator drops the oldest messages instead of
    failing every attempt on the same cut-off reply."""
    from care_sdk.backends.llamacpp import LlamaCppBackend

    with LlamaCppBackend(model_path, n_ctx=1024, n_threads=1) as backend:
        window = backend.llama.n_ctx()
        generator = RubricGenerator(RecordingBackend(backend), cache=False, max_attempts=1, max_context_messages=None)
        history: list[dict[str, str]] = []
        story = "I keep going over the argument with my brother about our father's care and the money it costs. "
        while True:  # grow the history until its prompt leaves 10-60 tokens of the window
            history = [*history, {"role": "user", "content": story}, {"role": "assistant", "content": "Go on."}]
            context = [*history, {"role": "user", "content": "I don't know what to do now."}]
            room = window - len(backend._prompt_ids(generator.request(context)))
            if room < 60:
                break
        assert 10 <= room < 60, room
        rubric = generator.generate(context)
        sent = generator.backend.requests  # type: ignore[attr-defined]
        assert len(sent) >= 2 and len(sent[-1].messages[-1].content) < len(sent[0].messages[-1].content)
        assert rubric.criteria and sum(rubric.weights.values()) == pytest.approx(1.0)


def test_weights_load_into_plain_cpu_buffers(llama_backend: Backend) -> None:
    # llama.cpp's extra buffer types (AMX on recent Xeons) crash the first decode of the bundled
    # Q4_1 model; every other test here decodes, so on such a CPU they would die with the process
    assert llama_backend.llama.model_params.use_extra_bufts is False  # type: ignore[attr-defined]


def test_n_threads_holds_for_prompts_too(model_path: Path) -> None:
    from care_sdk.backends.llamacpp import LlamaCppBackend

    # llama.cpp's own default for prompt processing is every core, whatever n_threads says
    with LlamaCppBackend(model_path, n_ctx=256, n_threads=1) as one:
        assert (one.llama.n_threads, one.llama.n_threads_batch) == (1, 1)
    with LlamaCppBackend(model_path, n_ctx=256, n_threads=1, n_threads_batch=2) as mixed:
        assert mixed.llama.n_threads_batch == 2


def _threads_when_pinned(model_path: Path, cores: int) -> list[str]:
    """The decoding and prompt threads of a default backend opened in a process pinned to ``cores`` cores."""
    code = (
        f"import os, sys; os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:{cores}])\n"
        "from care_sdk.backends.llamacpp import LlamaCppBackend\n"
        "with LlamaCppBackend(sys.argv[1], n_ctx=256) as b: print(b.llama.n_threads, b.llama.n_threads_batch)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(model_path)], capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_a_process_pinned_to_one_core_uses_one_thread(model_path: Path) -> None:
    # llama.cpp's defaults count every core of the machine, whatever the process may run on
    assert _threads_when_pinned(model_path, 1) == ["1", "1"]


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores"
)
def test_a_process_on_two_cores_decodes_on_both(model_path: Path) -> None:
    assert _threads_when_pinned(model_path, 2) == ["2", "2"]


def test_same_seed_gives_the_same_rubric(llama_backend: Backend) -> None:
    first = RubricGenerator(llama_backend, seed=3, cache=False).generate(CONTEXT)
    second = RubricGenerator(llama_backend, seed=3, cache=False).generate(CONTEXT)
    assert first == second


def test_eight_completions_share_one_generator_call(llama_backend: Backend) -> None:
    counting = RecordingBackend(llama_backend)
    # one rubric for the eight; the criteria checks may retry that one rubric (criteria_retries more
    # requests, all for this context), so the count is exact with them off and bounded with them on
    reward = AdaptiveReward(RubricGenerator(counting, check_criteria=False), RubricEvaluator(llama_backend))
    replies = [
        "That sounds frightening. What worries you most about the mortgage?",
        "Sorry to hear that.",
        "Twelve years is a long time; losing that so suddenly must feel unreal.",
        "Have you looked at what severance you get?",
        "You should just find another job.",
        "It's okay to feel numb after a shock like this.",
        "Let's list your monthly costs together so the fear has edges.",
        "Cheer up!",
    ]
    rewards = reward([CONTEXT] * 8, replies)
    assert len(counting.requests) == 1
    assert all(r is None or 0.0 <= r <= 1.0 for r in rewards)
    assert sum(r is not None for r in rewards) >= 7
    checked = RubricGenerator(RecordingBackend(llama_backend))
    AdaptiveReward(checked, RubricEvaluator(llama_backend))([CONTEXT] * 8, replies)
    requests = checked.backend.requests  # type: ignore[attr-defined]
    assert 1 <= len(requests) <= 1 + checked.criteria_retries
    assert len({r.messages for r in requests}) == 1  # every retry is for the one context


def test_integer_bounds_hold_in_the_grammar(llama_backend: Backend) -> None:
    """llama.cpp's converter ignores minimum/maximum; the backend writes bounded integers as enums."""
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 3}},
        "required": ["n"],
        "additionalProperties": False,
    }
    request = GenerationRequest(
        messages=(Message(role="user", content='Reply with JSON {"n": 250}.'),),
        json_schema=schema,
        max_tokens=16,
        temperature=1.0,
        n=8,
        seed=0,
    )
    [result] = llama_backend.generate([request])
    assert result.error is None, result.error
    values = [json.loads(c.text)["n"] for c in result.completions]
    assert len(values) == 8 and all(0 <= v <= 3 for v in values), values


def test_score_dialogue_gives_one_result_per_assistant_turn(llama_backend: Backend, examples_file: Path) -> None:
    breakup = next(json.loads(x) for x in examples_file.read_text().splitlines() if '"breakup"' in x)
    messages = [*breakup["messages"], {"role": "user", "content": "Okay. I'll text him tonight."}]
    messages.append({"role": "assistant", "content": "That's a brave step. I hope the call helps."})
    assert sum(m["role"] == "assistant" for m in messages) == 6
    results = AdaptiveReward.from_backend(llama_backend).score_dialogue(messages)
    assert len(results) == 6
    for result in results:
        assert result.reward is not None, result.error
        assert result.rubric is not None and result.evaluation is not None
        assert len(result.evaluation.scores) == len(result.rubric.criteria)


def test_logprob_expected_scores_are_continuous(model_path: Path) -> None:
    from care_sdk.backends.llamacpp import LlamaCppBackend

    with LlamaCppBackend(model_path, n_ctx=2048, logprobs=True) as backend:
        evaluation = RubricEvaluator(backend, use_logprobs=True).evaluate(
            CONTEXT, Rubric.uniform_fixed(), "That sounds frightening. What worries you most?"
        )
    located = [s for s in evaluation.scores if s.distribution is not None]
    assert located, "no score token was located in the logprobs"
    for score in located:
        assert sum(score.distribution or ()) == pytest.approx(1.0)
        assert 1.0 <= score.score <= 5.0


def care(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "care_sdk.cli", *args], capture_output=True, text=True, timeout=900)


def test_care_score_on_the_examples(examples_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "scores.jsonl"
    done = care("score", str(examples_file), "--out", str(out), "--quiet")
    records = [json.loads(x) for x in out.read_text().splitlines()]
    n_turns = sum(
        sum(m["role"] == "assistant" for m in json.loads(x)["messages"][1:])
        for x in examples_file.read_text().splitlines()
    )
    assert len(records) == n_turns
    assert len({(r["id"], r["turn"]) for r in records}) == n_turns
    for record in records:
        assert (record["reward"] is None) != (record["error"] is None)
    assert done.returncode == (0 if all(r["reward"] is not None for r in records) else 1), done.stderr
    assert "mean reward" in done.stdout


def test_care_score_reports_malformed_lines_and_scores_the_rest(tmp_path: Path) -> None:
    good = {"id": "ok", "messages": [*CONTEXT, {"role": "assistant", "content": "That's a lot at once."}]}
    lines = [json.dumps(good), '{"id": "x", "messages": [{"role": "bot", "content": "hi"}]}', "oops"]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    done = care("score", str(path), "--out", str(out), "--quiet")
    assert done.returncode == 1
    assert "in.jsonl:line 2: messages[0].role" in done.stderr
    assert "in.jsonl:line 3: not valid JSON" in done.stderr
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["id"], r["turn"]) for r in records] == [("ok", 1), ("ok", 3)]


def test_care_score_resumes_an_interrupted_run(examples_file: Path, tmp_path: Path) -> None:
    subset = tmp_path / "in.jsonl"
    subset.write_text("\n".join(examples_file.read_text().splitlines()[1:3]) + "\n")  # 2 dialogues, 8 turns
    full = tmp_path / "full.jsonl"
    assert care("score", str(subset), "--out", str(full), "--quiet", "--batch-size", "2").returncode in (0, 1)

    partial = tmp_path / "partial.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "care_sdk.cli",
        "score",
        str(subset),
        "--out",
        str(partial),
        "--quiet",
        "--batch-size",
        "2",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and (not partial.exists() or len(partial.read_text().splitlines()) < 2):
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGINT)
    proc.communicate(timeout=120)
    interrupted = partial.read_text().splitlines()
    assert len(interrupted) >= 2
    if len(interrupted) == 8:
        # The signal landed after the last batch (scoring inside a C call defers it): leave what an
        # interrupt after two records leaves, complete records in order, and resume from there.
        partial.write_text("\n".join(interrupted[:2]) + "\n")
    care("score", str(subset), "--out", str(partial), "--quiet", "--batch-size", "2")
    assert records_without_provenance(partial) == records_without_provenance(full)


def test_a_backend_alive_at_exit_closes_cleanly(tmp_path: Path) -> None:
    # A script that keeps the default backend alive until the interpreter exits, held by a module
    # that is torn down after llama_cpp (as a trainer holding its reward functions does).
    script = tmp_path / "keep_alive.py"
    script.write_text(
        "import json\n"
        "from care_sdk import AdaptiveReward\n"
        "from care_sdk.backends import resolve_backend\n"
        "reward = AdaptiveReward.from_backend(resolve_backend('default'))\n"
        "result = reward.generator.generate_batch(['I failed my exam.'])\n"
        "json._kept_alive = reward\n"
        "print('done', type(result[0]).__name__)\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("done")
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
