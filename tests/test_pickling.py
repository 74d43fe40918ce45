"""Rewards pickle by their configuration: specs and options travel, live clients and models do not."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from care_sdk import AdaptiveReward, Rubric, RubricEvaluator, RubricGenerator, SqliteCache, TrajectoryReward
from care_sdk.backends import RUBRIC, GenerationRequest
from care_sdk.backends.base import NotPicklableError
from care_sdk.cache import MemoryCache
from care_sdk.errors import ConfigError
from care_sdk.testing import RecordingBackend, ScriptedBackend, evaluation_json, rubric_json

CONTEXT = [{"role": "user", "content": "I failed my exam again."}]
REPLIES = ["That sounds hard. What happened?", "Study more."]


def judge(request: GenerationRequest) -> str:
    """A module-level script, so the scripted backend pickles by value."""
    if request.purpose == RUBRIC:
        return rubric_json({"cognitive": 1, "affective": 2, "proactive": 1})
    candidate = request.messages[-1].content
    return evaluation_json([5, 4, 4, 3, 2, 2] if "What happened" in candidate else [2] * 6)


def scripted_reward(**options: object) -> AdaptiveReward:
    backend = ScriptedBackend(judge)
    return AdaptiveReward(RubricGenerator(backend), RubricEvaluator(backend), **options)  # type: ignore[arg-type]


def test_scripted_reward_round_trip_scores_the_same() -> None:
    reward = scripted_reward(name="care_a", variant="uniform_weights")
    copy = pickle.loads(pickle.dumps(reward))
    assert copy.__name__ == "care_a" and copy.weights == "uniform" and copy.guards == reward.guards
    assert copy.generator.identity == reward.generator.identity
    assert copy([CONTEXT] * 2, REPLIES) == reward([CONTEXT] * 2, REPLIES)


def test_trajectory_reward_pickles() -> None:
    episode = TrajectoryReward(scripted_reward(), how="discounted", gamma=0.5)
    copy = pickle.loads(pickle.dumps(episode))
    dialogue = [*CONTEXT, {"role": "assistant", "content": REPLIES[0]}]
    assert copy.how == "discounted" and copy.score(dialogue).reward == episode.score(dialogue).reward


def test_openai_spec_pickles_without_connecting() -> None:
    pytest.importorskip("openai")
    reward = AdaptiveReward.from_backend("openai:judge@http://127.0.0.1:9/v1", name="care_http")
    data = pickle.dumps(reward)  # no request is made: port 9 has no server
    copy = pickle.loads(data)
    assert copy.__name__ == "care_http"
    assert copy.evaluator.backend.identity == reward.evaluator.backend.identity == "openai:judge@http://127.0.0.1:9/v1"
    assert copy.generator.backend is copy.evaluator.backend  # still one backend for both components
    backend = copy.evaluator.backend
    assert not backend._states.values() and backend._executor is None  # clients are built on first use
    assert backend._new_client_kwargs()["max_retries"] == 0  # retries stay in the one tenacity layer
    assert len(data) < 20_000


def test_in_memory_cache_starts_empty_after_unpickling() -> None:
    reward = scripted_reward()
    reward([CONTEXT], REPLIES[:1])
    assert isinstance(reward.generator.cache, MemoryCache) and len(reward.generator.cache) == 1
    copy = pickle.loads(pickle.dumps(reward))
    assert isinstance(copy.generator.cache, MemoryCache) and len(copy.generator.cache) == 0
    assert copy.generator.cache.maxsize == reward.generator.cache.maxsize


def test_sqlite_cache_is_reopened_from_its_path(tmp_path: Path) -> None:
    path = tmp_path / "rubrics.sqlite"
    backend = ScriptedBackend([rubric_json({"cognitive": 3, "affective": 1, "proactive": 0})])
    generator = RubricGenerator(backend, cache=SqliteCache(path, timeout=5.0))
    rubric = generator.generate(CONTEXT)
    copy = pickle.loads(pickle.dumps(generator))
    assert isinstance(copy.cache, SqliteCache) and copy.cache.path == path and copy.cache.timeout == 5.0
    assert len(copy.cache) == 1
    assert copy.generate(CONTEXT) == rubric  # from the file: the copied script is spent, so no model call was made
    assert copy.cache.stats.hits == 1


def test_wrappers_and_scripted_backends_pickle_by_value() -> None:
    recording = RecordingBackend(ScriptedBackend(["a", "b"]))
    recording.generate([GenerationRequest(messages=())])
    copy = pickle.loads(pickle.dumps(recording))
    assert len(copy.requests) == 1 and copy.generate([GenerationRequest(messages=())])[0].text == "b"


def test_a_reward_on_a_live_llama_object_refuses_with_the_spec_to_use(llama_backend: object) -> None:
    from care_sdk.backends.llamacpp import LlamaCppBackend

    assert isinstance(llama_backend, LlamaCppBackend)
    by_path = pickle.loads(pickle.dumps(llama_backend))  # built from a path: it pickles as that path
    assert by_path.identity == llama_backend.identity
    by_path.close()
    reward = AdaptiveReward.from_backend(llama_backend.llama)  # the user's llama_cpp.Llama
    with pytest.raises(NotPicklableError, match=r"from_backend\('llamacpp:PATH.gguf'\)") as info:
        pickle.dumps(reward)
    assert isinstance(info.value, ConfigError) and isinstance(info.value, pickle.PicklingError)


def test_names_set_metric_prefixes_and_survive_as_async() -> None:
    first, second = scripted_reward(), scripted_reward(name="care_uniform", variant="uniform_weights")
    logged: dict[str, float] = {}
    for reward in (first, second):
        reward([CONTEXT], REPLIES[:1], log_metric=logged.__setitem__)
    assert {"care/score/affective", "care_uniform/score/affective", "care/failed", "care_uniform/failed"} <= set(logged)
    assert second.as_async().__name__ == "care_uniform"
    assert first.__name__ == "care_reward"
    for bad in ("care", "", "a/b"):
        with pytest.raises(ConfigError, match="name"):
            AdaptiveReward(evaluator=RubricEvaluator(ScriptedBackend([])), rubric=Rubric.uniform_fixed(), name=bad)


def test_from_backend_takes_a_name() -> None:
    reward = AdaptiveReward.from_backend(ScriptedBackend([]), variant="fixed_rubric", name="care_fixed")
    assert pickle.loads(pickle.dumps(reward)).__name__ == "care_fixed"
