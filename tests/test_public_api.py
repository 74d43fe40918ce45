import ast
import subprocess
import sys
from pathlib import Path

import care_sdk

EXPECTED = {
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


# -- every public module's surface -------------------------------------------------------------

SRC = Path(__file__).resolve().parent.parent / "src"


def public_modules() -> list[str]:
    """Every module of the SDK whose dotted name has no underscore part (``care_sdk.backends.hf``,
    not ``care_sdk.backends._hf_load``)."""
    names = []
    for path in sorted((SRC / "care_sdk").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if not any(p.startswith("_") for p in parts):
            names.append(".".join(parts))
    return names


def declared_all(module: str) -> list[str] | None:
    path = SRC / module.replace(".", "/")
    source = (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "__all__":
            value = node.value
            assert isinstance(value, ast.List | ast.Tuple), f"{module}: __all__ is not a literal list"
            return [ast.literal_eval(e) for e in value.elts]
    return None


def test_every_public_module_declares_its_surface() -> None:
    modules = public_modules()
    assert len(modules) > 50 and "care_sdk.plans" in modules and "care_sdk.backends.hf" in modules
    missing = [m for m in modules if declared_all(m) is None]
    assert not missing, f"public modules without __all__: {missing}"
    repeated = [m for m in modules if len(set(declared_all(m) or [])) != len(declared_all(m) or [])]
    assert not repeated, f"__all__ names a name twice: {repeated}"


def _module_file(module: str) -> Path:
    path = SRC / module.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _top_level(module: str) -> tuple[dict[str, ast.AST], dict[str, str]]:
    """A module's own top-level definitions (also under ``if``) and the names it imports, with their modules."""
    own: dict[str, ast.AST] = {}
    imports: dict[str, str] = {}
    body = list(ast.parse(_module_file(module).read_text(encoding="utf-8")).body)
    while body:
        node = body.pop(0)
        if isinstance(node, ast.If | ast.Try):
            body.extend(node.body + getattr(node, "orelse", []))
        elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            own[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    own[target.id] = node
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                imports[alias.asname or alias.name] = node.module
    return own, imports


def _definition(module: str, name: str) -> ast.AST | None:
    """Where ``name`` of ``module`` is defined, following ``from care_sdk... import name``."""
    own, imports = _top_level(module)
    if name in own:
        return own[name]
    source = imports.get(name)
    if source is None or not source.startswith("care_sdk"):
        return None
    if name in imports and _module_file(f"{source}.{name}").exists():
        return ast.Module(body=[], type_ignores=[])  # a submodule
    return _definition(source, name)


def test_every_public_name_resolves_and_has_an_example() -> None:
    """Each name in a public module's ``__all__`` is defined there or imported from the SDK; each class
    and function among them has an example in its docstring, where it is defined (the doctests run them).
    Read from the source, so modules whose extras are not installed are checked too."""
    checked, unresolved, without = 0, [], []
    for module in public_modules():
        for name in declared_all(module) or []:
            node = _definition(module, name)
            checked += 1
            if node is None and name != "__version__":
                unresolved.append(f"{module}.{name}")
            elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and "Example" not in (
                ast.get_docstring(node) or ""
            ):
                without.append(f"{module}.{name}")
    assert checked > 300
    assert not unresolved, f"__all__ names what the module neither defines nor imports: {unresolved}"
    assert not without, f"public names without an example: {without}"
