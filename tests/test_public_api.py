"""The README and docs/ teach only names the packages export: every `from orchestrator import …`
and `from container_runtime import …` in their Python snippets is in that package's `__all__`
(a snippet may also import a subpackage that declares its own `__all__`, such as
`orchestrator.report`), every `__all__` entry exists, and every snippet is valid Python."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PUBLIC_PACKAGES = ("orchestrator", "container_runtime")
_SNIPPET = re.compile(r"```python\n(.*?)```", re.DOTALL)
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def snippets() -> list[tuple[Path, str]]:
    """(page, snippet) for every Python snippet of the README and the docs pages."""
    return [
        (page, snippet)
        for page in PAGES
        for snippet in _SNIPPET.findall(page.read_text(encoding="utf-8"))
    ]


def imported_names(page: Path, snippet: str) -> list[tuple[str, str]]:
    """(module, name) for each `from MODULE import NAME` a snippet makes."""
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(snippet, page.name, "exec", flags=flags)
    return [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module is not None
        for alias in node.names
    ]


def test_the_docs_have_python_snippets_that_import_the_package() -> None:
    packages = {module for page, s in snippets() for module, _ in imported_names(page, s)}
    assert {"orchestrator", "container_runtime"} <= packages


@pytest.mark.parametrize(
    "index", range(len(snippets())), ids=[f"{p.name}-{i}" for i, (p, _) in enumerate(snippets())]
)
def test_each_snippet_imports_only_exported_names(index: int) -> None:
    page, snippet = snippets()[index]
    where = f"{page.relative_to(REPO_ROOT)}, Python snippet {index}"
    for module_name, name in imported_names(page, snippet):
        if module_name.split(".")[0] not in PUBLIC_PACKAGES:
            continue  # another project's import (openai in a workflow), not ours to check
        module = importlib.import_module(module_name)
        exported = getattr(module, "__all__", None)
        assert exported is not None, (
            f"{where} imports from {module_name!r}, which declares no __all__: "
            "teach the package's top instead"
        )
        assert name in exported, f"{where}: {module_name}.{name} is taught, not exported"


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
