"""The package's layers: lower modules never import higher ones (checked on the source, not by importing)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from test_lab_layers import imported as imports_of
from test_lab_layers import module_name

SRC = Path(__file__).resolve().parent.parent / "src" / "care_sdk"

# module -> the care_sdk modules it may not import (prefix match)
FORBIDDEN = {
    "_core.py": ("care_sdk.",),
    "errors.py": ("care_sdk.",),
    "variants.py": ("care_sdk.types", "care_sdk.prompts", "care_sdk.reward", "care_sdk.backends"),
    "types.py": ("care_sdk.prompts", "care_sdk.backends", "care_sdk.reward", "care_sdk.integrations"),
    "jsonl.py": ("care_sdk.types", "care_sdk.prompts", "care_sdk.reward"),
    "prompts/__init__.py": (
        "care_sdk.backends",
        "care_sdk.reward",
        "care_sdk.generator",
        "care_sdk.evaluator",
        "care_sdk.guards",
    ),
    "prompts/fence.py": ("care_sdk.guards", "care_sdk.backends", "care_sdk.reward"),
    "backends/base.py": ("care_sdk.prompts", "care_sdk.reward", "care_sdk.generator", "care_sdk.evaluator"),
    "plans.py": ("care_sdk.prompts", "care_sdk.reward", "care_sdk.integrations"),
    "generator.py": ("care_sdk.reward", "care_sdk.integrations", "care_lab.training", "care_lab.bench"),
    "evaluator.py": ("care_sdk.reward", "care_sdk.integrations", "care_lab.training", "care_lab.bench"),
    "bundled/context_fit.py": ("care_sdk.reward", "care_sdk.evaluator", "care_sdk.generator", "care_sdk.prompts"),
    "reward.py": ("care_sdk.integrations", "care_lab.training", "care_lab.bench", "care_lab.plots"),
    "profiles.py": ("care_sdk.types", "care_sdk.prompts", "care_sdk.backends", "care_sdk.reward", "care_sdk.generator"),
}


def imported(path: Path, root: Path = SRC) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``path`` (a module under ``root``, the ``care_sdk``
    folder), read by the lab-layer check's walk: relative imports resolved, imports inside
    functions and under ``TYPE_CHECKING`` and ``import_module`` calls included."""
    module = module_name(path, root.parent)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return list(imports_of(tree, module, is_package=path.name == "__init__.py"))


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_module_imports_only_lower_layers(module: str) -> None:
    bad = sorted({n for _, n in imported(SRC / module) if n.startswith(FORBIDDEN[module])})
    assert not bad, f"{module} imports {', '.join(bad)}"


# -- the bundled area: the only code where the spec ``default`` means anything ------------------

BUNDLED = "care_sdk.bundled"
ALLOWED_BUNDLED_IMPORTS: dict[str, tuple[str, ...]] = {}  # no exception: the command lines' options are core


def bundled_imports(path: Path, root: Path = SRC) -> list[str]:
    """Every import of the bundled area in ``path``: absolute, ``from care_sdk import bundled``, or
    relative (``from .bundled import ...``, ``from ..bundled ...``), under ``TYPE_CHECKING`` or not."""
    return [
        f"{name} (line {line})"
        for line, name in imported(path, root)
        if name == BUNDLED or name.startswith(f"{BUNDLED}.")
    ]


def test_no_core_module_or_transport_imports_the_bundled_area() -> None:
    bad: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        module = path.relative_to(SRC).as_posix()
        if module.startswith("bundled/"):
            continue
        allowed = ALLOWED_BUNDLED_IMPORTS.get(module, ())
        bad += [f"{module}: {name}" for name in bundled_imports(path) if not (allowed and name.startswith(allowed))]
    assert not bad, "the core imports the bundled area: " + "; ".join(bad)


@pytest.mark.parametrize(
    ("source", "module", "found"),
    [
        ("from care_sdk.bundled.weights_head import WeightsHead\n", "generator.py", True),
        ("import care_sdk.bundled\n", "reward.py", True),
        ("from care_sdk import bundled\n", "reward.py", True),
        ("from ..bundled.adapters import AdapterInfo\n", "backends/llamacpp.py", True),
        ("if TYPE_CHECKING:\n    from care_sdk.bundled import adapters\n", "backends/hf.py", True),
        ("from care_sdk.backends import resolve_backend\n", "reward.py", False),
        ('ADD_ONS = {"x": "care_sdk.bundled.addons:x"}\n', "addons.py", False),  # a name, loaded on use
    ],
)
def test_the_bundled_import_check_sees_every_form(tmp_path: Path, source: str, module: str, found: bool) -> None:
    fake = tmp_path / "care_sdk" / module  # only its place in the package matters
    fake.parent.mkdir(parents=True, exist_ok=True)
    fake.write_text(source, encoding="utf-8")
    seen = bundled_imports(fake, root=tmp_path / "care_sdk")
    assert bool(seen) is found, seen


def test_importing_the_core_loads_nothing_of_the_bundled_area() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import care_sdk, care_sdk.generator, care_sdk.reward, care_sdk.backends, care_sdk.addons, "
        "care_sdk.integrations.verl, care_sdk.cli, care_sdk.serve.cli, care_sdk.backends.llamacpp; "
        "print(sorted(m for m in sys.modules if m.startswith('care_sdk.bundled')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
