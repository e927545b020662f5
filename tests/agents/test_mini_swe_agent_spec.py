"""`--agent mini-swe-agent[?config=FILE.yaml]` read before any container; the package is
imported only when its loop runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.common.errors import AgentSpecError
from orchestrator.trials.agents import parse_agent
from orchestrator.trials.mini_swe_agent import MiniSweAgent
from tests.conftest import REPO_ROOT


def test_the_spec_and_its_config(tmp_path: Path) -> None:
    plain = parse_agent("mini-swe-agent")
    assert isinstance(plain, MiniSweAgent) and plain.on_host and plain.needs_model
    assert not plain.needs_runtime and plain.config == {}
    config = tmp_path / "mini.yaml"
    config.write_text("agent:\n  step_limit: 7\n")
    configured = parse_agent(f"mini-swe-agent?config={config}")
    assert isinstance(configured, MiniSweAgent)
    assert configured.config == {"agent": {"step_limit": 7}}


@pytest.mark.parametrize(
    ("text", "says"),
    [("- a list\n", "a YAML mapping"), ("agent: [1]\n", "'agent' must be a mapping"),
     ("a: [\n", "cannot be read as YAML")],
)  # fmt: skip
def test_a_bad_config_is_refused_before_any_container(tmp_path: Path, text: str, says: str) -> None:
    config = tmp_path / "mini.yaml"
    config.write_text(text)
    with pytest.raises(AgentSpecError, match=says):
        parse_agent(f"mini-swe-agent?config={config}")


def test_a_typo_is_named() -> None:
    with pytest.raises(AgentSpecError, match="did you mean mini-swe-agent"):
        parse_agent("mini-swe-agnt")


def test_the_package_is_not_imported_until_its_loop_runs() -> None:
    probe = (
        "from orchestrator.trials.agents import parse_agent\n"
        "parse_agent('mini-swe-agent')\n"
        "import json, sys\nprint(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    loaded = {name.partition(".")[0] for name in json.loads(done.stdout.splitlines()[-1])}
    assert not loaded & {"minisweagent", "litellm", "httpx"}


def test_run_agent_config_is_the_specs_config_and_only_for_mini_swe_agent(tmp_path: Path) -> None:
    from orchestrator.cli.settings import load_settings

    config = tmp_path / "mini.yaml"
    given = {"agent": "mini-swe-agent", "agent_config": config}
    assert load_settings(given, environ={}).agent_spec() == f"mini-swe-agent?config={config}"
    with pytest.raises(ValueError, match="an agent config is mini-swe-agent's"):
        load_settings({"agent": "shell", "agent_config": config}, environ={})
