"""The README teaches only names the packages export: every `from orchestrator import …` and
`from container_runtime import …` in its Python snippets is in that package's `__all__`, every
`__all__` entry exists, and every snippet is valid Python."""

from __future__ import annotations

import ast
import importlib
import re

import pytest

from tests.conftest import REPO_ROOT

PUBLIC_PACKAGES = ("orchestrator", "container_runtime")
_SNIPPET = re.compile(r"```python\n(.*?)```", re.DOTALL)


def readme_snippets() -> list[str]:
    return _SNIPPET.findall((REPO_ROOT / "README.md").read_text(encoding="utf-8"))


def imported_names(snippet: str) -> list[tuple[str, str]]:
    """(package, name) for each top-level-package import a snippet makes."""
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(snippet, "README.md", "exec", flags=flags)
    return [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module is not None
        for alias in node.names
    ]


def test_the_readme_has_python_snippets_that_import_the_package() -> None:
    packages = {pkg for s in readme_snippets() for pkg, _ in imported_names(s)}
    assert {"orchestrator", "container_runtime"} <= packages


@pytest.mark.parametrize("index", range(len(readme_snippets())))
def test_each_readme_snippet_imports_only_exported_names(index: int) -> None:
    snippet = readme_snippets()[index]
    for package, name in imported_names(snippet):
        assert package in PUBLIC_PACKAGES, (
            f"README snippet {index} imports from {package!r}: teach the package's top instead"
        )
        module = importlib.import_module(package)
        assert name in module.__all__, f"{package}.{name} is used in the README, not exported"


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_every_exported_name_exists(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []
    assert len(module.__all__) == len(set(module.__all__))


def test_the_service_api_is_at_the_top() -> None:
    import orchestrator

    for name in ("TrialEngine", "RolloutRequest", "QueueFull", "EngineClosed", "abort",
                 "prewarm", "run_trial", "run_job", "TrialResult", "JobResult"):  # fmt: skip
        assert name in orchestrator.__all__
