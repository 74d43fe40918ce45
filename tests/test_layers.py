"""The package's layers: lower modules never import higher ones (checked on the source, not by importing)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "care_sdk"

# module -> the care_sdk modules it may not import (prefix match)
FORBIDDEN = {
    "_core.py": ("care_sdk.",),
    "errors.py": ("care_sdk.",),
    "variants.py": ("care_sdk.types", "care_sdk.prompts", "care_sdk.reward", "care_sdk.backends"),
    "types.py": ("care_sdk.prompts", "care_sdk.backends", "care_sdk.reward", "care_sdk.integrations"),
    "jsonl.py": ("care_sdk.types", "care_sdk.prompts", "care_sdk.reward"),
    "prompts/__init__.py": ("care_sdk.backends", "care_sdk.reward", "care_sdk.generator", "care_sdk.evaluator"),
    "backends/base.py": ("care_sdk.prompts", "care_sdk.reward", "care_sdk.generator", "care_sdk.evaluator"),
    "_engine.py": ("care_sdk.prompts", "care_sdk.reward", "care_sdk.integrations"),
    "generator.py": ("care_sdk.reward", "care_sdk.integrations", "care_lab.training", "care_lab.bench"),
    "evaluator.py": ("care_sdk.reward", "care_sdk.integrations", "care_lab.training", "care_lab.bench"),
    "context_fit.py": ("care_sdk.reward", "care_sdk.evaluator", "care_sdk.generator", "care_sdk.prompts"),
    "reward.py": ("care_sdk.integrations", "care_lab.training", "care_lab.bench", "care_lab.plots"),
}


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_module_imports_only_lower_layers(module: str) -> None:
    bad = sorted(n for n in imported(SRC / module) if n.startswith(FORBIDDEN[module]))
    assert not bad, f"{module} imports {', '.join(bad)}"
