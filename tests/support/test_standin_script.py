"""`scripts/standin-model.py`, the way the docs tell a user to try model trials without a model
service: it prints its base URL, answers chat completions with the reply it was given (or plays
a script of answers), and stops on Ctrl-C (SIGINT) with exit 0, leaving no process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import pytest

from tests.conftest import BASE_IMAGE, EXAMPLES, OFFICIAL_IMAGE, REPO_ROOT

STANDIN_MODEL = REPO_ROOT / "scripts" / "standin-model.py"
HELLO_SCRIPT = EXAMPLES / "standin" / "hello-shell.yaml"


@contextmanager
def serving(*args: str) -> Iterator[str]:
    """The script serving on a free port with these options: its base URL, stopped after."""
    server = subprocess.Popen(
        [sys.executable, str(STANDIN_MODEL), "--port", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:"), (
            server.stderr.read() if server.stderr else ""
        )
        yield base_url
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=10)


def test_the_script_serves_the_reply_and_stops_on_ctrl_c() -> None:
    with serving("--reply", "Paris") as base_url:  # stopped with SIGINT; exit 0 is checked
        body = {"model": "m", "messages": [{"role": "user", "content": "capital of France?"}]}
        request = urllib.request.Request(
            f"{base_url}/chat/completions", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=10) as answer:
            reply = json.load(answer)
    assert reply["choices"][0]["message"]["content"] == "Paris"


def test_a_broken_script_is_refused_at_start_naming_the_file_and_entry(tmp_path: Path) -> None:
    script = tmp_path / "solve.yaml"
    script.write_text("- fine\n- tool_calls: [{name: bash, arguments: {command: ls}}]\n- 42\n")
    done = subprocess.run(
        [sys.executable, str(STANDIN_MODEL), "--port", "0", "--script", str(script)],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stdout == "", "no URL: it never served"
    assert f"{script}: entry 3: a text reply (a string) or an assistant message" in done.stderr


def test_the_example_script_makes_the_shell_agent_solve_hello_shell(
    docker_ready: docker.DockerClient, tmp_path: Path
) -> None:
    """The documented way to try an agent with no model service: the stand-in plays
    examples/standin/hello-shell.yaml and `trialbox run --agent shell` scores reward 1."""
    jobs = tmp_path / "jobs"
    with serving("--script", str(HELLO_SCRIPT)) as base_url:
        done = subprocess.run(
            [
                sys.executable, "-m", "orchestrator.cli", "run", str(EXAMPLES / "hello-shell"),
                "--agent", "shell", "--model", "standin-model", "--model-url", base_url,
                "--jobs-dir", str(jobs), "--json",
                "--base-image", f"{OFFICIAL_IMAGE}={BASE_IMAGE}",
            ],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (trial,) = json.loads(done.stdout)["trials"]
    assert (trial["status"], trial["reward"], trial["error"]) == ("success", 1.0, None)
    assert trial["usage"]["calls"] == 3, "two bash calls, then the closing text"
    trajectory = (Path(trial["trial_dir"]) / "logs" / "agent" / "trajectory.json").read_text()
    assert "echo 'hello, world' > /app/greeting.txt" in trajectory
    assert "script exhausted" not in trajectory


@pytest.mark.parametrize(
    ("agent", "trajectory"),
    [("mini-swe-agent", "mini-swe-agent.traj.json"), ("terminus", "terminus.traj.json")],
)
def test_the_example_scripts_make_the_host_agents_solve_hello_shell(
    docker_ready: docker.DockerClient, tmp_path: Path, agent: str, trajectory: str
) -> None:
    """docs/agents.md's way to try a host-side agent: the stand-in plays
    examples/standin/hello-<agent>.yaml and `trialbox run --agent <agent> --token-ids` scores
    reward 1, its own trajectory kept and its token data a prefix extension throughout."""
    jobs = tmp_path / "jobs"
    script = EXAMPLES / "standin" / f"hello-{agent}.yaml"
    with serving("--script", str(script)) as base_url:
        done = subprocess.run(
            [
                sys.executable, "-m", "orchestrator.cli", "run", str(EXAMPLES / "hello-shell"),
                "--agent", agent, "--model", "standin-model", "--model-url", base_url,
                "--token-ids", "--jobs-dir", str(jobs), "--json",
                "--base-image", f"{OFFICIAL_IMAGE}={BASE_IMAGE}",
            ],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (trial,) = json.loads(done.stdout)["trials"]
    assert (trial["status"], trial["reward"], trial["error"]) == ("success", 1.0, None)
    assert trial["usage"]["calls"] == 2
    folder = Path(trial["trial_dir"])
    assert (folder / "logs" / "agent" / trajectory).is_file()
    result = json.loads((folder / "result.json").read_text())
    assert result["token_drift"]["kind"] == "none", result["token_drift"]
