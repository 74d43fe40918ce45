"""The reward service and its client, in process with scripted backends (no model).

The app runs in process (httpx's ASGI transport, the app's own lifespan), or under a real uvicorn
on 127.0.0.1 for the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from care_sdk import (
    AdaptiveReward,
    BackendError,
    ConfigError,
    RemoteReward,
    RewardResult,
    RubricEvaluator,
    RubricGenerator,
)
from care_sdk.backends.base import GenerationRequest
from care_sdk.serve import ServeConfig, create_app
from care_sdk.serve.batching import Batcher, QueueFull
from care_sdk.serve.protocol import split_query
from care_sdk.testing import ScriptedBackend, candidate_reply, evaluation_json, rubric_json
from servers import free_port

RUBRIC = rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
SCORES = {"That sounds really hard.": [5, 5, 5, 5, 1, 1], "Tell me what happened.": [3, 3, 3, 3, 3, 3]}
SAD = [{"role": "user", "content": "I failed my exam."}]


def judge(request: GenerationRequest) -> str:
    return evaluation_json(SCORES.get(candidate_reply(request), [1] * 6))


def scripted_reward(evaluator: Any = judge) -> tuple[AdaptiveReward, ScriptedBackend, ScriptedBackend]:
    gen = ScriptedBackend(lambda request: RUBRIC)
    ev = ScriptedBackend(evaluator)
    # no rubric cache: sharing a rubric across requests comes from batching alone
    return AdaptiveReward(RubricGenerator(gen, cache=False), RubricEvaluator(ev)), gen, ev


@contextlib.asynccontextmanager
async def client_for(reward: AdaptiveReward, **config: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(reward, ServeConfig(**config))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://care") as client:
            yield client


# -- batching --------------------------------------------------------------------------------------


async def test_two_concurrent_requests_for_one_context_cost_one_rubric() -> None:
    reward, gen, ev = scripted_reward()
    async with client_for(reward, batch_window_ms=200) as client:
        bodies = [{"items": [{"context": SAD, "reply": reply}]} for reply in SCORES]
        answers = await asyncio.gather(*(client.post("/v1/score", json=b) for b in bodies))
    assert [a.status_code for a in answers] == [200, 200]
    rewards = [a.json()["results"][0]["reward"] for a in answers]
    assert rewards == [r.reward for r in reward.score_batch([(SAD, r) for r in SCORES])]
    assert len(gen.requests) == 1 + 1  # one rubric for both requests (+1: the in-process check above)
    assert len(ev.requests) == 2 + 2


async def test_requests_one_after_another_each_pay_their_rubric_without_a_cache() -> None:
    reward, gen, _ = scripted_reward()
    async with client_for(reward, batch_window_ms=0) as client:
        for reply in SCORES:
            assert (
                await client.post("/v1/score", json={"items": [{"context": SAD, "reply": reply}]})
            ).status_code == 200
    assert len(gen.requests) == 2


async def test_a_full_queue_answers_429_with_retry_after_and_finishes_what_it_accepted() -> None:
    release = threading.Event()

    def slow_judge(request: GenerationRequest) -> str:
        release.wait(30)
        return judge(request)

    reward, _, _ = scripted_reward(slow_judge)
    async with client_for(reward, max_queue=2, batch_window_ms=0) as client:
        body = {"items": [{"context": SAD, "reply": r} for r in SCORES]}
        first = asyncio.create_task(client.post("/v1/score", json=body))
        while (await client.get("/health")).json()["queue_depth"] < 2:
            await asyncio.sleep(0.01)
        refused = await client.post("/v1/score", json={"items": [{"context": SAD, "reply": "Hm."}]})
        too_big = await client.post("/v1/score", json={"items": [{"context": SAD, "reply": "Hm."}] * 3})
        release.set()
        accepted = await first
        metrics = (await client.get("/metrics")).text
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert too_big.status_code == 413
    assert accepted.status_code == 200 and [r["reward"] for r in accepted.json()["results"]] == [0.75, 0.5]
    assert 'care_serve_requests_total{endpoint="score",status="429"} 1.0' in metrics
    assert "care_serve_queue_depth 0.0" in metrics


async def test_detail_reward_answers_the_reward_alone() -> None:
    reward, _, _ = scripted_reward()
    item = {"context": SAD, "reply": "Tell me what happened."}
    async with client_for(reward) as client:
        full = await client.post("/v1/score", json={"items": [item]})
        slim = await client.post("/v1/score", json={"items": [item], "options": {"detail": "reward"}})
    [full_result], [slim_result] = full.json()["results"], slim.json()["results"]
    assert set(slim_result) == {"reward", "error", "flags", "parts"}
    assert slim_result["reward"] == full_result["reward"] is not None
    assert "rubric" in full_result and "evaluation" in full_result


# -- limits and auth -------------------------------------------------------------------------------


async def test_the_bearer_token_is_required_when_configured() -> None:
    reward, _, _ = scripted_reward()
    body = {"items": [{"context": SAD, "reply": "Tell me what happened."}]}
    async with client_for(reward, token="s3cret") as client:
        missing = await client.post("/v1/score", json=body)
        wrong = await client.post("/v1/score", json=body, headers={"Authorization": "Bearer nope"})
        right = await client.post("/v1/score", json=body, headers={"Authorization": "Bearer s3cret"})
        health = await client.get("/health")
    assert missing.status_code == wrong.status_code == 401
    assert "s3cret" not in missing.text
    assert right.status_code == 200 and health.status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/v1/score", b"{not json", 400, "body"),
        ("/v1/score", b"[1, 2]", 422, "body"),
        ("/v1/score", b'{"items": [{"context": "hi"}]}', 422, "items[0].reply"),
        (
            "/v1/score",
            b'{"items": [{"context": [{"role": "user"}], "reply": "x"}]}',
            422,
            "items[0].context[0].content",
        ),
        ("/v1/score", b'{"items": [], "options": {"weights": "uniform"}}', 422, "options.weights"),
        ("/v1/score", b'{"items": [], "options": {"detail": "some"}}', 422, "options.detail"),
        ("/get_reward", b'{"query": ["a", "b", "c", 4]}', 422, "query[3]"),
        ("/get_reward", b'{"prompts": ["a"]}', 422, "query"),
        ("/get_reward", b'{"query": ["a"], "prompts": ["a", "b"]}', 422, "prompts"),
        ("/get_reward", b'{"query": ["' + b"x" * 2000 + b'"]}', 413, "body"),
    ],
)
async def test_malformed_bodies_are_refused_naming_the_field(path: str, body: bytes, status: int, field: str) -> None:
    reward, gen, ev = scripted_reward()
    async with client_for(reward, max_body_bytes=1000) as client:
        answer = await client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == status, answer.text
    assert answer.json()["field"] == field and answer.json()["error"]
    assert not gen.requests and not ev.requests


async def test_an_unexpected_error_is_answered_500_with_an_id_that_the_log_line_carries(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from care_sdk.serve import nemo_gym

    def broken(request: Any, result: RewardResult) -> dict[str, Any]:
        raise RuntimeError("secret internals")

    def crashing_judge(request: GenerationRequest) -> str:
        raise RuntimeError("secret judge internals")

    monkeypatch.setattr(nemo_gym, "verify_body", broken)
    body = {"responses_create_params": {"input": "I failed my exam."}, "response": {"output": []}}
    reward, _, _ = scripted_reward()
    async with client_for(reward) as client:
        failed = await client.post("/verify", json=body)
        metrics = (await client.get("/metrics")).text
    assert failed.status_code == 500 and "secret" not in failed.text and failed.json()["field"] is None
    incident = failed.json()["error"].split()[2]
    [line] = [r for r in caplog.records if incident in r.getMessage()]
    assert "secret internals" in line.getMessage() and line.exc_info is not None
    assert 'care_serve_requests_total{endpoint="verify",status="500"} 1.0' in metrics
    reward, _, _ = scripted_reward(crashing_judge)  # a batch that raises: each item fails, naming an id
    async with client_for(reward) as client:
        answer = await client.post("/v1/score", json={"items": [{"context": SAD, "reply": "Hm."}]})
    [result] = answer.json()["results"]
    assert answer.status_code == 200 and result["reward"] is None and "secret" not in result["error"]
    assert any(result["error"].split()[-1] in r.getMessage() for r in caplog.records)


async def test_the_service_awaits_the_async_reward() -> None:
    reward, _, ev = scripted_reward()

    def blocking(items: Any) -> Any:
        raise AssertionError("the service called the sync score_batch")

    reward.score_batch = blocking  # type: ignore[method-assign]
    async with client_for(reward) as client:
        answer = await client.post("/v1/score", json={"items": [{"context": SAD, "reply": "Tell me what happened."}]})
    assert answer.status_code == 200 and answer.json()["results"][0]["reward"] == 0.5 and len(ev.requests) == 1


# -- OpenRLHF's protocol ---------------------------------------------------------------------------

CHATML_PROMPT = (
    "<|im_start|>system\nYou are kind.<|im_end|>\n<|im_start|>user\nI failed my exam.<|im_end|>\n"
    "<|im_start|>assistant\n"
)
LLAMA3_PROMPT = (
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nI failed my exam.<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)


def test_split_chatml_with_and_without_the_prompt() -> None:
    query = CHATML_PROMPT + "That sounds really hard.<|im_end|>\n<|endoftext|><|endoftext|>"
    for prompt in (CHATML_PROMPT, None, "a prompt that is not a prefix"):
        split = split_query(query, prompt)
        assert split.template == "chatml" and split.error is None
        assert split.reply == "That sounds really hard."
        assert split.context == [
            {"role": "system", "content": "You are kind."},
            {"role": "user", "content": "I failed my exam."},
        ]


def test_split_multi_turn_llama3_and_plain_text() -> None:
    earlier = (
        "<|start_header_id|>assistant<|end_header_id|>\n\nOh no.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nYes.<|eot_id|>"
    )
    prompt = LLAMA3_PROMPT.replace("<|start_header_id|>assistant<|end_header_id|>\n\n", earlier, 1)
    prompt += "<|start_header_id|>assistant<|end_header_id|>\n\n"
    split = split_query(prompt + "Tell me what happened.<|eot_id|>")
    assert split.template == "llama3" and split.reply == "Tell me what happened."
    assert isinstance(split.context, list)
    assert [m["role"] for m in split.context if isinstance(m, dict)] == ["user", "assistant", "user"]
    plain = split_query("User: I failed.\nAssistant: Oh no.", "User: I failed.\nAssistant:")
    assert (plain.template, plain.context, plain.reply) == ("plain", "User: I failed.\nAssistant:", "Oh no.")
    assert split_query("User: I failed. Oh no.", "something else").error is not None


async def test_get_reward_reads_each_template_and_fails_unsplittable_items_with_null() -> None:
    reward, gen, ev = scripted_reward()
    queries = [
        CHATML_PROMPT + "That sounds really hard.<|im_end|>",
        LLAMA3_PROMPT + "Tell me what happened.<|eot_id|>",
        "User: I failed my exam.\nAssistant: That sounds really hard.",
        "no prompt, no template",
    ]
    prompts = [CHATML_PROMPT, LLAMA3_PROMPT, "User: I failed my exam.\nAssistant:", "elsewhere"]
    async with client_for(reward) as client:
        answer = await client.post("/get_reward", json={"query": queries, "prompts": prompts, "labels": [None] * 4})
    body = answer.json()
    assert answer.status_code == 200
    assert body["rewards"] == body["scores"] == [0.75, 0.5, 0.75, None]
    assert [d["template"] for d in body["details"]] == ["chatml", "llama3", "plain", "plain"]
    assert body["details"][3]["error"].startswith("cannot split the reply off")
    assert body["extra_logs"]["care_failed"] == [0.0, 0.0, 0.0, 1.0]
    assert body["extra_logs"]["care_template_chatml"] == [1.0, 0.0, 0.0, 0.0]
    assert all(isinstance(v, float) for values in body["extra_logs"].values() for v in values)
    assert sorted(candidate_reply(r) for r in ev.requests) == sorted(
        ["That sounds really hard.", "Tell me what happened.", "That sounds really hard."]
    )
    # each query's share of the calls; the unsplittable one cost nothing and has no provenance
    calls = body["extra_logs"]["care_cost_calls"]
    assert sum(calls) == len(gen.requests) + len(ev.requests) and calls[3] == 0.0
    assert sum(body["extra_logs"]["care_cost_prompt_tokens"]) == sum(
        len(m.content) for r in gen.requests + ev.requests for m in r.messages
    )
    assert [d["provenance"] is None for d in body["details"]] == [False, False, False, True]
    assert body["details"][0]["provenance"]["rubric_source"] == "generated"


# -- the client over real HTTP on 127.0.0.1 ------------------------------------------------------


SERVERS: dict[str, Any] = {}


@contextlib.contextmanager
def running(reward: AdaptiveReward, **config: Any) -> Iterator[str]:
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(reward, ServeConfig(**config)), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    url = f"http://127.0.0.1:{port}"
    SERVERS[url] = server
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(30)


def test_remote_reward_is_a_trl_reward_function_sync_and_async() -> None:
    reward, _, _ = scripted_reward()
    with running(reward, token="s3cret") as url:
        remote = RemoteReward(url, token="s3cret", name="care_remote")
        logged: dict[str, float] = {}
        rewards = remote(
            ["<policy prompt>"] * 2,
            [[{"role": "assistant", "content": r}] for r in SCORES],
            context=[SAD, SAD],
            log_metric=logged.__setitem__,
        )
        assert rewards == [0.75, 0.5] and logged["care_remote/failed"] == 0.0  # metrics under its name
        assert remote.last_results[0].rubric is not None
        fn = remote.as_async()
        assert fn.__name__ == "care_remote"
        assert asyncio.run(fn(["I failed my exam."], ["Tell me what happened."])) == [0.5]
        with pytest.raises(BackendError) as refused:
            RemoteReward(url, token="wrong")(["I failed my exam."], ["Tell me what happened."])
        assert refused.value.status_code == 401 and not refused.value.retryable


def test_remote_reward_reads_back_the_provenance_and_cost_of_every_result() -> None:
    reward, gen, ev = scripted_reward()
    local = reward.score_batch([(SAD, r) for r in SCORES])
    with running(reward) as url, RemoteReward(url) as remote:
        logged: dict[str, float] = {}
        assert remote([SAD] * 2, list(SCORES), log_metric=logged.__setitem__) == [r.reward for r in local]
        metrics = httpx.get(f"{url}/metrics").text
    for remote_result, local_result in zip(remote.last_results, local, strict=True):
        made, expected = remote_result.provenance, local_result.provenance
        assert made is not None and expected is not None
        assert made.model_dump(exclude={"rubric_cost", "evaluation_cost"}) == expected.model_dump(
            exclude={"rubric_cost", "evaluation_cost"}
        )
        assert made.rubric_hash == remote_result.rubric.content_hash  # type: ignore[union-attr]
        assert (made.rubric_source, made.rubric_shared_by, made.generator) == (
            "generated",
            2,
            reward.generator.identity,
        )  # type: ignore[union-attr]
        assert (made.evaluator, made.evaluator_prompt) == (reward.evaluator.identity, "v2")
        assert made.cost.calls == 1.5 and made.cost.seconds > 0.0  # half the shared rubric, its own evaluation
    assert logged["care/cost/calls"] == 1.5 and logged["care/rubric/cached"] == 0.0
    assert len(gen.requests) + len(ev.requests) == 2 * 3  # the in-process run above, then the service's
    assert (
        "care_serve_backend_calls_total 3.0" in metrics
        and 'care_serve_rubrics_total{source="generated"} 2.0' in metrics
    )


def test_remote_reward_logs_under_its_name_and_closes_its_clients() -> None:
    reward, _, _ = scripted_reward()
    with running(reward) as url:
        logged: dict[str, float] = {}
        with RemoteReward(url) as remote:
            assert remote(["I failed my exam."], ["Tell me what happened."], log_metric=logged.__setitem__) == [0.5]
            clients = remote._clients.values()
        assert "care/failed" in logged and len(clients) == 1 and clients[0].is_closed and not remote._clients.values()

        async def scored() -> tuple[list[float | None], Any]:
            async with RemoteReward(url, name="care_remote") as remote:
                rewards = await remote.acall(
                    ["I failed my exam."], ["Tell me what happened."], log_metric=logged.__setitem__
                )
                [aclient] = remote._clients.values()
                return rewards, aclient

        rewards, aclient = asyncio.run(scored())
        assert rewards == [0.5] and "care_remote/failed" in logged
        assert aclient is not None and aclient.is_closed
        with pytest.raises(ConfigError):
            RemoteReward(url, name="care")


def test_remote_reward_pickles_by_its_configuration() -> None:
    reward, _, _ = scripted_reward()
    with running(reward) as url:
        remote = RemoteReward(url, timeout=30.0)
        assert remote(["I failed my exam."], ["Tell me what happened."]) == [0.5]
        copy = pickle.loads(pickle.dumps(remote))
        assert (copy.url, copy.token, copy.__name__, copy.timeout) == (url, None, "care_reward", 30.0)
        assert copy(["I failed my exam."], ["That sounds really hard."]) == [0.75]


def test_shutdown_finishes_the_requests_it_accepted() -> None:
    started, release = threading.Event(), threading.Event()

    def slow_judge(request: GenerationRequest) -> str:
        started.set()
        release.wait(30)
        return judge(request)

    reward, _, _ = scripted_reward(slow_judge)
    with running(reward) as url, ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(RemoteReward(url), ["I failed my exam."], ["Tell me what happened."])
        assert started.wait(30)
        SERVERS[url].should_exit = True  # what SIGTERM does
        time.sleep(0.2)
        release.set()
        assert pending.result(30) == [0.5]


async def test_the_batcher_drains_accepted_items_when_stopped() -> None:
    calls: list[int] = []

    def score(items: list[Any]) -> list[RewardResult]:
        calls.append(len(items))
        return [RewardResult(reward=0.25) for _ in items]

    batcher = Batcher(score, window_s=5.0, max_batch=2)
    await batcher.start()
    futures = [batcher.submit([("hi", "a"), ("hi", "b"), ("hi", "c")])]
    await batcher.stop()  # does not wait out the window, and scores everything accepted
    assert [r.reward for r in await futures[0]] == [0.25] * 3 and calls == [2, 1]
    with pytest.raises(QueueFull):
        batcher.submit([("hi", "d")])


async def test_a_full_batch_is_scored_without_waiting_out_the_window() -> None:
    calls: list[int] = []

    async def score(items: list[Any]) -> list[RewardResult]:
        calls.append(len(items))
        return [RewardResult(reward=0.25) for _ in items]

    batcher = Batcher(score, window_s=30.0, max_batch=2)
    await batcher.start()
    first = batcher.submit([("hi", "a")])
    await asyncio.sleep(0.05)  # the window is open, one item waits
    second = batcher.submit([("hi", "b")])
    results = await asyncio.wait_for(asyncio.gather(first, second), 5)
    await batcher.stop()
    assert [r.reward for rs in results for r in rs] == [0.25, 0.25] and calls == [2]


def test_care_serve_refuses_an_unset_token_variable(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    from care_sdk.cli import main

    monkeypatch.delenv("CARE_TEST_UNSET_TOKEN", raising=False)
    assert main(["serve", "--backend", "default", "--token-env", "CARE_TEST_UNSET_TOKEN"]) == 2
    assert "CARE_TEST_UNSET_TOKEN" in capsys.readouterr().err
    assert main(["serve", "--max-batch", "0"]) == 2
    assert "--max-batch" in capsys.readouterr().err
