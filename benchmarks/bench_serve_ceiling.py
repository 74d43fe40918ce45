"""The reward service's own ceiling: ``care serve`` on a scripted backend against a bare Starlette endpoint.

The backend answers at once (``care_sdk.testing.ScriptedBackend``: a fixed rubric, scores picked by
the reply), so what is measured is the service itself: HTTP, reading and checking the body, the
cross-request batcher, the reward's own logic around the backend calls (prompts, parsing, the
rubric cache) and writing the answer. The baseline is a bare Starlette endpoint under the same
uvicorn settings that reads the same request body, parses it as JSON and answers the very bytes
the service answered for it. Both are driven by the same client (raw HTTP/1.1 over keep-alive
connections, so the client costs little), at the same concurrency, in the same run.

Two services are measured, each against its own bare baseline: ``before``, the package at
``--before`` (a commit, exported with ``git archive``), and ``after``, the package in this checkout.
Each runs in its own processes with ``PYTHONPATH`` pointing at its source. Rows:

- ``/v1/score``, one item per request, 32 connections (one completion per request, as NeMo-Gym's
  ``/verify``, slime's remote reward and ``RemoteReward`` per item send them), with the default
  10 ms batch window, and again with ``--batch-window-ms 0``: the client waits for its answers
  before it sends more, so the window is idle time in every round, a latency the service adds on
  purpose (to gather the completions of one prompt), not work;
- ``/get_reward``, 8 queries per request, 8 connections (an OpenRLHF rank's batch), default window;
- ``/v1/score`` as above, window 0, with an instant reward: the reward's batch calls replaced by a
  lookup of the results it gave before timing, so that row is the service's HTTP layer, body models,
  batcher and answer alone, without the reward's own work.

Beside each service, ``reward alone`` is the same reward's own rate in process, without HTTP: one
``score_batch`` / ``ascore_batch`` call per batch of as many items as the client keeps in flight
(the largest batch the service can form), a bound no service of that reward can pass.

Every measurement repeats ``--reps`` times, bare and service next to each other and the order
turned each time; a ratio is the service's rewards per second over its bare baseline's in the same
repetition, and the file keeps the median and the range. The rubric cache is warm (every request
is sent once before timing), as in a running service where a prompt's completions share a rubric.
Every answer of every timed request is checked against the one recorded before timing.

Usage:
    python benchmarks/bench_serve_ceiling.py --before HEAD~1
    python benchmarks/bench_serve_ceiling.py --before HEAD~1 --quick --out /tmp/serve_ceiling.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_serve import CONTEXTS, REPLIES  # the same synthetic requests as the service benchmark

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "benchmarks" / "results" / "serve_ceiling.json"


@dataclass(frozen=True)
class Row:
    path: str
    items: int
    concurrency: int
    window_ms: float
    instant: bool = False

    @property
    def label(self) -> str:
        instant = ", instant reward" if self.instant else ""
        return f"{self.path} x{self.items}, c={self.concurrency}, window {self.window_ms:g} ms{instant}"

    @property
    def service(self) -> tuple[float, bool]:
        return self.window_ms, self.instant


ROWS = (
    Row("/v1/score", 1, 32, 10.0),
    Row("/v1/score", 1, 32, 0.0),
    Row("/get_reward", 8, 8, 10.0),
    Row("/v1/score", 1, 32, 0.0, instant=True),
)
PATHS = ("/v1/score", "/get_reward")


# -- the servers and the in-process worker (run in their own processes) ------------------------------


def scripted_reward() -> Any:
    """The reward every process holds: a scripted backend that answers at once."""
    from care_sdk import AdaptiveReward, RubricEvaluator, RubricGenerator
    from care_sdk.testing import ScriptedBackend, candidate_reply, evaluation_json, rubric_json

    rubric = rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})

    def answer(request: Any) -> str:
        if request.purpose == "rubric":
            return rubric
        digest = hashlib.sha256(candidate_reply(request).encode()).digest()
        return evaluation_json([1 + b % 5 for b in digest[:6]])

    backend = ScriptedBackend(answer)
    return AdaptiveReward(RubricGenerator(backend), RubricEvaluator(backend))


def _key(context: Any, reply: str) -> tuple[str, str]:
    last = context[-1] if isinstance(context, list) else context
    return getattr(last, "content", None) or last["content"], reply


def make_instant(reward: Any) -> None:
    """Replace the reward's batch calls by a lookup of the results it gives for every pair."""
    done = {_key(c, r): result for (c, r), result in zip(pairs(), reward.score_batch(pairs()), strict=True)}

    def score_batch(items: list[Any]) -> list[Any]:
        return [done[_key(c, r)] for c, r in items]

    async def ascore_batch(items: list[Any]) -> list[Any]:
        return score_batch(items)

    reward.score_batch, reward.ascore_batch = score_batch, ascore_batch


def run_service(port: int, window_ms: float, instant: bool) -> None:
    import care_sdk
    from care_sdk.serve import ServeConfig, serve

    reward = scripted_reward()
    if instant:
        make_instant(reward)
    print(f"READY {care_sdk.__file__}", flush=True)
    serve(reward, ServeConfig(batch_window_ms=window_ms), host="127.0.0.1", port=port, log_level="warning")


def run_bare(port: int, canned_file: Path) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    canned = {bytes.fromhex(k): bytes.fromhex(v) for k, v in json.loads(canned_file.read_text()).items()}

    async def endpoint(request: Request) -> Response:
        raw = await request.body()
        json.loads(raw)  # parse the same request
        return Response(canned[raw], media_type="application/json")  # answer the same JSON

    app = Starlette(routes=[Route(path, endpoint, methods=["POST"]) for path in PATHS])
    print("READY bare", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def pairs() -> list[tuple[list[dict[str, str]], str]]:
    return [([{"role": "user", "content": c}], r) for c in CONTEXTS for r in REPLIES]


def run_alone() -> None:
    """Answer each ``<batch size> <rewards>`` line on stdin with the reward's own rates in process."""
    reward = scripted_reward()
    items = pairs()
    reward.score_batch(items)  # warm the rubric cache, as the services are
    loop = asyncio.new_event_loop()
    print("READY alone", flush=True)
    for line in sys.stdin:
        size, total = (int(x) for x in line.split())
        batches = [[items[(start + i) % len(items)] for i in range(size)] for start in range(0, total, size)]
        started = time.perf_counter()
        for batch in batches:
            reward.score_batch(batch)
        sync = total / (time.perf_counter() - started)

        async def scored(batches: list[list[Any]]) -> None:
            for batch in batches:
                await reward.ascore_batch(batch)

        started = time.perf_counter()
        loop.run_until_complete(scored(batches))
        print(json.dumps({"score_batch": sync, "ascore_batch": total / (time.perf_counter() - started)}), flush=True)


# -- the client -------------------------------------------------------------------------------------

_LENGTH = re.compile(rb"(?i)\r\ncontent-length: *(\d+)")


def http_request(path: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def drive(port: int, requests: list[bytes], concurrency: int) -> tuple[float, list[tuple[int, bytes]]]:
    """Send ``requests`` over ``concurrency`` keep-alive connections; seconds and (status, body) per request."""
    answers: list[tuple[int, bytes]] = [(0, b"")] * len(requests)
    connections = [await asyncio.open_connection("127.0.0.1", port) for _ in range(concurrency)]

    async def worker(k: int) -> None:
        reader, writer = connections[k]
        for i in range(k, len(requests), concurrency):
            writer.write(requests[i])
            head = await reader.readuntil(b"\r\n\r\n")
            found = _LENGTH.search(head)
            assert found is not None, head
            answers[i] = (int(head[9:12]), await reader.readexactly(int(found.group(1))))

    started = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    seconds = time.perf_counter() - started
    for _, writer in connections:
        writer.close()
    return seconds, answers


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Process:
    name: str
    port: int
    process: subprocess.Popen[str]
    first_line: str

    def ask(self, line: str) -> dict[str, float]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return dict(json.loads(self.process.stdout.readline()))


@contextlib.contextmanager
def started(name: str, args: list[str], pythonpath: Path, log_dir: Path, *, listens: bool = True) -> Iterator[Process]:
    """A process of this script in another role, with ``pythonpath`` first on its path."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "OMP_NUM_THREADS": "1"}
    log = log_dir / f"{name}.log"
    command = [sys.executable, str(Path(__file__).resolve()), *args, "--port", str(port)]
    with log.open("w") as err:
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, env=env
        )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        assert first.startswith("READY"), log.read_text()[-3000:]
        deadline = time.monotonic() + 60
        while listens:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline and process.poll() is None, log.read_text()[-3000:]
            time.sleep(0.05)
        yield Process(name, port, process, first.removeprefix("READY "))
    finally:
        if process.stdin is not None:
            process.stdin.close()
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


def bodies(path: str, items: int) -> list[bytes]:
    """The distinct request bodies of a row: every (context, reply) pair, ``items`` per request."""
    out = []
    all_pairs = pairs()
    for start in range(0, len(all_pairs), items):
        group = all_pairs[start : start + items]
        if path == "/v1/score":
            body: dict[str, Any] = {"items": [{"context": c, "reply": r} for c, r in group]}
        else:
            prompts = [f"<|im_start|>user\n{c[0]['content']}<|im_end|>\n<|im_start|>assistant\n" for c, _ in group]
            body = {
                "query": [p + f"{r}<|im_end|>" for p, (_, r) in zip(prompts, group, strict=True)],
                "prompts": prompts,
                "labels": [None] * len(group),
            }
        out.append(json.dumps(body).encode())
    return out


def record_answers(service: Process) -> dict[bytes, bytes]:
    """Send every distinct request of every row once (warming the rubric cache) and keep the answers:
    the bare baseline answers these bytes, and every timed answer is checked against them."""
    recorded: dict[bytes, bytes] = {}
    for row in ROWS:
        distinct = bodies(row.path, row.items)
        _, answers = asyncio.run(drive(service.port, [http_request(row.path, b) for b in distinct], 1))
        assert all(status == 200 for status, _ in answers), answers[0]
        recorded.update({sent: body for sent, (_, body) in zip(distinct, answers, strict=True)})
    return recorded


@dataclass
class Variant:
    name: str
    services: dict[tuple[float, bool], Process]
    bare: Process
    alone: Process
    answers: dict[bytes, bytes]
    checks: dict[str, int] = field(default_factory=lambda: {"timed_answers": 0, "non_200": 0, "different": 0})


def measure(port: int, row: Row, n_requests: int, variant: Variant | None) -> float:
    """Rewards per second of ``n_requests`` requests; the answers are checked when ``variant`` is given."""
    distinct = bodies(row.path, row.items)
    order = [distinct[i % len(distinct)] for i in range(n_requests)]
    seconds, answers = asyncio.run(drive(port, [http_request(row.path, b) for b in order], row.concurrency))
    if variant is not None:
        for (status, body), sent in zip(answers, order, strict=True):
            variant.checks["timed_answers"] += 1
            variant.checks["non_200"] += status != 200
            variant.checks["different"] += status == 200 and json.loads(body) != json.loads(variant.answers[sent])
    return n_requests * row.items / seconds


def run_row(row: Row, variants: list[Variant], n_requests: int, reps: int) -> dict[str, Any]:
    """Every repetition measures each variant's service and bare baseline next to each other."""
    per_rep: dict[str, list[dict[str, float]]] = {v.name: [] for v in variants}
    batch = row.items * row.concurrency
    for rep in range(reps):
        for variant in variants if rep % 2 == 0 else variants[::-1]:
            got: dict[str, float] = {}
            for kind in ("bare", "service") if rep % 2 == 0 else ("service", "bare"):
                if kind == "bare":
                    got["bare"] = measure(variant.bare.port, row, n_requests, None)
                else:
                    got["service"] = measure(variant.services[row.service].port, row, n_requests, variant)
            got["ratio"] = got["service"] / got["bare"]
            if not row.instant:
                alone = variant.alone.ask(f"{batch} {n_requests * row.items}")
                got.update(alone_score_batch=alone["score_batch"], alone_ascore_batch=alone["ascore_batch"])
            per_rep[variant.name].append(got)
            print(
                f"{row.label:58s} rep {rep} {variant.name:6s} bare {got['bare']:8.1f}/s "
                f"service {got['service']:7.1f}/s ratio {got['ratio']:.3f} "
                f"alone {got.get('alone_ascore_batch', 0):7.1f}/s (load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    out: dict[str, Any] = {}
    for name, rows in per_rep.items():
        ratios = [r["ratio"] for r in rows]
        out[name] = {
            "ratio_median": round(statistics.median(ratios), 3),
            "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
            "service_rewards_per_s_median": round(statistics.median(r["service"] for r in rows), 1),
            "bare_rewards_per_s_median": round(statistics.median(r["bare"] for r in rows), 1),
            "reps": [{k: round(v, 3) for k, v in r.items()} for r in rows],
        }
        if not row.instant:
            out[name]["reward_alone_rewards_per_s_median"] = {
                "score_batch": round(statistics.median(r["alone_score_batch"] for r in rows), 1),
                "ascore_batch": round(statistics.median(r["alone_ascore_batch"] for r in rows), 1),
                "batch": batch,
            }
    return out


def export_source(rev: str, into: Path) -> str:
    commit = subprocess.run(["git", "rev-parse", rev], cwd=REPO, capture_output=True, text=True, check=True)
    archive = subprocess.run(
        ["git", "archive", commit.stdout.strip(), "src"], cwd=REPO, capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return commit.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--before", default="HEAD~1", help="the commit whose service is 'before' (default: %(default)s)"
    )
    parser.add_argument("--requests", type=int, default=1024, help="requests per measurement (default: %(default)s)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="128 requests, 1 repetition: checks that the script runs")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--role", choices=["service", "bare", "alone"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--window-ms", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("--instant", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--canned", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "service":
        run_service(args.port, args.window_ms, args.instant)
        return 0
    if args.role == "bare":
        run_bare(args.port, args.canned)
        return 0
    if args.role == "alone":
        run_alone()
        return 0
    if args.quick:
        args.requests, args.reps = 128, 1

    from care_lab.data.results import write_results

    work = Path(tempfile.mkdtemp(prefix="serve_ceiling_"))
    (work / "before").mkdir()
    before_commit = export_source(args.before, work / "before")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "src/care_sdk"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    sources = {"before": work / "before" / "src", "after": REPO / "src"}
    results: dict[str, Any] = {}
    variants: list[Variant] = []
    with contextlib.ExitStack() as stack:
        for name, src in sources.items():
            services = {}
            for window, instant in sorted({row.service for row in ROWS}, reverse=True):
                flags = ["--role", "service", "--window-ms", str(window), *(["--instant"] if instant else [])]
                label = f"{name}-service-{window:g}ms{'-instant' if instant else ''}"
                services[window, instant] = stack.enter_context(started(label, flags, src, work))
            answers = record_answers(services[10.0, False])
            for key, service in services.items():
                if key != (10.0, False):  # warms its rubric cache; the same answers, whatever the window
                    other = record_answers(service)
                    assert all(json.loads(other[sent]) == json.loads(body) for sent, body in answers.items())
            canned = work / f"{name}-answers.json"
            canned.write_text(json.dumps({sent.hex(): body.hex() for sent, body in answers.items()}))
            bare = stack.enter_context(started(f"{name}-bare", ["--role", "bare", "--canned", str(canned)], src, work))
            alone = stack.enter_context(started(f"{name}-alone", ["--role", "alone"], src, work, listens=False))
            variants.append(Variant(name, services, bare, alone, answers))
        for row in ROWS:
            results[row.label] = run_row(row, variants, args.requests, args.reps)

    metrics = {
        f"{v.name}: {label}": {k: val for k, val in by_name[v.name].items() if k != "reps"}
        for label, by_name in results.items()
        for v in variants
    }
    for label, by_name in results.items():
        before, after = by_name["before"]["ratio_median"], by_name["after"]["ratio_median"]
        print(f"{label}: ratio before {before:.3f}, after {after:.3f}")
    command = " ".join(["python", "benchmarks/bench_serve_ceiling.py", *(argv if argv is not None else sys.argv[1:])])
    write_results(
        args.out,
        command,
        data="synthetic requests: 8 hand-written contexts x 8 replies (benchmarks/bench_serve_ceiling.py)",
        role="eval-only",
        test_reads=0,
        metrics=metrics,
        baselines={
            "bare Starlette endpoint": "reads the same body, parses it as JSON, answers the bytes the service "
            "answered for it; same uvicorn settings, client and concurrency, next to each service in every repetition",
            "reward alone": "the same reward in process without HTTP, one call per batch of as many items as the "
            "client keeps in flight: the bound for any service of that reward",
        },
        extra={
            "goal": "service rewards/s >= 0.5 x the bare endpoint's (issue #61)",
            "before": {"commit": before_commit, "package": variants[0].services[10.0, False].first_line},
            "after": {
                "commit": head.stdout.strip(),
                "uncommitted_changes_under_src_care_sdk": bool(dirty),
                "package": variants[1].services[10.0, False].first_line,
            },
            "answer_checks": {v.name: v.checks for v in variants},
            "rows": [vars(row) for row in ROWS],
            "requests_per_measurement": args.requests,
            "reps": args.reps,
            "per_rep": {
                label: {v.name: by_name[v.name]["reps"] for v in variants} for label, by_name in results.items()
            },
            "service_config": "ServeConfig() defaults (batch window 10 ms, max batch 64, max queue 256); the "
            "window 0 rows set batch_window_ms=0; the instant-reward row looks the reward's results up",
            "server": "uvicorn under care_sdk.serve.serve (log level warning, no access log); the bare endpoint "
            "under uvicorn.run with the same settings",
            "backend": "care_sdk.testing.ScriptedBackend: a fixed rubric, evaluation scores from a hash of the reply",
            "machine": {
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
            },
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
