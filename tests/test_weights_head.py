"""The weights head: its arithmetic, its file, and how RubricGenerator uses it (pure logic; the real model is in
test_weights_head_model.py)."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from care_sdk import RubricGenerator
from care_sdk.bundled.addons import WeightsHeadReader
from care_sdk.bundled.weights_head import WeightsHead, bundled_weights_head
from care_sdk.errors import BackendError, ConfigError, ContextOverflowError
from care_sdk.prompts import GENERATOR_PROMPT_VERSION
from care_sdk.testing import ScriptedBackend, rubric_json
from care_sdk.types import DIMENSIONS, Dimension, as_messages

WIDTH, CAP = 4, 3


def head(**changes: object) -> WeightsHead:
    """A head whose first state feature votes cognitive, second affective, and whose position 3 votes proactive."""
    coef = [[0.0] * 3 for _ in range(WIDTH + CAP + 2)]
    coef[0][0], coef[1][1], coef[WIDTH + 3][2] = 2.0, 2.0, 3.0
    fields: dict[str, object] = {
        "layer": 2,
        "position_cap": CAP,
        "mean": [1.0] * WIDTH,
        "scale": [2.0] * WIDTH,
        "coef": coef,
        "max_context_messages": 2,
        "base_model": "tiny.gguf",
    }
    fields.update(changes)
    return WeightsHead(**fields)  # type: ignore[arg-type]


class StatesBackend(ScriptedBackend):
    """Scripted replies, and a hidden state per text: feature 0 counts the text's "?", feature 1 its "!"."""

    provider = "states"
    model_path = "/models/tiny.gguf"

    def __init__(self, replies: Sequence[str], fail: bool = False, window: int = 10_000) -> None:
        super().__init__(replies)
        self.read: list[tuple[str, int]] = []
        self.fail = fail
        self.window = window
        self.threads: list[int] = []

    def hidden_state_means(self, texts: Sequence[str], layer: int) -> list[list[float]]:
        if self.fail:
            raise BackendError("states failed", provider=self.provider)
        if any(len(t) > self.window for t in texts):
            raise ContextOverflowError(max(map(len, texts)), self.window, provider=self.provider)
        self.read += [(t, layer) for t in texts]
        self.threads.append(threading.get_ident())
        return [[1.0 + 2 * t.count("?"), 1.0 + 2 * t.count("!"), 1.0, 1.0] for t in texts]


def softmax(logits: list[float]) -> list[float]:
    exps = [math.exp(v) for v in logits]
    return [e / sum(exps) for e in exps]


def test_weights_are_the_softmax_of_the_standardised_state_and_the_position() -> None:
    weights = head().weights_from_state([5.0, 1.0, 1.0, 1.0], position=1)  # standardised: 2, 0, 0, 0
    assert list(weights) == list(DIMENSIONS)
    assert list(weights.values()) == pytest.approx(softmax([4.0, 0.0, 0.0]))
    late = head().weights_from_state([1.0, 1.0, 1.0, 1.0], position=9)  # capped at 3: proactive
    assert list(late.values()) == pytest.approx(softmax([0.0, 0.0, 3.0]))
    assert sum(late.values()) == pytest.approx(1.0)


def test_the_position_is_the_supporter_turn_number_capped() -> None:
    dicts = [{"role": "user", "content": "hi"}]
    for k in range(5):
        dicts += [{"role": "assistant", "content": f"reply {k}"}, {"role": "user", "content": "and?"}]
    context = as_messages(dicts)  # the head's reads beneath its public weights() take messages
    assert head().position_of(context[:1]) == 1
    assert head().position_of(context[:3]) == 2
    assert head().position_of(context) == CAP
    text = head().text_of(context)  # the generator prompt's user message, cut to 2 messages
    assert text.startswith("Position: supporter turn 6, after 11 messages (the first 9 not shown).")
    assert "reply 3" not in text and "reply 4" in text


def test_a_head_saves_and_loads(tmp_path: Path) -> None:
    original = head(training={"penalty": 0.1})
    loaded = WeightsHead.load(original.save(tmp_path / "h.json"))
    assert loaded == original and loaded.digest == original.digest
    assert head(mean=[0.5] * WIDTH).digest != original.digest


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", r"h\.json: line 1: not JSON"),
        ("[1, 2]", r"h\.json: a weights head is a JSON object"),
        ('{"layer": 2, "mean": []}', r"h\.json: weights head lacks position_cap, scale, coef"),
        (
            '{"layer": 2, "position_cap": 1, "mean": [0.0], "scale": [1.0], "coef": [[0, 0, 0]]}',
            r"h\.json: weights head: 1 means, 1 scales and 1 coefficient rows do not fit "
            r"\(expected 1 scales and 4 rows\)",
        ),
    ],
)
def test_a_bad_head_file_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "h.json").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        WeightsHead.load(tmp_path / "h.json")
    with pytest.raises(ConfigError, match=r"missing\.json: cannot read weights head"):
        WeightsHead.load(tmp_path / "missing.json")


def test_a_state_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ConfigError, match="a state of 3 values, expected 4"):
        head().weights_from_state([0.0, 0.0, 0.0], position=1)


def test_the_generator_takes_its_weights_from_the_head_and_its_criteria_from_the_reply() -> None:
    backend = StatesBackend([rubric_json({"cognitive": 0, "affective": 0, "proactive": 10})] * 2)
    generator = RubricGenerator(backend, weight_reader=WeightsHeadReader(head()), cache=False)
    assert generator.weight_reader is not None and generator.weight_reader.name == "weights_head"
    assert generator.identity.endswith(f"|weights=head-{head().digest}")
    asked = [{"role": "user", "content": "Why me? Why now?"}]
    rubric = generator.generate(asked)
    expected = head().weights_from_state([5.0, 1.0, 1.0, 1.0], position=1)
    assert rubric.weights == pytest.approx(expected) and rubric.top_dimension is Dimension.COGNITIVE
    decoded = RubricGenerator(backend, cache=False).generate(asked)
    assert decoded.criteria == rubric.criteria and decoded.top_dimension is Dimension.PROACTIVE
    assert backend.read == [(head().text_of(as_messages(asked)), 2)]  # one read a context, on the head's layer


def test_async_generation_reads_the_states_off_the_event_loop() -> None:
    backend = StatesBackend([rubric_json({"cognitive": 0, "affective": 0, "proactive": 10})] * 2)
    generator = RubricGenerator(backend, weight_reader=WeightsHeadReader(head()), cache=False)

    async def generate() -> tuple[object, int]:
        return await generator.agenerate([{"role": "user", "content": "Why me?"}]), threading.get_ident()

    rubric, loop_thread = asyncio.run(generate())
    assert rubric == generator.generate([{"role": "user", "content": "Why me?"}])  # same rubric both ways
    assert backend.threads[0] != loop_thread  # the blocking read ran in a worker thread
    assert backend.threads[1] == threading.get_ident()  # the blocking API reads in place


def test_a_text_over_the_window_is_read_with_fewer_messages() -> None:
    long = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Go on? " + "x" * 500}]
    context = [*long, {"role": "user", "content": "Why? Why?"}]  # the head shows 2 messages: over the window
    backend = StatesBackend([], window=300)
    weights = head().weights([context], backend)[0]
    assert [len(t) < 300 for t, _ in backend.read] == [True]  # only the last message fitted
    assert weights == head().weights_from_state([5.0, 1.0, 1.0, 1.0], position=2)  # the whole context's turn
    with pytest.raises(ContextOverflowError):
        head().weights([[{"role": "user", "content": "y" * 400}]], backend)


def test_a_failed_state_read_fails_that_rubric_only_and_says_why() -> None:
    backend = StatesBackend([rubric_json({"cognitive": 1, "affective": 1, "proactive": 1})], fail=True)
    result = RubricGenerator(backend, weight_reader=WeightsHeadReader(head())).generate_batch(["I failed my exam."])[0]
    assert isinstance(result, BackendError) and "states failed" in str(result)


def test_a_head_needs_a_backend_that_reads_states_and_its_own_model_and_prompt() -> None:
    with pytest.raises(ConfigError, match="needs a backend that reads hidden states"):
        RubricGenerator(ScriptedBackend([]), weight_reader=WeightsHeadReader(head()))
    with pytest.raises(ConfigError, match=r"fitted on other\.gguf's hidden states cannot read tiny\.gguf's"):
        RubricGenerator(StatesBackend([]), weight_reader=WeightsHeadReader(head(base_model="other.gguf")))
    newer = f"generator prompt v0, but this version of care-sdk uses {GENERATOR_PROMPT_VERSION}"
    with pytest.raises(ConfigError, match=newer):
        RubricGenerator(StatesBackend([]), weight_reader=WeightsHeadReader(head(prompt_version="v0")))


def test_the_head_is_off_by_default_for_any_backend_but_the_bundled_generator() -> None:
    assert RubricGenerator(StatesBackend([])).weight_reader is None
    assert RubricGenerator(ScriptedBackend([])).weight_reader is None


def test_the_bundled_head_fits_the_bundled_model_and_prompt() -> None:
    from care_sdk.backends.llamacpp import default_model_path

    shipped = bundled_weights_head()
    assert shipped is not None, "the package ships no weights head"
    shipped.require(prompt_version=GENERATOR_PROMPT_VERSION, model=str(default_model_path()))
    assert (shipped.layer, shipped.max_context_messages, len(shipped.mean)) == (15, 4, 576)
    assert shipped.training["train_turns"] > 8000  # every labelled ESConv train turn
    assert json.dumps(shipped.to_json())  # plain JSON


def test_the_add_on_option_maps_to_the_generator_arguments() -> None:
    import argparse

    from care_sdk.cli_options import add_add_on_option, add_ons_of

    parser = argparse.ArgumentParser()
    add_add_on_option(parser)
    head_on = add_ons_of(parser.parse_args(["--add-on", "weights-head"])).generator_options()
    assert isinstance(head_on["weight_reader"], WeightsHeadReader)
    assert add_ons_of(parser.parse_args([])).generator_options() == {}  # the method's weights by default
    with pytest.raises(ConfigError, match="needs a backend that reads hidden states"):
        RubricGenerator(ScriptedBackend([]), **head_on)
    assert RubricGenerator(StatesBackend([])).weight_reader is None
    expected = add_ons_of(parser.parse_args(["--add-on", "expected-weights"])).generator_options()
    with pytest.raises(ConfigError, match="need a backend that builds forced replies"):
        RubricGenerator(StatesBackend([]), **expected)
