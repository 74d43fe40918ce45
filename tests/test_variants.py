"""The variant vocabulary and the one reward factory: every option reaches the rubric."""

from __future__ import annotations

import pytest

from care_sdk import AdaptiveReward, ConfigError, Rubric, RubricEvaluator, RubricGenerator
from care_sdk.testing import ScriptedBackend, evaluation_json, rubric_json
from care_sdk.types import fixed_criteria
from care_sdk.variants import VARIANTS, VariantField, as_variant, variant_modes, variant_of

# A 1/0/0 rubric and an evaluation that meets the cognitive criteria fully and nothing else.
COGNITIVE_ONLY = Rubric.uniform_fixed().with_weights({"cognitive": 1, "affective": 0, "proactive": 0})
ONLY_COGNITIVE_MET = evaluation_json([5, 5, 1, 1, 1, 1])


def test_a_given_rubric_gets_uniform_weights() -> None:
    reward = AdaptiveReward(
        evaluator=RubricEvaluator(ScriptedBackend([ONLY_COGNITIVE_MET])),
        rubric=COGNITIVE_ONLY,
        variant="uniform_weights",
    )
    result = reward.score("I failed my exam.", "That must hurt.")
    assert result.reward == pytest.approx(1 / 3)
    assert result.rubric is not None and list(result.rubric.weights.values()) == pytest.approx([1 / 3] * 3)


def test_a_given_rubric_gets_the_fixed_criteria() -> None:
    rubric = Rubric(weights=COGNITIVE_ONLY.weights, criteria=COGNITIVE_ONLY.criteria[:3] + COGNITIVE_ONLY.criteria[4:])
    reward = AdaptiveReward(evaluator=RubricEvaluator(ScriptedBackend([])), rubric=rubric, variant="fixed_criteria")
    assert reward.rubric is not None and reward.rubric.criteria == fixed_criteria()


def test_without_options_a_given_rubric_is_kept() -> None:
    reward = AdaptiveReward(evaluator=RubricEvaluator(ScriptedBackend([ONLY_COGNITIVE_MET])), rubric=COGNITIVE_ONLY)
    assert reward.score("I failed.", "Oh.").reward == pytest.approx(1.0)


def test_one_vocabulary() -> None:
    assert VARIANTS == ("care", "uniform_weights", "fixed_criteria", "fixed_rubric")
    assert as_variant("full") == "care"
    for variant in VARIANTS:
        assert variant_of(*variant_modes(variant)) == variant
    with pytest.raises(ConfigError, match="unknown reward variant 'uniform'"):
        as_variant("uniform")
    with pytest.raises(ConfigError, match="weights must be"):
        variant_of("random", "fixed")


def test_variant_field_reads_the_old_spelling() -> None:
    from pydantic import BaseModel, ValidationError

    class Settings(BaseModel):
        variant: VariantField = "care"

    assert Settings(variant="full").variant == "care"  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="unknown reward variant"):
        Settings(variant="nope")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("variant", "reward"),
    [("care", 0.5), ("uniform_weights", 1 / 3), ("fixed_criteria", 0.5), ("fixed_rubric", 1 / 3)],
)
def test_each_variant_scores_as_named(variant: str, reward: float) -> None:
    def script(request: object) -> str:
        if request.purpose == "rubric":  # type: ignore[attr-defined]
            return rubric_json({"cognitive": 1, "affective": 1, "proactive": 0})
        return ONLY_COGNITIVE_MET

    backend = ScriptedBackend(script)
    built = AdaptiveReward.from_backend(backend, variant=variant)
    assert built.variant == variant
    assert built.score("I lost my job.", "What happened?").reward == pytest.approx(reward)
    assert (built.generator is None) == (variant == "fixed_rubric")


def test_the_factory_shares_a_spec_both_roles_use() -> None:
    pytest.importorskip("openai", reason="needs the openai extra")
    shared, judge = "openai:shared@http://127.0.0.1:9/v1", "openai:judge@http://127.0.0.1:9/v1"  # nothing is sent
    reward = AdaptiveReward.from_backend(shared, evaluator_backend=judge)
    assert reward.generator is not None and reward.generator.backend.identity == shared
    assert reward.evaluator.backend.identity == judge
    fixed = AdaptiveReward.from_backend("no-such-scheme:x", evaluator_backend=judge, variant="fixed_rubric")
    assert fixed.generator is None  # the generator's spec is never resolved
    one = AdaptiveReward.from_backend(shared)
    assert one.generator is not None and one.generator.backend is one.evaluator.backend  # one model serves both


def test_the_fixed_rubric_variant_drops_the_generator() -> None:
    gen = RubricGenerator(ScriptedBackend([]))
    reward = AdaptiveReward(gen, RubricEvaluator(ScriptedBackend([])), variant="fixed_rubric")
    assert reward.generator is None and reward.rubric == Rubric.uniform_fixed()


def cli_reward(argv: list[str]) -> AdaptiveReward:
    """The reward ``care score`` builds from these arguments."""
    from care_sdk.cli import build_parser
    from care_sdk.cli_options import reward_recipe

    return AdaptiveReward.from_backend(**reward_recipe(build_parser().parse_args(argv)))


@pytest.mark.parametrize(
    ("flags", "variant"),
    [
        ([], "care"),
        (["--variant", "uniform_weights"], "uniform_weights"),
        (["--variant", "fixed_rubric"], "fixed_rubric"),
    ],
)
def test_care_score_builds_its_reward_with_the_factory(flags: list[str], variant: str) -> None:
    pytest.importorskip("openai", reason="needs the openai extra")
    spec = "openai:m@http://127.0.0.1:9/v1"  # built lazily: nothing is sent
    reward = cli_reward(["score", "in.jsonl", "--backend", spec, *flags])
    assert reward.variant == variant and (reward.generator is None) == (variant == "fixed_rubric")


def test_care_score_has_one_spelling_for_ablations(capsys: pytest.CaptureFixture[str]) -> None:
    from care_sdk.cli import build_parser

    for old in ("--weights", "--criteria"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["score", "in.jsonl", old, "uniform"])
        assert f"unrecognized arguments: {old} uniform" in capsys.readouterr().err


def test_care_score_passes_its_add_ons_to_the_generator() -> None:
    pytest.importorskip("openai", reason="needs the openai extra")
    spec = "openai:m@http://127.0.0.1:9/v1"  # built lazily: nothing is sent
    args = ["score", "in.jsonl", "--backend", spec]
    reward = cli_reward(args)
    assert reward.generator is not None and reward.generator.weight_reader is None
    assert reward.context_fit is None and reward.parts == ("care",)
    with pytest.raises(ConfigError, match="builds forced replies"):  # a hosted API cannot force replies
        cli_reward([*args, "--add-on", "expected-weights"])
    with pytest.raises(ConfigError, match="reads hidden states"):  # nor read hidden states
        cli_reward([*args, "--add-on", "weights-head"])


def test_policy_configs_name_add_ons_as_the_command_line_does() -> None:
    from pydantic import ValidationError

    from care_lab.training.policy.config import RewardSettings

    assert RewardSettings().add_ons == () and RewardSettings(add_ons=["context-fit=base"]).add_ons == (
        "context-fit=base",
    )
    with pytest.raises(
        ValidationError, match=r"reward.context_fit is now reward.add_ons: write add_ons: \[context-fit\]"
    ):
        RewardSettings.model_validate({"context_fit": "on"})
    with pytest.raises(ValidationError, match="unknown add-on 'shift-check'"):
        RewardSettings(add_ons=("shift-check",))


def test_the_policy_recipe_reads_context_fit_against_hi_when_asked_for() -> None:
    pytest.importorskip("llama_cpp", reason="needs the llamacpp extra")
    pytest.importorskip("yaml", reason="needs the train extra")
    from care_lab.training.policy.components import build_reward as recipe_reward
    from care_lab.training.policy.config import RewardSettings
    from care_sdk.backends import BackendPool
    from care_sdk.bundled.context_fit import BUNDLED_GATE

    pool = BackendPool({"default": ScriptedBackend([])})  # rubrics and scores scripted; the fit reads the bundled model
    reward = recipe_reward(RewardSettings(add_ons=("context-fit",)), pool)
    assert reward.context_fit is not None and reward.context_fit.gate == BUNDLED_GATE
    assert recipe_reward(RewardSettings(), pool).context_fit is None
