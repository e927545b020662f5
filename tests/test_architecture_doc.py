"""docs/architecture.md cannot name a file that is gone, and the modules carry their own map.

The page keeps the layers, the contracts and where each behaviour lives by package; what each
module holds is its docstring (issue 20 item 8). So every source path the page writes in
backticks (`orchestrator/...`, `relay/...`, `container_runtime/...`, a `package/module.py`, a
bare `module.py`) must exist, the page holds no per-module table again, and every module of
the library, the relay and the in-sandbox runtime has a docstring that says something."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "architecture.md"
SOURCE_ROOTS = ("orchestrator", "relay", "container_runtime")
# Where a path the page writes may start: the repository, or the library (`trials/trial.py`
# is `orchestrator/trials/trial.py`, as the page's layer map names its packages).
BASES = (REPO_ROOT, REPO_ROOT / "orchestrator")
# Folders the page names that are the repository's own, not a task's or a sandbox's
# (`tests/test.sh` is a task's file; `/logs/agent/` a sandbox's).
CODE_DIRS = re.compile(r"^(orchestrator|relay|container_runtime)/[\w/*-]*$")
PY_PATH = re.compile(r"^[\w*-]+(/[\w*-]+)*\.py$")

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
_SPAN = re.compile(r"`([^`\n]+)`")
_SPLIT = re.compile(r"[\s,;()\[\]{}=<>|\"']+")


def spans(text: str) -> list[str]:
    """The page's code spans, outside fenced blocks (the layer map names folders, not files)."""
    return _SPAN.findall(_FENCE.sub("", text))


def named_paths(text: str) -> set[str]:
    """Every source path written in a code span: `a/b.py`, `b.py`, `orchestrator/x/`."""
    found = set()
    for span in spans(text):
        for token in _SPLIT.split(span):
            token = token.strip(".:")
            if PY_PATH.match(token) or CODE_DIRS.match(token):
                found.add(token)
    return found


def exists(path: str, basenames: set[str]) -> bool:
    """A path with a folder resolves from the repository or the library (globs match
    something); a bare `module.py`, which the page writes beside its package's full path,
    must at least be some source file's name."""
    if "/" not in path:
        return path in basenames
    return any(any(base.glob(path.rstrip("/"))) or (base / path).exists() for base in BASES)


def source_files() -> list[Path]:
    return sorted(p for root in SOURCE_ROOTS for p in (REPO_ROOT / root).rglob("*.py"))


def all_basenames() -> set[str]:
    trees = (*SOURCE_ROOTS, "tests", "benchmarks", "scripts")
    return {p.name for tree in trees for p in (REPO_ROOT / tree).rglob("*") if p.is_file()}


def test_the_page_names_paths_at_all() -> None:
    """Guards the check below: a parser that found nothing would pass vacuously."""
    paths = named_paths(PAGE.read_text(encoding="utf-8"))
    assert {"trials/trial.py", "relay/supervisor.py", "container_runtime/runner.py"} <= paths
    assert len(paths) > 100


def test_every_path_the_page_names_exists() -> None:
    basenames = all_basenames()
    named = named_paths(PAGE.read_text(encoding="utf-8"))
    gone = sorted(p for p in named if not exists(p, basenames))
    assert not gone, (
        f"docs/architecture.md names source paths that do not exist: {gone}; write the path "
        "as it is now (from the repository or from orchestrator/), or drop it"
    )


def test_a_gone_path_is_caught() -> None:
    """The checker itself: a removed module is reported, a moved one under its old folder too."""
    basenames = all_basenames()
    text = "`trials/finish.py` (`Trial._start`), `docker/api.py`, `no_such_module.py`"
    assert {p for p in named_paths(text) if not exists(p, basenames)} == {
        "trials/finish.py",
        "docker/api.py",
        "no_such_module.py",
    }


def test_the_page_has_no_per_module_table() -> None:
    """What a module holds is its docstring's to say; a table of modules on the page rots."""
    tables = re.findall(r"^\|\s*modules?\s*\|", PAGE.read_text(encoding="utf-8"), re.M)
    assert not tables, (
        "docs/architecture.md has a per-module table again: put what it says in the modules' "
        "docstrings, and keep the page to layers, contracts and packages"
    )


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_module_has_a_docstring(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert doc and len(doc.split()) >= 4, (
        f"{path.relative_to(REPO_ROOT)}: no module docstring saying what it holds and why "
        "(docs/architecture.md no longer lists modules; the docstring is their map)"
    )
