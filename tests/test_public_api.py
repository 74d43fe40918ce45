import subprocess
import sys

import care_sdk

EXPECTED = {
    "DIMENSIONS",
    "EVALUATOR_PROMPT_VERSION",
    "PROMPT_VERSION",
    "AdaptiveReward",
    "Backend",
    "BackendError",
    "CacheStats",
    "CareError",
    "ConfigError",
    "ContextOverflowError",
    "Criterion",
    "CriterionScore",
    "Dialogue",
    "Dimension",
    "Evaluation",
    "GenerationRequest",
    "GenerationResult",
    "Guards",
    "InputError",
    "MemoryCache",
    "Message",
    "MissingDependencyError",
    "OutputError",
    "RemoteReward",
    "RewardResult",
    "Rubric",
    "RubricCache",
    "RubricEvaluator",
    "RubricGenerator",
    "SqliteCache",
    "TrajectoryResult",
    "TrajectoryReward",
    "Turn",
    "__version__",
    "resolve_backend",
}


def test_exported_names() -> None:
    assert set(care_sdk.__all__) == EXPECTED
    for name in care_sdk.__all__:
        assert getattr(care_sdk, name) is not None


def test_public_names_have_docstrings_with_examples() -> None:
    for name in care_sdk.__all__:
        obj = getattr(care_sdk, name)
        if isinstance(obj, type) or callable(obj):
            doc = obj.__doc__ or ""
            assert "Example" in doc, f"{name} has no example in its docstring"


def test_import_is_light() -> None:
    code = (
        "import sys, care_sdk, care_sdk.testing, care_sdk.cli; care_sdk.cli.build_parser(); "
        "names = ('torch', 'transformers', 'vllm', 'llama_cpp', 'openai', 'trl', 'datasets', 'matplotlib'); "
        "heavy = [m for m in names if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
