"""A real ``care serve --backend default`` (the bundled model) on 127.0.0.1, scored through RemoteReward."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from care_sdk import AdaptiveReward, RemoteReward, RewardResult
from care_sdk.backends._retry import RetryPolicy
from care_sdk.types import Context
from servers import free_port

pytestmark = pytest.mark.slow

SAD: list[dict[str, str]] = [{"role": "user", "content": "I failed my driving test again and I feel useless."}]
LONELY = "I moved to a new city and I don't know anyone."
ITEMS: list[tuple[Context, str]] = [
    (SAD, "That sounds really discouraging. What happened during the test?"),
    (SAD, "Everyone fails sometimes; just try again."),
    (LONELY, "Moving is hard. Would you like ideas for meeting people nearby?"),
]


class Service:
    """A ``care serve`` subprocess on a fixed port, restartable."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "serve.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "care_sdk.cli", "serve", "--backend", "default", "--port", str(self.port)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"care serve did not start:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = Service(tmp_path)
    running.start()
    try:
        yield running
    finally:
        running.kill()


@pytest.fixture(scope="module")
def in_process() -> list[RewardResult]:
    from care_sdk.cli import build_parser
    from care_sdk.cli_options import reward_recipe

    reward = AdaptiveReward.from_backend(**reward_recipe(build_parser().parse_args(["serve", "--backend", "default"])))
    return reward.score_batch(ITEMS)  # type: ignore[no-any-return]


def test_the_service_gives_the_in_process_rewards(service: Service, in_process: list[RewardResult]) -> None:
    remote = RemoteReward(service.url)
    results = remote.score_batch(ITEMS)
    assert [r.reward for r in results] == [r.reward for r in in_process]
    assert [r.rubric for r in results] == [r.rubric for r in in_process]
    assert all(r.reward is not None for r in results)
    # OpenRLHF (0.11.0, openrlhf/utils/agent.py) posts {"query", "prompts", "labels"}: the query is the
    # decoded prompt + reply tokens with the special tokens kept, here in the bundled model's ChatML
    prompt = f"<|im_start|>user\n{SAD[0]['content']}<|im_end|>\n<|im_start|>assistant\n"
    body = {"query": [f"{prompt}{ITEMS[0][1]}<|im_end|>"], "prompts": [prompt], "labels": [None]}
    request = urllib.request.Request(
        f"{service.url}/get_reward", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        openrlhf = json.loads(answer.read())
    assert openrlhf["rewards"] == openrlhf["scores"] == [in_process[0].reward]
    assert openrlhf["details"][0]["template"] == "chatml" and openrlhf["extra_logs"]["care_failed"] == [0.0]
    metrics = urllib.request.urlopen(f"{service.url}/metrics", timeout=5).read().decode()
    assert 'care_serve_requests_total{endpoint="score",status="200"} 1.0' in metrics
    assert 'care_serve_requests_total{endpoint="get_reward",status="200"} 1.0' in metrics


def test_a_killed_and_restarted_server_loses_and_duplicates_no_reward(
    service: Service, in_process: list[RewardResult], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="care_sdk")
    remote = RemoteReward(service.url, retry=RetryPolicy(max_retries=60, initial_delay=0.2, max_delay=1.0))
    answers: list[list[RewardResult]] = []
    errors: list[BaseException] = []

    def client() -> None:
        try:
            for item in ITEMS:
                answers.append(remote.score_batch([item]))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=client)
    thread.start()
    while not answers:
        assert thread.is_alive(), errors
        time.sleep(0.05)
    service.kill()  # mid-run: later requests fail to connect or are cut off
    time.sleep(1.0)
    service.start()
    thread.join(300)
    assert not errors and not thread.is_alive()
    assert [len(a) for a in answers] == [1] * len(ITEMS)
    assert [a[0].reward for a in answers] == [r.reward for r in in_process]
    assert any("retrying" in record.getMessage() for record in caplog.records)  # the kill was felt
