"""Add-ons outside the method through the core's seams: ``--add-on NAME[=SPEC]`` on every command that
takes it, the two protocols, and the bundled ``default`` spec reached through the scheme table."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from care_sdk import AdaptiveReward, ConfigError, Rubric, RubricEvaluator, RubricGenerator
from care_sdk.addons import ADD_ONS, AddOns, ContextFitReader, WeightRead, WeightReader, add_ons, parse_add_on
from care_sdk.backends import SPEC_SCHEMES, Backend, BackendPool, resolve_backend, spec_per_role
from care_sdk.bundled.addons import ExpectedWeightsReader, WeightsHeadReader
from care_sdk.cli import build_parser, main
from care_sdk.errors import CareError
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
from care_sdk.types import DIMENSIONS, Context

CONTEXT = "I failed my driving test again."


# -- the option -----------------------------------------------------------------------------------

COMMANDS = (["score", "in.jsonl"], ["serve"], ["bench", "quality"], ["bench", "robustness"])


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        ([], []),
        (["weights-head"], [("weights-head", None)]),
        (["expected-weights"], [("expected-weights", None)]),
        (["context-fit"], [("context-fit", None)]),
        (["context-fit=llamacpp:/models/m.gguf"], [("context-fit", "llamacpp:/models/m.gguf")]),
        (["weights-head=head.json", "context-fit"], [("weights-head", "head.json"), ("context-fit", None)]),
    ],
)
def test_every_command_takes_the_add_on_option(
    command: list[str], given: list[str], parsed: list[tuple[str, str | None]]
) -> None:
    flags = [part for value in given for part in ("--add-on", value)]
    assert build_parser().parse_args([*command, *flags]).add_on == parsed


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_the_research_knobs_are_gone(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    for knob in ("--weight-reader", "--context-fit", "--context-fit-baselines", "--context-fit-check"):
        with pytest.raises(SystemExit) as stop:
            build_parser().parse_args([*command, knob, "on"])
        assert stop.value.code == 2
        assert "unrecognized arguments" in capsys.readouterr().err


def test_an_unknown_add_on_is_a_usage_error_listing_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["score", "in.jsonl", "--add-on", "shift-check"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--add-on" in err and "unknown add-on 'shift-check'" in err
    assert "choose from weights-head, expected-weights, context-fit" in err


def test_an_empty_spec_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["score", "in.jsonl", "--add-on", "context-fit="])
    assert "needs a spec after '='" in capsys.readouterr().err


def test_two_weight_readers_are_refused_naming_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"id": "d", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    fit = ["--add-on", "context-fit=openai:m@http://127.0.0.1:9/v1"]  # would fail differently if built first
    both = ["--add-on", "weights-head", *fit, "--add-on", "expected-weights"]
    assert main(["score", str(source), "--quiet", *both]) == 2  # refused before any add-on is built
    err = capsys.readouterr().err
    assert "care score: --add-on: add-ons weights-head and expected-weights both read the rubric's weights" in err
    assert main(["score", str(source), "--quiet", "--add-on", "context-fit", "--add-on", "context-fit"]) == 2
    assert "context-fit given more than once" in capsys.readouterr().err


def test_add_ons_build_what_each_name_stands_for(tmp_path: Path) -> None:
    assert add_ons(None) == AddOns() == add_ons([]) and AddOns().generator_options() == {}
    head = add_ons(["weights-head"]).weight_reader
    assert isinstance(head, WeightsHeadReader) and isinstance(head, WeightReader) and head.name == "weights_head"
    expected = add_ons("expected-weights=2").weight_reader
    assert isinstance(expected, ExpectedWeightsReader) and expected.branch == 2
    asked = add_ons("expected-weights")
    assert asked.generator_options() == {"weight_reader": asked.weight_reader} and asked.context_fit is None
    assert set(ADD_ONS) == {"weights-head", "expected-weights", "context-fit"}
    with pytest.raises(ConfigError, match=r"missing\.json: cannot read weights head"):
        add_ons(["weights-head=" + str(tmp_path / "missing.json")])
    with pytest.raises(ConfigError, match="the spec is a branch"):
        add_ons("expected-weights=many")
    assert parse_add_on("context-fit = hf:gpt2") == ("context-fit", "hf:gpt2")


def test_context_fit_on_another_spec_reads_it_there() -> None:
    pytest.importorskip("openai", reason="needs the openai extra")
    # a hosted API cannot read a given reply's log-probability: the spec reached ContextFit
    with pytest.raises(ConfigError, match="context fit needs a backend that reads the log-probability"):
        add_ons("context-fit=openai:m@http://127.0.0.1:9/v1")


def test_the_verl_plug_in_takes_add_ons_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from care_sdk.integrations.verl import get_reward

    backend = ScriptedBackend([])
    assert get_reward(backend).parts == ("care",)
    with pytest.raises(ConfigError, match="builds forced replies"):  # the scripted model cannot force replies
        get_reward(backend, add_ons="expected-weights")
    monkeypatch.setenv("CARE_ADD_ONS", "weights-head,expected-weights")
    with pytest.raises(ConfigError, match="weights-head and expected-weights both read"):
        get_reward(backend)
    monkeypatch.setenv("CARE_ADD_ONS", "")
    assert get_reward(backend) is get_reward(backend, add_ons=[])


# -- the protocols --------------------------------------------------------------------------------


class FlatReader:
    """A weight reader of one's own: every dimension alike, read with one forced-free request per rubric."""

    name = "flat_weights"
    identity = "flat"

    def __init__(self) -> None:
        self.checked: list[str] = []

    def check(self, backend: Backend, *, prompt_version: str) -> None:
        self.checked.append(prompt_version)

    def read(self, reads: Sequence[WeightRead], backend: Backend) -> Any:
        results = yield [read.request for read in reads]  # one more request per rubric, on the engine
        return [CareError("no reply") if r.error is not None else {d: 1.0 for d in DIMENSIONS} for r in results]


class HalfFit:
    """A context fit of one's own: 0.5 for every reply, paid as the plain product."""

    identity = "half"

    def score_batch(self, items: Sequence[tuple[Context, str]]) -> list[float | CareError]:
        return [0.5 for _ in items]

    async def ascore_batch(self, items: Sequence[tuple[Context, str]]) -> list[float | CareError]:
        return self.score_batch(items)

    def combine(self, rubric_reward: float, fit: float) -> float:
        return rubric_reward * fit


def test_a_weight_reader_of_ones_own_reads_the_weights_and_names_itself() -> None:
    written = rubric_json({"cognitive": 8, "affective": 1, "proactive": 1})
    backend = ScriptedBackend([written, written])
    reader = FlatReader()
    generator = RubricGenerator(backend, weight_reader=reader, cache=False)
    assert reader.checked and generator.identity.endswith("|weights=flat")
    rubric = generator.generate(CONTEXT)
    assert all(abs(w - 1 / 3) < 1e-9 for w in rubric.weights.values()) and len(backend.requests) == 2
    reward = AdaptiveReward(generator, RubricEvaluator(ScriptedBackend([])))
    assert reward.parts == ("care", "flat_weights")
    assert AdaptiveReward(generator, RubricEvaluator(ScriptedBackend([])), variant="uniform_weights").parts == (
        "uniform_weights",
    )  # the reader's weights are not used by a uniform-weights reward
    with pytest.raises(ConfigError, match="weight_reader: a str is not a WeightReader"):
        RubricGenerator(ScriptedBackend([]), weight_reader="weights-head")  # type: ignore[arg-type]


def test_a_context_fit_of_ones_own_scales_the_reward_sync_and_async() -> None:
    fit = HalfFit()
    assert isinstance(fit, ContextFitReader)
    evaluator = RubricEvaluator(ScriptedBackend([evaluation_json([5] * 6)] * 2))
    reward = AdaptiveReward(evaluator=evaluator, rubric=Rubric.uniform_fixed(), context_fit=fit)
    result = reward.score(CONTEXT, "Again? What happened this time?")
    assert (result.reward, result.rubric_reward, result.context_fit) == (0.5, 1.0, 0.5)
    assert result.parts == ("care", "context_fit")
    again = asyncio.run(reward.ascore(CONTEXT, "Again? What happened this time?"))
    assert again.reward == 0.5 and again.parts == result.parts


# -- the bundled `default` spec through the scheme table -------------------------------------------


def test_default_is_opened_by_the_bundled_area_with_the_role_s_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    import care_sdk.bundled.backend as bundled_backend
    from care_sdk.bundled.adapters import bundled_adapter

    opened: list[tuple[str | None, dict[str, Any]]] = []

    def open_base(rest: str, role: str | None, options: dict[str, Any]) -> Backend:  # no model loaded
        opened.append((role, dict(options)))
        return ScriptedBackend([])

    monkeypatch.setattr(bundled_backend, "open_base", open_base)
    assert SPEC_SCHEMES["default"].target == "care_sdk.bundled.backend:open_default"
    assert spec_per_role("default") and not spec_per_role("base") and not spec_per_role("llamacpp:m.gguf")
    resolve_backend("default", role="generator", n_ctx=1024)
    resolve_backend("default", role="evaluator")
    resolve_backend(" Default ")  # no role: the base model
    assert opened == [
        ("generator", {"n_ctx": 1024, "adapter": bundled_adapter("generator")}),
        ("evaluator", {"adapter": bundled_adapter("evaluator")}),
        (None, {}),
    ]
    with BackendPool() as pool:
        assert pool.get("default", role="generator") is not pool.get("default", role="evaluator")
        assert pool.get("default", role="generator") is pool.get("default", role="generator")


def test_unknown_and_malformed_specs_name_the_valid_forms() -> None:
    for spec in ("nonsense", "default:x", "openai", "llamacpp:"):
        with pytest.raises(
            ConfigError, match=r"unknown backend spec .*valid forms: default, base, llamacpp:PATH\.gguf"
        ):
            resolve_backend(spec)


def test_is_default_spec_moved_and_stays_importable() -> None:
    from care_sdk.backends import is_default_spec
    from care_sdk.bundled.backend import is_default_spec as moved

    assert is_default_spec is moved and is_default_spec("default") and not is_default_spec("base")


@pytest.mark.slow
def test_the_real_default_spec_gives_each_role_its_bundled_adapter(model_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="needs the llamacpp extra")
    generator = resolve_backend("default", role="generator", n_ctx=512, n_threads=1)
    evaluator = resolve_backend("default", role="evaluator", n_ctx=512, n_threads=1)
    base = resolve_backend("base", n_ctx=512, n_threads=1)
    try:
        assert generator.adapter.role == "generator" and evaluator.adapter.role == "evaluator"  # type: ignore[attr-defined]
        assert base.adapter is None  # type: ignore[attr-defined]
        assert base.identity.startswith("llamacpp:") and model_path.name in base.identity
    finally:
        for backend in (generator, evaluator, base):
            backend.close()
