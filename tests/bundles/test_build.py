"""Building and inspecting bundles on the host: a standard wheel plus the entry module and two
console scripts, built once per content, and errors that name the file and the field.

The project's build backend (hatchling) comes from the package index the first time; the
uv cache keeps it after.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from orchestrator.bundles import BundleError, build_bundle, inspect_bundle
from orchestrator.bundles import build as build_module
from orchestrator.cli import main

PYPROJECT = """\
[project]
name = "Demo_Harness"
version = "0.2.0"
requires-python = ">=3.9"
dependencies = ["six>=1.16", "attrs; python_version >= '3.8'", "rich; extra == 'fancy'"]

[project.optional-dependencies]
fancy = ["rich"]

[project.scripts]
demo-tool = "demo_harness.solver:main"

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
"""
SOLVER = """\
from container_runtime import AgentWorkflow, Grader


class Solver(AgentWorkflow):
    async def run(self, ctx):
        return {"ok": True}


class Checker(Grader):
    async def grade(self, ctx):
        ctx.set_reward(1.0)


def main():
    pass
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "demo_harness").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "demo_harness" / "__init__.py").write_text("")
    (root / "demo_harness" / "solver.py").write_text(SOLVER)
    return root


def test_a_bundle_is_the_projects_wheel_plus_an_entry_module_and_two_scripts(
    project: Path, tmp_path: Path
) -> None:
    wheel = build_bundle(
        project, "demo_harness.solver:Solver", "demo_harness.solver:Checker", cache=tmp_path
    )
    info = inspect_bundle(wheel)
    assert (info.name, info.version, info.requires_python) == ("Demo_Harness", "0.2.0", ">=3.9")
    # Markers kept, the extras-gated requirement dropped.
    assert info.requirements == ('attrs; python_version >= "3.8"', "six>=1.16")
    assert (info.agent_script, info.grade_script) == ("demo-harness-agent", "demo-harness-grade")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry = archive.read("trialbox_bundle_main.py").decode()
        points = archive.read("demo_harness-0.2.0.dist-info/entry_points.txt").decode()
        record = archive.read("demo_harness-0.2.0.dist-info/RECORD").decode()
    assert "demo_harness/solver.py" in names
    assert "from demo_harness.solver import Solver" in entry  # bound at build time
    assert "from demo_harness.solver import Checker" in entry
    assert "demo-tool = demo_harness.solver:main" in points  # the project's own script kept
    assert "trialbox_bundle_main.py,sha256=" in record
    assert not list(project.glob("dist")) and not list(project.glob("build"))  # folder untouched


def test_an_unchanged_project_is_not_built_again_and_a_changed_one_is(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds: list[Path] = []
    real = build_module._build_wheel

    def counted(*args: Any) -> Path:
        builds.append(args[1])
        return real(*args)

    monkeypatch.setattr(build_module, "_build_wheel", counted)
    first = build_bundle(project, "demo_harness.solver:Solver", cache=tmp_path)
    again = build_bundle(project, "demo_harness.solver:Solver", cache=tmp_path)
    assert (again, len(builds)) == (first, 1)
    (project / "demo_harness" / "__pycache__").mkdir()  # not content: still no build
    (project / "demo_harness" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert build_bundle(project, "demo_harness.solver:Solver", cache=tmp_path) == first
    assert len(builds) == 1
    (project / "demo_harness" / "solver.py").write_text(SOLVER + "\n# changed\n")
    changed = build_bundle(project, "demo_harness.solver:Solver", cache=tmp_path)
    assert (changed != first, len(builds)) == (True, 2)
    assert inspect_bundle(changed).grade_script is None  # built without a grader


def test_the_classes_default_to_tool_trialbox(project: Path, tmp_path: Path) -> None:
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        PYPROJECT + '\n[tool.trialbox]\nworkflow = "demo_harness.solver:Solver"\n'
        'grader = "demo_harness.solver:Checker"\n'
    )
    info = inspect_bundle(build_bundle(project, cache=tmp_path))
    assert info.grade_script == "demo-harness-grade"


@pytest.mark.parametrize(
    ("workflow", "message"),
    [
        (None, r"pyproject\.toml: no workflow; give one"),
        ("demo_harness.solver", r"build_bundle\(workflow=\.\.\.\).*is not 'package\.module:Class'"),
        (
            "demo_harness.nowhere:Solver",
            r"module 'demo_harness\.nowhere' is not in the built wheel",
        ),
        ("demo_harness.solver:Missing", r"module 'demo_harness\.solver' defines no 'Missing'"),
    ],
)
def test_a_workflow_that_cannot_be_bound_is_refused_naming_where(
    project: Path, tmp_path: Path, workflow: str | None, message: str
) -> None:
    with pytest.raises(BundleError, match=message):
        build_bundle(project, workflow, cache=tmp_path)


def test_a_declared_class_that_cannot_be_bound_names_the_pyproject_field(
    project: Path, tmp_path: Path
) -> None:
    (project / "pyproject.toml").write_text(
        PYPROJECT + '\n[tool.trialbox]\nworkflow = "demo_harness.solver:Solver"\ngrader = "x"\n'
    )
    with pytest.raises(BundleError, match=r"pyproject\.toml: field tool\.trialbox\.grader"):
        build_bundle(project, cache=tmp_path)


def test_a_folder_without_pyproject_and_a_plain_wheel_are_refused(
    tmp_path: Path, project: Path
) -> None:
    with pytest.raises(BundleError, match=r"pyproject\.toml: missing"):
        build_bundle(tmp_path, "a.b:C", cache=tmp_path)
    plain = tmp_path / "plain-1.0-py3-none-any.whl"
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr("plain-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: plain\n")
    with pytest.raises(BundleError, match="not a trialbox bundle"):
        inspect_bundle(plain)


def test_trialbox_bundle_build_and_inspect(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bundle", "build", str(project), "--workflow", "demo_harness.solver:Solver", "--json"]
    assert main(args) == 0
    built = json.loads(capsys.readouterr().out)
    assert built["agent_script"] == "demo-harness-agent"
    assert built["requirements"] == ['attrs; python_version >= "3.8"', "six>=1.16"]
    assert main(["bundle", "inspect", built["wheel"]]) == 0
    assert "demo-harness-agent" in capsys.readouterr().out
    assert main(["bundle", "build", str(project)]) == 1  # no workflow anywhere
    assert "no workflow" in capsys.readouterr().out
