"""``care report``: the data behind the page (by hand), the page's safety (escaping, no network),
the commands, and the page itself in headless Chromium: turn counts, filters from the address and
from the page's controls (driven over the DevTools protocol), an injected script that must not run,
and a screenshot (``CARE_REPORT_SCREENSHOT=path.png`` keeps it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from care_sdk import FIXED_CRITERIA_VERSION, AdaptiveReward, RubricEvaluator, RubricGenerator, __version__
from care_sdk.cli import main
from care_sdk.report import DialogueTexts, build_report, embed_json, report_data, write_report
from care_sdk.score_files import score_file
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json

DIMS = ("cognitive", "affective", "proactive")
INJECTED = '<script>document.title="pwned";window.pwned=1</script><img src=x onerror="document.title=\'pwned\'">'


def rubric(c: float, a: float, p: float) -> dict[str, Any]:
    return {
        "weights": {"cognitive": c, "affective": a, "proactive": p},
        "criteria": [{"dimension": d, "text": f"{d} criterion"} for d in DIMS],
    }


def record(
    did: str, turn: int, reward: float | None, weights: tuple[float, float, float], **extra: Any
) -> dict[str, Any]:
    scores = [{"dimension": d, "criterion": f"{d} criterion", "score": 3.0, "distribution": None} for d in DIMS]
    base: dict[str, Any] = {
        "id": did,
        "turn": turn,
        "reward": reward,
        "error": None if reward is not None else "evaluation failed: no valid reply after 3 attempts",
        "rubric": rubric(*weights),
        "evaluation": {"scores": scores} if reward is not None else None,
        "dimension_scores": dict.fromkeys(DIMS, 0.5) if reward is not None else None,
    }
    return {**base, **extra}


def dialogue(did: str, replies: list[str]) -> dict[str, Any]:
    messages = []
    for i, reply in enumerate(replies):
        messages += [{"role": "user", "content": f"{did} says {i}"}, {"role": "assistant", "content": reply}]
    return {"id": did, "messages": messages}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# Three dialogues, seven turns, two failed; one reply and one criterion carry markup and script.
SCORES = [
    record("calm", 1, 0.8, (0.2, 0.6, 0.2)),
    record("calm", 3, 0.6, (0.5, 0.3, 0.2)),
    record("calm", 5, None, (0.2, 0.2, 0.6)),
    record("<b>bold</b>", 1, 0.1, (0.2, 0.6, 0.2)),
    record("<b>bold</b>", 3, 0.4, (0.3, 0.3, 0.4)),
    record("late", 1, None, (0.4, 0.4, 0.2)),
    record("late", 3, 0.95, (0.6, 0.2, 0.2)),
]
SCORES[4]["evaluation"]["scores"][0]["criterion"] = "</script><script>window.pwned=2</script>"
DIALOGUES = [
    dialogue("calm", ["That sounds hard.", "What happened next?", "You handled it."]),
    dialogue("<b>bold</b>", [INJECTED, "Tell me <i>more</i> &amp; more."]),
    dialogue("late", ["First reply.", "Second reply."]),
]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return write_jsonl(tmp_path / "scores.jsonl", SCORES), write_jsonl(tmp_path / "dialogues.jsonl", DIALOGUES)


# -- the data -------------------------------------------------------------------------------------


def test_embedded_json_cannot_close_its_script_element() -> None:
    value = {"a": "</script><!-- <script>x</script> & \u2028"}
    text = embed_json(value)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == value


def test_overview_counts_failures_and_extremes() -> None:
    data = report_data(SCORES)
    overview = data["overview"]
    assert (overview["dialogues"], overview["turns"], overview["scored"], overview["failed"]) == (3, 7, 5, 2)
    assert overview["failures"] == [["evaluation failed: no valid reply after 3 attempts", 2, [2, 5]]]
    rewards = [data["turns"][i]["r"] for i in overview["lowest"]]
    assert rewards == [0.1, 0.4, 0.6, 0.8, 0.95] and overview["highest"] == overview["lowest"][::-1]
    assert overview["mean_reward"] == pytest.approx((0.8 + 0.6 + 0.1 + 0.4 + 0.95) / 5, abs=1e-4)
    assert overview["median_reward"] == 0.6
    assert sum(overview["histogram"]) == 5 and overview["histogram"][9] == 1
    assert overview["mean_weights"] == pytest.approx([2.4 / 7, 2.6 / 7, 2.0 / 7], abs=1e-3)
    first = overview["weights_by_turn"][0]
    assert first[0] == 1 and first[2] == 3  # the first supporter turn of three dialogues
    assert [d["id"] for d in data["dialogues"]] == ["calm", "<b>bold</b>", "late"]
    assert [len(d["turns"]) for d in data["dialogues"]] == [3, 2, 2]


def test_criteria_and_producers_are_interned() -> None:
    by = {"generator": "g", "evaluator": "e", "fixed_criteria_version": "v1", "care_sdk": "0.1.0"}
    records = [record("a", 1, 0.5, (1, 1, 1), scored_by=by), record("a", 3, 0.5, (1, 1, 1), scored_by=by)]
    records.append(record("b", 1, 0.5, (1, 1, 1)))  # written before records carried scored_by
    data = report_data(records)
    assert data["strings"] == [f"{d} criterion" for d in DIMS]
    assert data["producers"] == [{**by, "turns": 2}, {"turns": 1}]
    assert data["turns"][0]["s"] == [[0, 0, 3.0], [1, 1, 3.0], [2, 2, 3.0]]


def test_a_later_record_for_the_same_turn_wins_and_flags_are_set(tmp_path: Path) -> None:
    retried = [record("a", 1, None, (0.5, 0.3, 0.2)), record("a", 1, 0.7, (1, 1, 1)), record("a", 5, 0.2, (1, 0, 0))]
    texts = DialogueTexts.read(write_jsonl(tmp_path / "d.jsonl", [dialogue("a", ["one", "two"])]))
    data = report_data(retried, texts)
    assert [t["r"] for t in data["turns"]] == [0.7, 0.2]
    assert data["turns"][0]["f"] == ["uniform weights"]
    assert data["turns"][1]["f"] == ["not in dialogues"]  # turn 5 does not exist in a 4-message dialogue
    assert data["dialogues"][0]["m"][1] == ["assistant", "one"]


def test_unreadable_lines_are_listed(tmp_path: Path) -> None:
    scores = tmp_path / "s.jsonl"
    scores.write_text(json.dumps(SCORES[0]) + "\nnot json\n", encoding="utf-8")
    dialogues = tmp_path / "d.jsonl"
    dialogues.write_text(json.dumps(DIALOGUES[0]) + '\n{"id": "x"}\n', encoding="utf-8")
    summary = write_report(scores, tmp_path / "r.html", dialogues=dialogues)
    assert not summary.ok and len(summary.issues) == 2
    assert "s.jsonl:line 2: not valid JSON" in summary.issues[0]
    assert "d.jsonl:line 2" in summary.issues[1]


# -- the page -------------------------------------------------------------------------------------


def test_page_is_self_contained_and_escapes_everything(files: tuple[Path, Path]) -> None:
    page, _ = build_report(files[0], dialogues=files[1], title="<script>alert(1)</script>")
    # the page's own two script elements and nothing else: no injected element, no external resource
    assert len(re.findall(r"<script\b", page)) == 2
    assert "pwned" in page and "<img" not in page and "<b>bold" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page) and "@import" not in page
    assert "<title>&lt;script&gt;alert(1)&lt;/script&gt;</title>" in page
    assert "default-src 'none'" in page
    nonce = re.search(r"'nonce-([^']+)'", page)
    assert nonce and f'<script nonce="{nonce.group(1)}">' in page
    data = json.loads(re.search(r'id="care-data">(.*?)</script>', page, re.S).group(1))  # type: ignore[union-attr]
    assert data["dialogues"][1]["m"][1][1] == INJECTED  # the reply arrives intact, as data


def test_report_command_and_score_report(tmp_path: Path, files: tuple[Path, Path], capsys: Any) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(files[0]), "--dialogues", str(files[1]), "--out", str(out)]) == 0
    assert "3 dialogues, 7 turns, 2 failed" in capsys.readouterr().out
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert main(["report", str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2


def _scripted_reward() -> AdaptiveReward:
    gen = ScriptedBackend(lambda req: rubric_json({"cognitive": 1, "affective": 2, "proactive": 1}))
    ev = ScriptedBackend(lambda req: evaluation_json([4, 4, 3, 3, 2, 2]))
    return AdaptiveReward(RubricGenerator(gen), RubricEvaluator(ev))


def test_score_records_carry_their_producer(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", DIALOGUES[:1])
    out = tmp_path / "out.jsonl"
    score_file(path, _scripted_reward(), out=out)
    by = json.loads(out.read_text().splitlines()[0])["scored_by"]
    assert by["generator"].startswith("scripted:scripted|prompt=")
    assert by["evaluator"].startswith("scripted:scripted|t=0.0")
    assert (by["fixed_criteria_version"], by["care_sdk"]) == (FIXED_CRITERIA_VERSION, __version__)
    assert (by["weights"], by["criteria"]) == ("generated", "generated")
    assert report_data([json.loads(x) for x in out.read_text().splitlines()])["producers"][0]["turns"] == 3


def _scored_with_cost(tmp_path: Path) -> list[dict[str, Any]]:
    """``care score`` records of the first dialogue (three turns), the first as a record written before
    records carried a provenance."""
    out = tmp_path / "out.jsonl"
    score_file(write_jsonl(tmp_path / "in.jsonl", DIALOGUES[:1]), _scripted_reward(), out=out, batch_size=2)
    records = [json.loads(x) for x in out.read_text().splitlines()]
    del records[0]["provenance"]
    return records


def test_the_report_shows_each_turn_s_cost_and_their_total(tmp_path: Path) -> None:
    records = _scored_with_cost(tmp_path)
    data = report_data(records)
    turns, cost = data["turns"], data["overview"]["cost"]
    assert turns[0]["c"] is None  # an older record: no cost shown, nothing invented
    made = records[1]["provenance"]
    calls, prompt, completion, seconds, source, rubric, shared = turns[1]["c"]
    assert (calls, source, data["strings"][rubric], shared) == (2.0, "generated", made["rubric_hash"], 1)
    assert prompt == made["rubric_cost"]["prompt_tokens"] + made["evaluation_cost"]["prompt_tokens"]
    assert completion > 0 and seconds >= 0
    assert (
        cost["turns"] == 2
        and cost["calls"] == 4.0
        and cost["sources"] == [["generated", 2], ["cached", 0], ["fixed", 0]]
    )
    assert cost["prompt_tokens"] == round(sum(t["c"][1] for t in turns[1:]))
    assert report_data([{k: v for k, v in r.items() if k != "provenance"} for r in records])["overview"]["cost"] is None


@pytest.mark.parametrize("with_out", [True, False])
def test_care_score_writes_a_report(tmp_path: Path, monkeypatch: Any, capsys: Any, with_out: bool) -> None:
    monkeypatch.setattr(AdaptiveReward, "from_backend", lambda **recipe: _scripted_reward())
    path = write_jsonl(tmp_path / "in.jsonl", DIALOGUES)
    report = tmp_path / "r.html"
    argv = ["score", str(path), "--quiet", "--no-show", "--report", str(report)]
    assert main(argv + (["--out", str(tmp_path / "s.jsonl")] if with_out else [])) == 0
    assert "3 dialogues, 7 turns, 0 failed" in capsys.readouterr().out
    assert "That sounds hard." in report.read_text(encoding="utf-8")


# -- in a real browser ----------------------------------------------------------------------------


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no chromium on PATH (Debian: apt-get install chromium; `make test` installs it)")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    """``browser(url, *args)``: run headless Chromium on ``url`` and return its stdout."""
    binary = _chromium()
    profile = tmp_path_factory.mktemp("chromium-profile")

    def run(url: str, *args: str) -> str:
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
        command = [binary, *flags, f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args, url]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    return run


def _turns(dom: str) -> list[str]:
    return re.findall(r'<div class="turn ([a-z ]+)" data-turn=', dom)


@pytest.mark.slow
def test_browser_renders_filters_and_never_runs_injected_script(
    browser: Callable[..., str], files: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    write_report(files[0], out, dialogues=files[1])
    url = out.as_uri()

    dom = browser(url, "--dump-dom")
    assert len(_turns(dom)) == 7 and all(c.startswith("match") for c in _turns(dom))
    assert 'data-matching="7"' in dom
    assert "<title>CARE report: scores.jsonl</title>" in dom  # the injected script did not set the title
    assert "&lt;script&gt;document.title=" in dom and "<img" not in dom  # the reply is shown as text
    assert "&lt;/script&gt;&lt;script&gt;window.pwned=2" in dom  # so is the criterion
    assert "Tell me &lt;i&gt;more&lt;/i&gt; &amp;amp; more." in dom

    failed = browser(url + "#status=failed", "--dump-dom")
    assert _turns(failed).count("match failed") == 2 and 'data-matching="2"' in failed
    assert len(_turns(failed)) == 5  # the two dialogues with a failure, their other turns shown dimmed
    assert "2 matching turns in 2 dialogues" in failed

    affective = browser(url + "#view=turns&dim=affective&sort=reward-asc", "--dump-dom")
    rewards = re.findall(r'<span class="badge"[^>]*>([0-9.]+)</span>', affective.split('id="list"')[1])
    assert rewards == ["0.100", "0.800"]

    shot = Path(os.environ.get("CARE_REPORT_SCREENSHOT", tmp_path / "report.png"))
    browser(url, f"--screenshot={shot}", "--window-size=1280,1800", "--hide-scrollbars")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


@pytest.mark.slow
def test_browser_names_the_fixed_criteria_version_of_new_and_older_records(
    browser: Callable[..., str], tmp_path: Path
) -> None:
    new = {"generator": "g", "evaluator": "e", "fixed_criteria_version": "fixed-v7", "care_sdk": "0.2.0"}
    old = {"generator": "g", "evaluator": "e", "prompt_version": "fixed-v6", "care_sdk": "0.1.0"}  # its old name
    rows = [record("a", 1, 0.5, (1, 1, 1), scored_by=new), record("b", 1, 0.5, (1, 1, 1), scored_by=old)]
    out = tmp_path / "report.html"
    write_report(write_jsonl(tmp_path / "scores.jsonl", rows), out)
    producers = browser(out.as_uri(), "--dump-dom").split('id="producers"')[1].split("</table>")[0]
    assert "<th>fixed criteria version</th>" in producers and "prompt" not in producers
    assert "<td>fixed-v7</td>" in producers and "<td>fixed-v6</td>" in producers


@pytest.mark.slow
def test_browser_opens_ten_thousand_turns_a_page_at_a_time(browser: Callable[..., str], tmp_path: Path) -> None:
    records = [
        record(f"d{i // 10:04d}", 2 * (i % 10) + 1, None if i % 50 == 0 else (i % 97) / 97, (0.5, 0.3, 0.2))
        for i in range(10_000)
    ]
    texts = [dialogue(f"d{d:04d}", [f"reply {k} of {d}" for k in range(10)]) for d in range(1000)]
    out = tmp_path / "big.html"
    write_report(write_jsonl(tmp_path / "s.jsonl", records), out, dialogues=write_jsonl(tmp_path / "d.jsonl", texts))
    dom = browser(out.as_uri() + "#page=3", "--dump-dom")
    assert "10000 matching turns in 1000 dialogues · showing dialogues 21–30 of 1000" in dom
    assert len(_turns(dom)) == 100  # ten dialogues of ten turns, not ten thousand
    failed = browser(out.as_uri() + "#view=turns&status=failed", "--dump-dom")
    assert "200 matching turns" in failed and len(_turns(failed)) == 25


class DevTools:
    """A minimal Chrome DevTools protocol client over ``--remote-debugging-pipe`` (fds 3 and 4)."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_chrome, self._write = os.pipe()
        self._read, from_chrome = os.pipe()

        def child() -> None:  # the browser reads commands on fd 3 and answers on fd 4
            os.dup2(to_chrome, 3)
            os.dup2(from_chrome, 4)

        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--remote-debugging-pipe"]
        self.process = subprocess.Popen(
            [binary, *flags, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=child,
        )
        os.close(to_chrome)
        os.close(from_chrome)
        self._buffer = b""
        self._id = 0
        self.session = ""

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = True) -> dict[str, Any]:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._read, 1 << 16)
                assert chunk, "the browser closed the pipe"
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                assert "error" not in reply, reply["error"]
                return reply["result"]  # type: ignore[no-any-return]

    def open(self, url: str) -> None:
        target = self.send("Target.createTarget", {"url": url}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)[
            "sessionId"
        ]
        deadline = time.monotonic() + 60
        while not self.eval("document.body && document.body.dataset.readyMs"):
            assert time.monotonic() < deadline, "the report did not finish drawing"
            time.sleep(0.05)

    def eval(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def close(self) -> None:
        self.send("Browser.close", session=False)
        self.process.wait(timeout=30)
        os.close(self._read)
        os.close(self._write)


@pytest.fixture
def devtools(tmp_path: Path) -> Iterator[DevTools]:
    client = DevTools(_chromium(), tmp_path / "profile")
    try:
        yield client
    finally:
        if client.process.poll() is None:
            client.close()


@pytest.mark.slow
def test_browser_controls_filter_and_sort(devtools: DevTools, files: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    write_report(files[0], out, dialogues=files[1])
    devtools.open(out.as_uri())
    assert devtools.eval("typeof window.pwned") == "undefined"  # neither the reply's nor the criterion's script ran
    assert devtools.eval("document.title") == "CARE report: scores.jsonl"
    assert devtools.eval("document.querySelectorAll('#list img, #list b').length") == 0
    assert devtools.eval("[...document.querySelectorAll('.msg .text')].some(e => e.textContent.startsWith('<script>'))")
    assert devtools.eval("document.querySelectorAll('.turn').length") == 7

    def choose(name: str, value: str) -> None:
        devtools.eval(
            f"(() => {{ const s = document.querySelector('select[name={name}]'); s.value = '{value}';"
            " s.dispatchEvent(new Event('change')); })()"
        )

    def wait_for(hash_: str) -> None:
        deadline = time.monotonic() + 10
        while devtools.eval("location.hash") != hash_:
            assert time.monotonic() < deadline, devtools.eval("location.hash")
            time.sleep(0.05)
        devtools.eval("undefined")  # let the hashchange handler run

    choose("status", "failed")
    wait_for("#status=failed")
    assert devtools.eval("document.querySelectorAll('.turn.match').length") == 2
    assert devtools.eval("document.body.dataset.matching") == "2"

    devtools.eval("[...document.querySelectorAll('.seg button')].find(b => b.textContent === 'Turns').click()")
    wait_for("#view=turns&status=failed")
    choose("status", "scored")
    choose("sort", "reward-desc")
    wait_for("#view=turns&status=scored&sort=reward-desc")
    rewards = devtools.eval("[...document.querySelectorAll('#list .badge')].map(b => b.textContent)")
    assert rewards == ["0.950", "0.800", "0.600", "0.400", "0.100"]


@pytest.mark.slow
def test_browser_shows_the_cost_of_the_run_and_of_each_turn(browser: Callable[..., str], tmp_path: Path) -> None:
    records = _scored_with_cost(tmp_path)
    out = tmp_path / "report.html"
    write_report(write_jsonl(tmp_path / "scores.jsonl", records), out)
    dom = browser(out.as_uri(), "--dump-dom")
    stats = dom.split('id="stats"')[1].split("</section>")[0]
    assert '<div class="v">4</div><div class="k">backend calls (2 of 3 turns recorded it)</div>' in stats
    assert '<div class="v">2</div><div class="k">rubrics written, 0 cached</div>' in stats
    rubric = records[1]["provenance"]["rubric_hash"]
    assert f"rubric {rubric} (generated) · cost 2.00 calls, " in dom
    assert len(re.findall(r'class="producer mono cost"', dom)) == 2  # the older record shows none
