"""Two distributions from one repository: care-sdk (the root) and care-lab (``lab/``).

The wheels are built here without network (``--no-build-isolation``, hatchling from the dev extra)
and read as zip files: the SDK's holds no lab module and declares no command; the lab's holds the lab
and declares its four commands. ``care score --help`` imports no lab module even with care-lab installed.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _wheel(project: Path, out: Path) -> zipfile.ZipFile:
    offline = ["--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", *offline, "-w", str(out), str(project)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


def _entry_points(wheel: zipfile.ZipFile) -> str:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    return wheel.read(name).decode()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zipfile.ZipFile]:
    tmp = tmp_path_factory.mktemp("wheels")
    return {"sdk": _wheel(REPO, tmp / "sdk"), "lab": _wheel(REPO / "lab", tmp / "lab")}


def test_the_sdk_wheel_holds_no_lab_module(wheels: dict[str, zipfile.ZipFile]) -> None:
    names = wheels["sdk"].namelist()
    assert "care_sdk/__init__.py" in names
    assert "care_sdk/bundled/adapters/context_fit_gate.json" in names
    assert not [n for n in names if n.startswith("care_lab")]
    entry_points = _entry_points(wheels["sdk"])
    assert "care = care_sdk.cli:main" in entry_points
    assert "care_lab" not in entry_points


def test_the_lab_wheel_holds_the_lab_and_adds_its_commands(wheels: dict[str, zipfile.ZipFile]) -> None:
    names = wheels["lab"].namelist()
    assert "care_lab/cli.py" in names
    assert "care_lab/bench/contrast_families.json" in names
    assert not [n for n in names if n.startswith("care_sdk")]
    entry_points = _entry_points(wheels["lab"])
    for command in ("train", "bench", "eval", "plot"):
        assert f"{command} = care_lab.cli:add_{command}" in entry_points
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    assert "Requires-Dist: care-sdk" in wheels["lab"].read(metadata).decode()


def _modules_after(argv: list[str]) -> list[str]:
    code = (
        "import sys, contextlib, io\n"
        "from care_sdk.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        f"        main({argv!r})\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(out.getvalue())\n"
        "print('MODULES', ' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    listing, modules = done.stdout.rsplit("MODULES ", 1)
    return [listing, *modules.split()]


def test_care_score_imports_no_lab_module_and_care_help_lists_the_lab() -> None:
    listing, *modules = _modules_after(["score", "--help"])
    assert "--backend" in listing
    assert [m for m in modules if m.startswith("care_lab")] == []
    listing, *modules = _modules_after(["--help"])
    for command in ("score", "serve", "train", "bench", "eval", "plot"):
        assert command in listing
    listing, *modules = _modules_after(["bench", "--help"])
    assert "care_lab.bench.cli" in modules
    assert "care_lab.training.cli" not in modules
