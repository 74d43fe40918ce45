"""NeMo-Gym's ``/verify`` in ``care serve``, tested against NeMo-Gym 0.7.0's documented types.

NeMo-Gym 0.7 needs Python >= 3.13.14, so it is not installed here: the request bodies follow its
``BaseVerifyRequest`` (``responses_create_params`` + ``response``, a Responses-API ``Response``,
built here with openai's own type) and the answers are checked against ``BaseMultiRewardVerifyResponse``
and ``judge_failsafe`` as read in nemo_gym/base_resources_server.py and nemo_gym/judge.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from care_sdk import AdaptiveReward
from care_sdk.backends.base import GenerationRequest
from care_sdk.errors import BackendError
from care_sdk.serve import create_app
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json

CONTEXT = [
    {"role": "user", "content": "My sister stopped talking to me after the wedding."},
    {"role": "assistant", "content": "That sounds painful. What happened at the wedding?"},
    {"role": "user", "content": "I gave a toast she hated."},
]


def responses_output(text: str) -> dict[str, Any]:
    """A Responses-API response as NeMo-Gym's model servers return it (openai's own type, dumped)."""
    from openai.types.responses import Response

    return Response.model_validate(
        {
            "id": "resp_1",
            "created_at": 0.0,
            "model": "policy",
            "object": "response",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                },
            ],
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
        }
    ).model_dump(mode="json")


def verify_request(reply: str) -> dict[str, Any]:
    return {
        "responses_create_params": {"input": [{"role": "system", "content": "Be kind."}, *CONTEXT]},
        "response": responses_output(reply),
        "task_id": "wedding-1",  # a task field, echoed back
    }


def scripted(evaluation: Any = None) -> ScriptedBackend:
    def answer(request: GenerationRequest) -> Any:
        if request.purpose == "rubric":
            return rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
        return evaluation if evaluation is not None else evaluation_json([5, 5, 5, 5, 1, 1])

    return ScriptedBackend(answer)


@pytest.fixture
def client_for() -> Iterator[Any]:
    clients: list[TestClient] = []

    def make(backend: ScriptedBackend) -> TestClient:
        client = TestClient(create_app(AdaptiveReward.from_backend(backend)))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def test_verify_answers_reward_and_components(client_for: Any) -> None:
    backend = scripted()
    client = client_for(backend)
    answer = client.post("/verify", json=verify_request("A toast can sting. What did she say about it?"))
    assert answer.status_code == 200
    body = answer.json()
    assert body["reward"] == 0.75
    assert body["reward_components"] == {"cognitive": 1.0, "affective": 1.0, "proactive": 0.0}
    assert (body["care_affective"], body["care_weight_affective"]) == (1.0, 0.5)
    assert body["care_cost_calls"] == 2.0 and body["care_cost_seconds"] >= 0.0  # one rubric, one evaluation
    assert (body["mask_sample"], body["failure_kind"], body["failure_reason"]) == (False, None, None)
    assert body["task_id"] == "wedding-1" and body["response"]["id"] == "resp_1"  # the request, echoed
    judged = backend.requests[0].messages[-1].content
    assert (
        "I gave a toast she hated." in judged and "Be kind." not in judged
    )  # the policy's system prompt is not judged


def test_group_of_eight_verify_calls_costs_one_rubric_and_eight_evaluations(client_for: Any) -> None:
    backend = scripted()
    client = client_for(backend)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: client.post("/verify", json=verify_request(f"Reply {i}.")), range(8)))
    assert [a.json()["reward"] for a in answers] == [0.75] * 8
    purposes = [r.purpose for r in backend.requests]
    assert (purposes.count("rubric"), purposes.count("evaluation")) == (1, 8)


@pytest.mark.parametrize(
    ("evaluation", "kind"),
    [("not json", "judge_unparseable"), (BackendError("judge down", retryable=False, status_code=500), "judge_failed")],
)
def test_unscorable_reply_is_masked_as_a_failed_judge(client_for: Any, evaluation: Any, kind: str) -> None:
    client = client_for(scripted(evaluation))
    body = client.post("/verify", json=verify_request("I hear you.")).json()
    assert body["mask_sample"] is True and body["reward"] == 0.0  # NeMo-Gym's judge_failsafe shape
    assert body["failure_kind"] == kind and body["_ng_failure_class"] == "judge_failed"
    assert body["failure_reason"].startswith("evaluation failed")


def test_bad_verify_body_names_the_field(client_for: Any) -> None:
    client = client_for(scripted())
    answer = client.post("/verify", json={"responses_create_params": {"input": []}, "response": responses_output("x")})
    assert answer.status_code == 422 and answer.json()["field"] == "responses_create_params.input"
    assert client.post("/verify", json={"responses_create_params": {"input": "hi"}}).json()["field"] == "response"


def test_seed_session_keeps_no_state(client_for: Any) -> None:
    client = client_for(scripted())
    seeded = client.post("/seed_session", json={"resources_session_id": "s1", "episode_id": "e", "task_id": "t"})
    assert seeded.json() == {"resources_session_id": "s1"}
    assert client.post("/seed_session", json=verify_request("x")).json() == {}  # an agent's legacy seed body
