"""`build_bundle`: a user's rollout project as a standard wheel, built once per content.

The project's own build backend makes the wheel (`uv build`, from a snapshot of the project,
so nothing is written into the user's folder), then the entry module and the two console
scripts are added (`entry.py`). Built wheels are kept under the cache by a hash of the
project's files and of the classes bound, so an unchanged project is never built again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import tomllib
from pathlib import Path

from orchestrator.bundles.entry import Bound, ClassRef, add_entry
from orchestrator.bundles.errors import BundleError
from orchestrator.bundles.tools import tail, uv
from orchestrator.common.wheelhouse import cache_dir as default_cache_dir

BUNDLE_FORMAT = "1"  # bumped when what a bundle adds changes: part of the cache key
# Never part of a project's content: tools' caches and earlier builds' output.
SKIPPED_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", "__pycache__", ".pytest_cache", ".ruff_cache",
    ".mypy_cache", ".tox", ".nox", "build", "dist", "node_modules",
})  # fmt: skip


def _settings(project: Path) -> tuple[str | None, str | None]:
    """`[tool.trialbox]` workflow and grader of the project's pyproject.toml."""
    pyproject = project / "pyproject.toml"
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(
            f"{pyproject}: missing; a bundle is built from a Python project with a "
            "pyproject.toml ([project] name, version, dependencies)"
        ) from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BundleError(f"{pyproject}: cannot be read: {exc}") from exc
    table = data.get("tool", {}).get("trialbox", {})
    if not isinstance(table, dict):
        raise BundleError(f"{pyproject}: [tool.trialbox] must be a table")
    found = []
    for key in ("workflow", "grader"):
        value = table.get(key)
        if value is not None and not isinstance(value, str):
            raise BundleError(f"{pyproject}: field tool.trialbox.{key} must be 'module:Class'")
        found.append(value)
    return found[0], found[1]


def project_files(project: Path) -> dict[str, tuple[bytes, int]]:
    """The project's files (relative path: bytes, mode), without SKIPPED_DIRS and egg-info:
    what is hashed is exactly what is built."""
    files: dict[str, tuple[bytes, int]] = {}
    for root, dirs, names in os.walk(project):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info"))
        for name in sorted(names):
            path = Path(root) / name
            if not path.is_file() or name.endswith((".pyc", ".pyo")):
                continue
            mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            files[path.relative_to(project).as_posix()] = (path.read_bytes(), mode)
    return files


def _digest(files: dict[str, tuple[bytes, int]], bound: list[Bound | None]) -> str:
    refs = [None if b is None else str(b.ref) for b in bound]
    h = hashlib.sha256(f"bundle {BUNDLE_FORMAT}\0{refs}\0".encode())
    for name in sorted(files):
        data, mode = files[name]
        h.update(f"{name}\0{mode:o}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _build_wheel(files: dict[str, tuple[bytes, int]], project: Path, out: Path) -> Path:
    """The project's own wheel, built by its build backend from a snapshot of `files`."""
    snapshot = out / "project"
    for name, (data, mode) in files.items():
        path = snapshot / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    wheels = out / "wheels"
    built = uv("build", "--wheel", "--quiet", "--out-dir", str(wheels), str(snapshot))
    found = sorted(wheels.glob("*.whl")) if built.returncode == 0 else []
    if len(found) != 1:
        raise BundleError(
            f"{project}: its build backend could not build a wheel (uv build): "
            f"{tail(built.stderr + built.stdout)}"
        )
    return found[0]


def _bound(given: str | None, declared: str | None, field: str, project: Path) -> Bound | None:
    """The class for `field`: the one given, else the project's [tool.trialbox] one."""
    spec: str | None
    if given:
        spec, where = given, f"build_bundle({field}=...) for {project}"
    else:
        spec, where = declared, f"{project / 'pyproject.toml'}: field tool.trialbox.{field}"
    return None if spec is None else Bound(ref=ClassRef.parse(spec, where), where=where)


def build_bundle(
    project_dir: str | Path,
    workflow: str | None = None,
    grader: str | None = None,
    *,
    cache: Path | None = None,
) -> Path:
    """The bundle wheel of the project: its own wheel plus an entry module binding `workflow`
    (and `grader`, when given) and the console scripts `<package>-agent` / `<package>-grade`.

    `workflow` and `grader` ('package.module:Class') default to `[tool.trialbox]` in the
    project's pyproject.toml. Built once per content of the project (under `cache`, by default
    trialbox's cache folder); later calls return the same file. Blocking: seconds the first
    time (the build backend may be downloaded), milliseconds after.
    """
    project = Path(project_dir).resolve()
    if not project.is_dir():
        raise BundleError(f"{project}: not a project folder")
    declared = _settings(project)
    bound = [
        _bound(workflow, declared[0], "workflow", project),
        _bound(grader, declared[1], "grader", project),
    ]
    if bound[0] is None:
        raise BundleError(
            f"{project / 'pyproject.toml'}: no workflow; give one (build_bundle(workflow="
            "'package.module:Class'), trialbox bundle build --workflow) or set "
            "[tool.trialbox] workflow"
        )
    files = project_files(project)
    home = (cache or default_cache_dir()) / "bundles" / _digest(files, bound)[:24]
    if (home / ".complete").exists():
        return next(home.glob("*.whl"))
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".bundle-", dir=home.parent))
    try:
        wheel = _build_wheel(files, project, staging)
        result = staging / "result"
        result.mkdir()
        add_entry(wheel, result, workflow=bound[0], grader=bound[1])
        (result / ".complete").write_text("ok\n")
        try:
            result.rename(home)
        except OSError:  # another process built the same content first: use its wheel
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return next(home.glob("*.whl"))
