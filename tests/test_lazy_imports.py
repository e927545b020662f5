"""What importing costs: `import orchestrator` loads no engine SDK, HTTP stack or web
framework until a name that needs one is used (PEP 562), `trialbox`'s parsers are built
without pydantic or the library (so `--help` answers at once: benchmarks/cli_startup.py
measures it), and each backend's `config` module keeps its promise not to import the
backend. Each check runs in a fresh interpreter, since this one has imported everything."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import orchestrator
from tests.conftest import REPO_ROOT

# Imported only where they are used: the Docker SDK (and its requests) in backends/docker,
# aiohttp in the gateway, httpx in callbacks and the model check, FastAPI and uvicorn in the
# server, Ray in backends/ray.
HEAVY = ("docker", "requests", "aiohttp", "httpx", "fastapi", "starlette", "uvicorn", "ray")
SUBCOMMANDS = ("run", "prewarm", "serve", "reap", "view", "export", "bundle")


def loaded_after(code: str) -> set[str]:
    """The top-level names of every module loaded once `code` has run in a new interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"{code!r} failed:\n{done.stderr}"
    return {name.partition(".")[0] for name in json.loads(done.stdout.splitlines()[-1])}


def test_import_orchestrator_loads_no_engine_sdk_http_stack_or_web_framework() -> None:
    loaded = loaded_after("import orchestrator")
    assert not loaded & set(HEAVY), (
        f"import orchestrator loaded {sorted(loaded & set(HEAVY))}: a module the package's "
        "__init__ imports at its top imports them; import it lazily (orchestrator/__init__.py's "
        "table) or move that import into the function that needs it"
    )


@pytest.mark.parametrize(
    "module",
    [
        "orchestrator.backends",
        "orchestrator.backends.docker.config",
        "orchestrator.backends.ray.config",
        "orchestrator.sandbox.backend_config",
        "orchestrator.trials.config",
    ],
)
def test_a_backend_config_imports_no_backend(module: str) -> None:
    """What the configs promise: choosing a backend loads none (`build_backend` does)."""
    loaded = loaded_after(f"import {module}")
    assert not loaded & set(HEAVY), f"import {module} loaded {sorted(loaded & set(HEAVY))}"


@pytest.mark.parametrize("argv", [["--help"]] + [[command, "--help"] for command in SUBCOMMANDS])
def test_trialbox_help_builds_its_parsers_without_pydantic_or_the_library(
    argv: list[str],
) -> None:
    code = (
        "import contextlib, io\n"
        "from orchestrator.cli import build_parser\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
        f"    build_parser().parse_args({argv!r})\n"
        "assert 'usage: trialbox' in out.getvalue(), out.getvalue()\n"
    )
    loaded = loaded_after(code)
    unwanted = loaded & {*HEAVY, "pydantic", "pydantic_settings"}
    assert not unwanted, (
        f"trialbox {' '.join(argv)} loaded {sorted(unwanted)}: a parser's module imports them at "
        "its top; import what a handler needs inside it, and a default the help shows from "
        "orchestrator/common/defaults.py"
    )


def test_every_public_name_resolves_to_its_modules_object() -> None:
    lazy = orchestrator._LAZY
    assert set(orchestrator.__all__) == set(lazy) | {"run_trial_sync", "run_job_sync"}
    for name in orchestrator.__all__:
        value = getattr(orchestrator, name)
        if name in lazy:
            assert value is getattr(importlib.import_module(lazy[name]), name), name
    assert set(orchestrator.__all__) <= set(dir(orchestrator))


def test_star_import_gives_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from orchestrator import *", namespace)
    assert set(orchestrator.__all__) <= set(namespace)


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'orchestrator' has no attribute 'run_trail'"):
        getattr(orchestrator, "run_trail")  # noqa: B009
