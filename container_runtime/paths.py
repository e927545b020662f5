"""Where the file contract lives inside a task container.

The defaults are the container paths of the file contract (docs/architecture.md). The two
roots can be moved with ``TRIALBOX_LOGS_DIR`` and ``TRIALBOX_TESTS_DIR`` so tests (and odd
images) can run the same code elsewhere; the variables are read at call time so a test can
change them freely.
"""

from __future__ import annotations

import os
from pathlib import Path

LOGS_DIR_ENV = "TRIALBOX_LOGS_DIR"
TESTS_DIR_ENV = "TRIALBOX_TESTS_DIR"

# Default container paths, as plain strings, for the host side (archive copies, exec args).
LOGS_DIR = "/logs"
AGENT_DIR = "/logs/agent"
VERIFIER_DIR = "/logs/verifier"
ARTIFACTS_DIR = "/logs/artifacts"
CONTAINER_INPUT = "/logs/agent/container_input.json"
CONTAINER_RESULT = "/logs/agent/container_result.json"
TRAJECTORY = "/logs/agent/trajectory.json"
WORKFLOW_CONFIG = "/logs/agent/workflow_config.json"
REWARD_JSON = "/logs/verifier/reward.json"
REWARD_TXT = "/logs/verifier/reward.txt"
TESTS_DIR = "/tests"
LABEL = "/tests/label.json"

# Where trialbox's own venv lives in a task image, and its interpreter.
VENV_DIR = "/opt/trialbox/venv"
RUNTIME_PYTHON = "/opt/trialbox/venv/bin/python"
# Exits 0 only where the runtime works: what the trial runs before using it.
RUNTIME_CHECK = RUNTIME_PYTHON + " -I -c 'import container_runtime'"


def logs_dir() -> Path:
    """The root of everything the container hands back (``/logs``)."""
    return Path(os.environ.get(LOGS_DIR_ENV) or LOGS_DIR)


def agent_dir() -> Path:
    """The agent's own folder (``/logs/agent``)."""
    return logs_dir() / "agent"


def verifier_dir() -> Path:
    """The verifier's folder (``/logs/verifier``), emptied before verification."""
    return logs_dir() / "verifier"


def artifacts_dir() -> Path:
    """Free-form files copied back as they are (``/logs/artifacts``)."""
    return logs_dir() / "artifacts"


def container_input_path() -> Path:
    """The input the orchestrator stages for the agent."""
    return agent_dir() / "container_input.json"


def container_result_path() -> Path:
    """The result the runner always writes, even on error."""
    return agent_dir() / "container_result.json"


def workflow_config_path() -> Path:
    """The workflow's own configuration, staged by the host when it gives one."""
    return agent_dir() / "workflow_config.json"


def trajectory_path() -> Path:
    """The agent's conversation, as ATIF steps or a plain messages list."""
    return agent_dir() / "trajectory.json"


def reward_json_path() -> Path:
    """The flat ``{name: number}`` reward map; it wins over ``reward.txt``."""
    return verifier_dir() / "reward.json"


def reward_txt_path() -> Path:
    """A single float reward, read by the host as ``{"reward": x}``."""
    return verifier_dir() / "reward.txt"


def tests_dir() -> Path:
    """The task's tests, uploaded only at verification time (``/tests``)."""
    return Path(os.environ.get(TESTS_DIR_ENV) or TESTS_DIR)


def label_path() -> Path:
    """The ground-truth label; present only while grading, never for the agent."""
    return tests_dir() / "label.json"
