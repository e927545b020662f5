"""The layer map's rules that a module's imports show (docs/architecture.md, section 1): `trials/`
imports no backend (`TrialConfig.backend`'s union is `sandbox/backend_config.py`'s, and
`run_trial`, which builds a backend, is `executors/local.py`'s); the backends and the gateway
import nothing of the layers that use them (`trials`, `executors`, `service`, `cli`); and
`sandbox/`, below all of them, imports none of those nor a backend.

Every import counts, read with `ast` rather than by importing: at a module's top, inside a
function (a lazy import is still an import upward), under `if TYPE_CHECKING:`, relative ones,
`from orchestrator import backends`, and `importlib.import_module` / `__import__` of a literal
name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

LIBRARY = REPO_ROOT / "orchestrator"
ABOVE_THE_BACKENDS = (
    "orchestrator.trials",
    "orchestrator.executors",
    "orchestrator.service",
    "orchestrator.cli",
)
# (the package, the modules none of its modules may import)
RULES = {
    "trials": ("orchestrator.backends",),
    "backends": ABOVE_THE_BACKENDS,
    "gateway": ABOVE_THE_BACKENDS,
    "sandbox": ("orchestrator.backends", *ABOVE_THE_BACKENDS),
}
_IMPORTERS = {"import_module", "__import__"}


def module_name(path: Path, root: Path = REPO_ROOT) -> list[str]:
    """`orchestrator/trials/config.py` -> ['orchestrator', 'trials', 'config'] (a package's
    `__init__.py` is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def imported_modules(path: Path, root: Path = REPO_ROOT) -> set[str]:
    """Every module `path` imports anywhere in it, as an absolute dotted name. `from a import b`
    gives both `a` and `a.b` (b may be a submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if called in _IMPORTERS and isinstance(first, ast.Constant):
                if isinstance(first.value, str):
                    found.add(first.value)
    return found


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def offenders(package: str, forbidden: tuple[str, ...], root: Path = REPO_ROOT) -> list[str]:
    """`path: module` for each forbidden import of a module under `root/orchestrator/package`."""
    return sorted(
        f"{path.relative_to(root)}: {module}"
        for path in (root / "orchestrator" / package).rglob("*.py")
        for module in imported_modules(path, root)
        if within(module, forbidden)
    )


@pytest.mark.parametrize("package", sorted(RULES))
def test_no_import_runs_upward(package: str) -> None:
    found = offenders(package, RULES[package])
    assert not found, (
        f"orchestrator/{package}/ imports what the layer map puts above it or beside it "
        f"(docs/architecture.md, section 1): {found}; pass what it needs in, or move the "
        "shared model down a layer (as the backend configs are in sandbox/backend_config.py)"
    )


def test_the_checked_packages_have_modules() -> None:
    """Guards the rules above: a renamed package would pass vacuously."""
    for package in RULES:
        assert any((LIBRARY / package).rglob("*.py")), package
    # The real walk sees the imports it must: trials/config.py's union, from below.
    assert "orchestrator.sandbox.backend_config" in imported_modules(
        LIBRARY / "trials" / "config.py"
    )


def test_every_form_of_import_is_seen(tmp_path: Path) -> None:
    """The reader itself: lazy, relative, TYPE_CHECKING, `from orchestrator import backends`
    and importlib forms are each reported."""
    package = tmp_path / "orchestrator" / "trials"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""A package."""\n')
    (package / "sneaky.py").write_text(
        '"""Each way of reaching a backend."""\n'
        "import importlib\n"
        "from typing import TYPE_CHECKING\n"
        "from orchestrator import backends\n"
        "from ..backends.docker import api\n"
        "if TYPE_CHECKING:\n"
        "    from orchestrator.backends.fake.backend import FakeBackend\n"
        "def later():\n"
        "    import orchestrator.backends.docker.backend\n"
        "    return importlib.import_module('orchestrator.backends.ray.config')\n"
    )
    (package / "clean.py").write_text(
        '"""Nothing upward."""\nfrom orchestrator.sandbox.backend_config import BackendConfig\n'
        "from . import sneaky\n"
    )
    found = offenders("trials", RULES["trials"], root=tmp_path)
    assert found == [
        "orchestrator/trials/sneaky.py: orchestrator.backends",
        "orchestrator/trials/sneaky.py: orchestrator.backends.docker",
        "orchestrator/trials/sneaky.py: orchestrator.backends.docker.api",
        "orchestrator/trials/sneaky.py: orchestrator.backends.docker.backend",
        "orchestrator/trials/sneaky.py: orchestrator.backends.fake.backend",
        "orchestrator/trials/sneaky.py: orchestrator.backends.fake.backend.FakeBackend",
        "orchestrator/trials/sneaky.py: orchestrator.backends.ray.config",
    ]
