"""The layers of the SDK and the lab, read from the source: which package may import which.

The SDK (``care_sdk``) never imports the lab (``care_lab``). In the lab, the evals and the training
recipes share the data (``care_lab.data``: loaders, data roles, the test-read ledger) and the
simulated users and judge (``care_lab.simulation``) and never import each other; the benchmarks
do not import the training recipes; the shared parts import none of the packages that use them.
Every import counts: at module level, inside functions, under ``TYPE_CHECKING``, relative ones,
``from care_lab import training`` and ``importlib.import_module("care_lab.training")``.

The lab (``lab/src/care_lab``, ``benchmarks/``, ``examples/``, ``training/``) uses only the SDK's public
names: no import of an underscore module of ``care_sdk`` (``care_sdk._text``,
``care_sdk.backends._hf_load``) or of an underscore name from one of its modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = {"care_sdk": ROOT / "src", "care_lab": ROOT / "lab" / "src"}
"""Where each distribution's package lies: care-sdk at the root, care-lab in ``lab/``."""
LAB = (SRC["care_lab"] / "care_lab", ROOT / "benchmarks", ROOT / "examples", ROOT / "training")
"""Where the lab's code lives: everything here may use only the SDK's public names."""

USERS = ("care_lab.training", "care_lab.evals", "care_lab.bench", "care_lab.plots")
"""The lab packages built on the shared parts."""

FORBIDDEN: dict[str, tuple[str, ...]] = {
    "care_sdk": ("care_lab",),
    "care_lab.evals": ("care_lab.training",),
    "care_lab.training": ("care_lab.evals",),
    "care_lab.bench": ("care_lab.training",),
    "care_lab.data": (*USERS, "care_lab.simulation"),
    "care_lab.simulation": USERS,
}
"""For each package (and everything under it), the packages it must not import."""


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def module_name(path: Path, root: Path | None = None) -> str:
    """``lab/src/care_lab/evals/cli.py`` -> ``care_lab.evals.cli``; a package's ``__init__.py`` is the package.
    ``root`` is the folder above the package (by default whichever of :data:`SRC` holds ``path``)."""
    root = root or next(r for r in SRC.values() if path.is_relative_to(r))
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, module: str, *, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every import in ``tree``, relative imports resolved against ``module``.

    ``from a import b`` yields ``a`` and ``a.b`` (``b`` may be a submodule).
    """
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:
                yield node.lineno, f"{target}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                yield node.lineno, node.args[0].value


def violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """The forbidden imports of one module's source, as ``<module>:<line> imports <target>``."""
    found = []
    for line, target in imported(ast.parse(source), module, is_package=is_package):
        for importer, banned in FORBIDDEN.items():
            if _within(module, importer) and any(_within(target, b) for b in banned):
                found.append(f"{module}:{line} imports {target}")
    return sorted(set(found))


def _sources() -> list[Path]:
    return sorted(p for package in ("care_sdk", "care_lab") for p in (SRC[package] / package).rglob("*.py"))


def test_no_package_imports_a_layer_it_must_not() -> None:
    found = [
        v
        for path in _sources()
        for v in violations(path.read_text(encoding="utf-8"), module_name(path), is_package=path.name == "__init__.py")
    ]
    assert not found, "imports across the layers:\n" + "\n".join(found)


def test_the_walk_reads_every_package_and_sees_the_allowed_imports() -> None:
    """Not vacuous: the walk reads the SDK and every lab package, and finds the imports that are allowed."""
    edges: set[tuple[str, str]] = set()
    for path in _sources():
        module = module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for _, target in imported(tree, module, is_package=path.name == "__init__.py"):
            edges.add((".".join(module.split(".")[:2]), ".".join(target.split(".")[:2])))
    for package in ("care_lab.data", "care_lab.simulation", *USERS):
        assert (SRC["care_lab"] / package.replace(".", "/") / "__init__.py").is_file(), package
        assert any(importer == package for importer, _ in edges), package
    for allowed in [
        ("care_lab.evals", "care_lab.simulation"),
        ("care_lab.training", "care_lab.simulation"),
        ("care_lab.training", "care_lab.data"),
        ("care_lab.evals", "care_lab.data"),
        ("care_lab.bench", "care_lab.data"),
        ("care_lab.simulation", "care_lab.data"),
    ]:
        assert allowed in edges, allowed


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("care_lab.evals.pairs", "from care_lab.training.roles import require_role"),
        ("care_lab.evals.pairs", "def f():\n    from ..training import pairs"),
        ("care_lab.evals.cli", "from care_lab import training"),
        ("care_lab.training.policy.evaluate", "from ...evals.judge import DialogueJudge"),
        (
            "care_lab.training.policy.evaluate",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import care_lab.evals",
        ),
        ("care_lab.bench.turn_tasks", "from care_lab.training import r_align"),
        ("care_lab.bench.turn_tasks", "import importlib\nimportlib.import_module('care_lab.training.rewards')"),
        ("care_lab.data.roles", "from care_lab.simulation.profiles import UserProfile"),
        ("care_lab.simulation.episodes", "from care_lab.training.policy.tokens import TokenPolicy"),
        ("care_sdk.bundled.baselines", "def f():\n    from care_lab.data import data_dir"),
        ("care_sdk.cli", "import care_lab.cli"),
    ],
)
def test_a_forbidden_import_is_found(module: str, source: str) -> None:
    assert violations(source, module)


@pytest.mark.parametrize(
    ("module", "source", "is_package"),
    [
        ("care_lab.evals.cli", "from care_lab.simulation import DialogueJudge, load_profiles", False),
        ("care_lab.training.policy.runner", "from care_lab.simulation.episodes import run_episodes", False),
        ("care_lab.bench.turn_tasks", "from care_lab.data.priorities import r_align", False),
        ("care_lab.evals.simuser_run", "from . import winrate\nfrom ..bench.metrics import mean", False),
        ("care_lab.evals", "from .pairs import EvalPair", True),
        ("care_lab.evals.cli", "from care_lab.training_notes import x", False),
        ("care_lab.cli", "from care_lab.training.cli import add_train_commands", False),
    ],
)
def test_an_allowed_import_passes(module: str, source: str, is_package: bool) -> None:
    assert violations(source, module, is_package=is_package) == []


# -- the lab uses the SDK's public names only -------------------------------------------------------


def private_sdk_imports(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """The imports of an underscore module or name of ``care_sdk`` in one module's source, as
    ``<module>:<line> imports <target>`` (``__version__`` and other dunders are public)."""
    found = []
    for line, target in imported(ast.parse(source), module, is_package=is_package):
        parts = target.split(".")
        if parts[0] == "care_sdk" and any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
            found.append(f"{module}:{line} imports {target}")
    return sorted(set(found))


def _lab_sources() -> list[Path]:
    return sorted(p for folder in LAB if folder.is_dir() for p in folder.rglob("*.py"))


def test_the_lab_imports_no_underscore_module_of_the_sdk() -> None:
    sources = _lab_sources()
    lab_src = SRC["care_lab"]
    assert len([p for p in sources if p.is_relative_to(lab_src)]) > 50, "the walk missed lab/src/care_lab"
    assert any(p.is_relative_to(ROOT / "benchmarks") for p in sources), "the walk missed benchmarks/"
    assert any(p.is_relative_to(ROOT / "examples") for p in sources), "the walk missed examples/"
    found = [
        v
        for path in sources
        for v in private_sdk_imports(
            path.read_text(encoding="utf-8"),
            module_name(path, lab_src if path.is_relative_to(lab_src) else ROOT),
            is_package=path.name == "__init__.py",
        )
    ]
    assert not found, "the lab imports SDK internals:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("care_lab.simulation.judge", "from care_sdk._text import clip"),
        ("care_lab.training.models", "def f():\n    from care_sdk.backends._hf_load import cache_gguf"),
        ("care_lab.training.models", "from care_sdk.backends import _hf_load"),
        ("care_lab.evals.simuser", "import care_sdk._engine"),
        ("care_lab.bench.quality", "from care_sdk.cli import _build_reward"),
        ("care_lab.bench.quality", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import care_sdk._calls"),
        ("benchmarks.bench_cost", "import importlib\nimportlib.import_module('care_sdk._copies')"),
    ],
)
def test_a_private_sdk_import_is_found(module: str, source: str) -> None:
    assert private_sdk_imports(source, module)


@pytest.mark.parametrize(
    "source",
    [
        "from care_sdk import __version__, AdaptiveReward",
        "from care_sdk.plans import drive, parse_plan",
        "from care_sdk.backends.hf import cache_gguf",
        "from care_lab.simulation.replies import clip",
        "from care_lab.training._calls import ask",
    ],
)
def test_public_sdk_names_and_lab_internals_pass(source: str) -> None:
    assert private_sdk_imports(source, "care_lab.training.pairs") == []


def test_the_examples_a_user_copies_need_only_the_sdk() -> None:
    """``examples/`` imports no lab module: a user copies them with ``care-sdk`` and their trainer installed."""
    examples = sorted((ROOT / "examples").glob("*.py"))
    assert examples, "no example found"
    found = [
        f"{path.name}:{line} imports {target}"
        for path in examples
        for line, target in imported(ast.parse(path.read_text(encoding="utf-8")), path.stem)
        if _within(target, "care_lab")
    ]
    assert not found, "examples import the lab:\n" + "\n".join(found)
