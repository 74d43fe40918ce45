"""The backend contract: generate, agenerate, identity and close on every backend; forced replies,
reply log-probabilities, hidden states and a trained adapter are optional capabilities, tested with
``isinstance``, and a wrapper has those of the backend it wraps and no others."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path

import pytest

from care_sdk.backends import (
    Backend,
    ForcedReplies,
    ForcedReply,
    ForcedRequest,
    ForwardingBackend,
    HiddenStates,
    ReplyLogprobs,
    TrainedAdapter,
)
from care_sdk.bundled.context_fit import ContextFit
from care_sdk.bundled.weights_head import bundled_weights_head
from care_sdk.errors import BackendError, ConfigError
from care_sdk.testing import RecordingBackend, ScriptedBackend
from care_sdk.types import Message


class Reader(ScriptedBackend):
    """A scripted backend that also reads reply log-probabilities and hidden states."""

    def reply_logprobs(self, messages: Sequence[Message], reply: str) -> list[float]:
        return [-1.0] * len(reply.split())

    def hidden_state_means(self, texts: Sequence[str], layer: int) -> list[list[float]]:
        return [[float(len(t)), float(layer)] for t in texts]


def test_a_transport_has_no_optional_capability_unless_it_implements_it() -> None:
    plain = ScriptedBackend([])
    assert not isinstance(plain, ReplyLogprobs) and not isinstance(plain, HiddenStates)
    assert not hasattr(plain, "reply_logprobs") and not hasattr(plain, "hidden_state_means")
    reader = Reader([])
    assert isinstance(reader, ReplyLogprobs) and isinstance(reader, HiddenStates)
    contract = {"generate", "agenerate", "identity", "close"}
    flags = {n for n in dir(plain) if n.startswith("supports_")} | {"serial", "adapter"} & set(dir(plain))
    assert contract <= set(dir(plain)) and not flags  # no flag beside the contract and the capabilities


def test_a_wrapper_forwards_the_capabilities_of_its_inner_backend_and_only_those() -> None:
    plain = RecordingBackend(ScriptedBackend([]))
    assert not isinstance(plain, ReplyLogprobs) and not isinstance(plain, HiddenStates)
    wrapped = RecordingBackend(Reader([]))
    assert isinstance(wrapped, ReplyLogprobs) and isinstance(wrapped, HiddenStates)
    assert wrapped.reply_logprobs([Message(role="user", content="hi")], "oh hello") == [-1.0, -1.0]
    assert wrapped.hidden_state_means(["abc"], 3) == [[3.0, 3.0]]
    twice = ForwardingBackend(wrapped)  # a wrapper of a wrapper: the same capabilities
    assert isinstance(twice, ReplyLogprobs) and twice.hidden_state_means(["ab"], 1) == [[2.0, 1.0]]
    copy = pickle.loads(pickle.dumps(wrapped))  # wrappers pickle by value, capabilities included
    assert isinstance(copy, HiddenStates) and copy.hidden_state_means(["abc"], 3) == [[3.0, 3.0]]
    assert isinstance(copy.inner, Reader) and not isinstance(pickle.loads(pickle.dumps(plain)), ReplyLogprobs)


def test_the_add_ons_refuse_a_backend_without_the_capability_they_read() -> None:
    with pytest.raises(ConfigError, match="scripted cannot"):
        ContextFit(RecordingBackend(ScriptedBackend([])))
    assert ContextFit(RecordingBackend(Reader([]))).pmi("I failed.", "oh no") == 0.0  # -1 per word either way
    head = bundled_weights_head()
    assert head is not None
    with pytest.raises(BackendError, match="cannot read hidden states"):
        head.weights(["I failed my exam."], ScriptedBackend([]))


def test_the_backends_that_hold_the_model_have_both_capabilities(llama_backend: Backend) -> None:
    assert isinstance(llama_backend, ReplyLogprobs) and isinstance(llama_backend, HiddenStates)
    wrapped = RecordingBackend(llama_backend)
    assert isinstance(wrapped, ReplyLogprobs) and isinstance(wrapped, HiddenStates)
    assert len(wrapped.hidden_state_means(["I lost my job."], 15)[0]) == 576


def likes_2(text: str, chars: Sequence[str]) -> list[float]:
    return [0.0 if c == "2" else -2.0 for c in chars]


def test_a_wrapper_is_an_instance_of_a_class_that_has_exactly_its_inner_capabilities() -> None:
    forced = ScriptedBackend([], forced=likes_2)
    assert isinstance(forced, ForcedReplies) and not isinstance(ScriptedBackend([]), ForcedReplies)
    for wrapper in (RecordingBackend(forced), ForwardingBackend(RecordingBackend(Reader([], forced=likes_2)))):
        assert isinstance(wrapper, ForcedReplies)
        # the capability is the class's, not an attribute written into the instance
        assert not {"forced_replies", "reply_logprobs", "hidden_state_means"} & set(vars(wrapper))
        assert type(wrapper).__name__ in ("RecordingBackend", "ForwardingBackend")
    both = RecordingBackend(Reader([], forced=likes_2))
    assert {c.__name__ for c in (ForcedReplies, ReplyLogprobs, HiddenStates) if isinstance(both, c)} == {
        "ForcedReplies",
        "ReplyLogprobs",
        "HiddenStates",
    }
    assert not isinstance(both, TrainedAdapter)
    slot = ForcedReply(segments=("score: ", "."), choices=("1", "2"))
    assert both.forced_replies([ForcedRequest(messages=(), reply=slot)])[0].text == "score: 2."
    assert both.requests and both.batches == [1]  # forced replies go through the wrapper's hooks
    again = pickle.loads(pickle.dumps(both))
    assert isinstance(again, ForcedReplies) and type(again) is type(both)


def test_a_trained_adapter_is_a_capability_the_components_read(tmp_path: Path) -> None:
    from care_sdk import RubricEvaluator, RubricGenerator
    from care_sdk.backends.lora import AdapterInfo

    class Adapted(ScriptedBackend):
        adapter = AdapterInfo(path=tmp_path / "g.gguf", role="generator", prompt_version="v2", max_context_messages=3)

    wrapped = RecordingBackend(Adapted([]))
    assert isinstance(wrapped, TrainedAdapter) and wrapped.adapter is Adapted.adapter
    assert RubricGenerator(wrapped).max_context_messages == 3  # the cut it was trained with
    with pytest.raises(ConfigError, match="a generator adapter cannot serve as the evaluator"):
        RubricEvaluator(wrapped)


def test_an_evaluator_reads_expected_scores_when_its_adapter_was_trained_for_them(tmp_path: Path) -> None:
    from care_sdk import RubricEvaluator
    from care_sdk.backends.lora import AdapterInfo

    def backend(training: dict[str, str]) -> ScriptedBackend:
        made = ScriptedBackend([])
        made.adapter = AdapterInfo(  # type: ignore[attr-defined]
            path=tmp_path / "e.gguf", role="evaluator", prompt_version="v2", training=training
        )
        return made

    assert RubricEvaluator(backend({"scores": "expected"})).use_logprobs
    assert not RubricEvaluator(backend({})).use_logprobs  # an SFT adapter: the most likely digit
    assert not RubricEvaluator(backend({"scores": "expected"}), use_logprobs=False).use_logprobs
    assert RubricEvaluator(ScriptedBackend([]), use_logprobs=True).use_logprobs
    assert not RubricEvaluator(ScriptedBackend([])).use_logprobs  # no adapter
