"""care-sdk: turn-adaptive, rubric-based rewards for empathetic dialogue models.

Examples:
    >>> from care_sdk import AdaptiveReward, Rubric
    >>> from care_sdk.testing import ScriptedBackend, evaluation_json
    >>> reward = AdaptiveReward.from_backend(ScriptedBackend([evaluation_json([5, 4, 4, 4, 2, 2])]),
    ...                                      rubric=Rubric.uniform_fixed())
    >>> round(reward.score("I failed my exam.", "That's a hard blow. What happened?").reward, 3)
    0.625
"""

import importlib
from typing import TYPE_CHECKING, Any

from care_sdk.backends import Backend, GenerationRequest, GenerationResult, resolve_backend
from care_sdk.cache import CacheStats, MemoryCache, RubricCache
from care_sdk.errors import (
    BackendError,
    CareError,
    ConfigError,
    ContextOverflowError,
    InputError,
    MissingDependencyError,
    OutputError,
)
from care_sdk.evaluator import RubricEvaluator
from care_sdk.generator import RubricGenerator
from care_sdk.guards import Guards
from care_sdk.profiles import UserProfile
from care_sdk.prompts import EVALUATOR_PROMPT_VERSION, FIXED_CRITERIA_VERSION, GENERATOR_PROMPT_VERSION
from care_sdk.reward import AdaptiveReward
from care_sdk.types import (
    DIMENSIONS,
    Criterion,
    CriterionScore,
    Dialogue,
    Dimension,
    Evaluation,
    Message,
    RewardResult,
    Rubric,
    Turn,
)

__version__ = "0.1.0"

if TYPE_CHECKING:
    from care_sdk.audit import Audit
    from care_sdk.remote import RemoteReward
    from care_sdk.sqlite_cache import SqliteCache
    from care_sdk.trajectory import TrajectoryResult, TrajectoryReward

# Names loaded on first use, so `import care_sdk` stays small: name -> module.
_LAZY = {
    "Audit": "care_sdk.audit",
    "RemoteReward": "care_sdk.remote",
    "SqliteCache": "care_sdk.sqlite_cache",
    "TrajectoryResult": "care_sdk.trajectory",
    "TrajectoryReward": "care_sdk.trajectory",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'care_sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "DIMENSIONS",
    "EVALUATOR_PROMPT_VERSION",
    "FIXED_CRITERIA_VERSION",
    "GENERATOR_PROMPT_VERSION",
    "AdaptiveReward",
    "Audit",
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
    "UserProfile",
    "__version__",
    "resolve_backend",
]
