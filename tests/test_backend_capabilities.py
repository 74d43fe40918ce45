"""The backend contract: generate, agenerate, identity and close on every backend; reply
log-probabilities and hidden states are optional capabilities, tested with ``isinstance``, and a
wrapper has those of the backend it wraps and no others."""

from __future__ import annotations

import pickle
from collections.abc import Sequence

import pytest

from care_sdk.backends import Backend, ForwardingBackend, HiddenStates, ReplyLogprobs
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
    assert (plain.supports_reply_logprobs, plain.supports_hidden_states) == (False, False)  # the flags follow
    reader = Reader([])
    assert isinstance(reader, ReplyLogprobs) and isinstance(reader, HiddenStates)
    assert (reader.supports_reply_logprobs, reader.supports_hidden_states) == (True, True)


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
