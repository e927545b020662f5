"""The agent and grade entrypoints, in process and through ``python -m``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from container_runtime import paths
from container_runtime.contract import ContainerInput, ContainerResult, read_model, write_model
from container_runtime.runner import agent_main, grade_main, load_class
from container_runtime.trajectory import write_trajectory
from container_runtime.workflow import AgentWorkflow, Grader, GraderContext

REPO_ROOT = Path(__file__).resolve().parents[2]

WORKFLOWS = """
import asyncio
import os
from container_runtime import AgentWorkflow


class Echo(AgentWorkflow):
    async def run(self, ctx):
        await asyncio.sleep(0)
        ctx.messages.append({"role": "user", "content": ctx.instruction})
        ctx.messages.append({"role": "assistant", "content": "done"})
        return {
            "trial": ctx.trial_id,
            "meta": ctx.metadata,
            "url": ctx.chat_completions_url,
            "key": ctx.credential(),
        }


class Boom(AgentWorkflow):
    async def run(self, ctx):
        ctx.messages.append({"role": "assistant", "content": "about to fail"})
        raise RuntimeError("the agent broke")


class Interrupted(AgentWorkflow):
    async def run(self, ctx):
        raise KeyboardInterrupt


class Exits(AgentWorkflow):
    async def run(self, ctx):
        raise SystemExit(3)


class Opaque(AgentWorkflow):
    async def run(self, ctx):
        return {1, 2}


class WithToolRole(AgentWorkflow):
    async def run(self, ctx):
        ctx.messages.append({"role": "tool", "content": "ls output"})
        return "ok"


class Sleeper(AgentWorkflow):
    async def run(self, ctx):
        (ctx.logs_dir / "started").write_text("yes")
        await asyncio.sleep(60)


class NotAWorkflow:
    pass
"""

GRADERS = """
from container_runtime import Grader


class Exact(Grader):
    async def grade(self, ctx):
        answer = ctx.messages[-1]["content"] if ctx.messages else None
        ctx.set_reward(1.0 if answer == ctx.label["answer"] else 0.0)
        ctx.set_reward(float(len(ctx.messages)), name="turns")
        ctx.set_reward(1.0 if ctx.result and ctx.result.status == "success" else 0.0, "ran")


class Silent(Grader):
    async def grade(self, ctx):
        pass


class Raises(Grader):
    async def grade(self, ctx):
        ctx.set_reward(1.0)
        raise ValueError("grader broke")


class NaN(Grader):
    async def grade(self, ctx):
        ctx.set_reward(float("nan"))
"""


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(paths.LOGS_DIR_ENV, str(tmp_path / "logs"))
    monkeypatch.setenv(paths.TESTS_DIR_ENV, str(tmp_path / "tests"))
    return tmp_path


def write_module(directory: Path, source: str) -> str:
    """Write a uniquely named module (sys.modules caches names across tests)."""
    name = f"user_mod_{uuid.uuid4().hex}"
    (directory / f"{name}.py").write_text(textwrap.dedent(source))
    return name


@pytest.fixture
def workflows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    monkeypatch.syspath_prepend(str(code_dir))
    return write_module(code_dir, WORKFLOWS)


@pytest.fixture
def graders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    code_dir = tmp_path / "grader_code"
    code_dir.mkdir()
    monkeypatch.syspath_prepend(str(code_dir))
    return write_module(code_dir, GRADERS)


def stage_input(**overrides: object) -> ContainerInput:
    fields: dict[str, object] = {
        "trial_id": "trial-7",
        "instruction": "say done",
        "metadata": {"k": "v"},
    }
    fields.update(overrides)
    model = ContainerInput(**fields)
    write_model(paths.container_input_path(), model)
    return model


def result() -> ContainerResult:
    return read_model(paths.container_result_path(), ContainerResult)


# --- load_class -------------------------------------------------------------------------


def test_load_class_returns_the_subclass(roots: Path, workflows: str) -> None:
    cls = load_class(f"{workflows}:Echo", AgentWorkflow)
    assert cls.__name__ == "Echo" and issubclass(cls, AgentWorkflow)


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        ("no_colon_here", ValueError, "module:Class"),
        (":Echo", ValueError, "module:Class"),
        ("no_such_module_xyz:Echo", ModuleNotFoundError, "cannot find module 'no_such_module_xyz'"),
        ("{mod}:Missing", AttributeError, "has no attribute 'Missing'"),
        ("{mod}:NotAWorkflow", TypeError, "not a subclass of AgentWorkflow"),
        ("{mod}:asyncio", TypeError, "not a subclass of AgentWorkflow"),
    ],
)
def test_load_class_errors_are_clear(workflows: str, spec: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        load_class(spec.format(mod=workflows), AgentWorkflow)


def test_load_class_finds_modules_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.chdir(tmp_path)
    name = write_module(tmp_path, GRADERS)
    assert load_class(f"{name}:Exact", Grader).__name__ == "Exact"
    assert sys.path[0] == str(tmp_path)


# --- agent_main -------------------------------------------------------------------------


def test_agent_success_writes_output_and_trajectory(
    roots: Path, workflows: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_TEST_KEY", "sk-test")
    stage_input(chat_completions_url="http://llm/v1", credentials_ref="MY_TEST_KEY")
    assert agent_main(f"{workflows}:Echo") == 0
    written = result()
    assert written.status == "success" and written.error is None
    assert written.output == {
        "trial": "trial-7",
        "meta": {"k": "v"},
        "url": "http://llm/v1",
        "key": "sk-test",
    }
    assert written.duration_sec >= 0
    steps = json.loads(paths.trajectory_path().read_text())["steps"]
    assert [(s["source"], s["message"]) for s in steps] == [("user", "say done"), ("agent", "done")]


def test_agent_failure_writes_failure_result_and_partial_trajectory(
    roots: Path, workflows: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stage_input()
    assert agent_main(f"{workflows}:Boom") == 1
    written = result()
    assert (written.status, written.error, written.error_type) == (
        "failure",
        "the agent broke",
        "RuntimeError",
    )
    assert written.output is None
    assert "Traceback" in capsys.readouterr().err
    assert json.loads(paths.trajectory_path().read_text())["steps"][0]["message"] == (
        "about to fail"
    )


@pytest.mark.parametrize(
    ("cls", "error_type"), [("Interrupted", "KeyboardInterrupt"), ("Exits", "SystemExit")]
)
def test_agent_base_exceptions_still_write_result(
    roots: Path, workflows: str, cls: str, error_type: str
) -> None:
    stage_input()
    assert agent_main(f"{workflows}:{cls}") == 1
    assert (result().status, result().error_type) == ("failure", error_type)


def test_agent_missing_input_file(roots: Path, workflows: str) -> None:
    assert agent_main(f"{workflows}:Echo") == 1
    written = result()
    assert written.status == "failure"
    assert written.error_type == "FileNotFoundError"
    assert not paths.trajectory_path().exists()


def test_agent_invalid_input_file(roots: Path, workflows: str) -> None:
    paths.container_input_path().parent.mkdir(parents=True)
    paths.container_input_path().write_text('{"trial_id": "t"}')
    assert agent_main(f"{workflows}:Echo") == 1
    assert result().error_type == "ValidationError"
    assert "instruction" in (result().error or "")


@pytest.mark.parametrize(
    ("spec", "error_type"),
    [
        ("not-a-spec", "ValueError"),
        ("no_such_module_xyz:Echo", "ModuleNotFoundError"),
        ("{mod}:Missing", "AttributeError"),
        ("{mod}:NotAWorkflow", "TypeError"),
    ],
)
def test_agent_bad_class_spec_writes_failure(
    roots: Path, workflows: str, spec: str, error_type: str
) -> None:
    stage_input()
    assert agent_main(spec.format(mod=workflows)) == 1
    assert (result().status, result().error_type) == ("failure", error_type)


def test_agent_non_json_output_is_stored_as_repr(roots: Path, workflows: str) -> None:
    stage_input()
    assert agent_main(f"{workflows}:Opaque") == 0
    assert result().output == repr({1, 2})


def test_agent_messages_atif_cannot_hold_are_kept_as_plain_list(
    roots: Path, workflows: str
) -> None:
    stage_input()
    assert agent_main(f"{workflows}:WithToolRole") == 0
    assert json.loads(paths.trajectory_path().read_text()) == [
        {"role": "tool", "content": "ls output"}
    ]


# --- grade_main -------------------------------------------------------------------------


def stage_for_grading(answer: str) -> None:
    write_model(paths.container_result_path(), ContainerResult(status="success", duration_sec=1.0))
    write_trajectory([{"role": "user", "content": "q"}, {"role": "assistant", "content": "42"}])
    paths.label_path().parent.mkdir(parents=True, exist_ok=True)
    paths.label_path().write_text(json.dumps({"answer": answer}))


def test_grade_writes_rewards_from_label_and_trajectory(roots: Path, graders: str) -> None:
    stage_for_grading(answer="42")
    assert grade_main(f"{graders}:Exact") == 0
    assert json.loads(paths.reward_json_path().read_text()) == {
        "reward": 1.0,
        "turns": 2.0,
        "ran": 1.0,
    }


def test_grade_wrong_answer_scores_zero(roots: Path, graders: str) -> None:
    stage_for_grading(answer="41")
    assert grade_main(f"{graders}:Exact") == 0
    assert json.loads(paths.reward_json_path().read_text())["reward"] == 0.0


@pytest.mark.parametrize("cls", ["Silent", "Raises", "NaN"])
def test_grade_without_valid_reward_writes_nothing(
    roots: Path, graders: str, cls: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stage_for_grading(answer="42")
    assert grade_main(f"{graders}:{cls}") == 1
    assert not paths.reward_json_path().exists()
    assert capsys.readouterr().err.strip()


def test_grade_bad_spec_writes_nothing(roots: Path, graders: str) -> None:
    assert grade_main(f"{graders}:Missing") == 1
    assert not paths.reward_json_path().exists()


def test_grader_context_with_nothing_on_disk(roots: Path) -> None:
    ctx = GraderContext.load()
    assert (ctx.input, ctx.result, ctx.label, ctx.messages) == (None, None, None, [])
    assert ctx.tests_dir == roots / "tests"


def test_grader_context_reads_input(roots: Path) -> None:
    staged = stage_input()
    assert GraderContext.load().input == staged


@pytest.mark.parametrize("bad", [True, float("inf"), "1"])
def test_set_reward_validates(bad: Any) -> None:  # a wrong type is the point
    ctx = GraderContext()
    with pytest.raises(ValueError, match="'quality'"):
        ctx.set_reward(bad, name="quality")
    assert ctx.rewards == {}


# --- python -m container_runtime --------------------------------------------------------


def run_cli(args: list[str], roots: Path, code_dir: Path, **kwargs: Any) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env[paths.LOGS_DIR_ENV] = str(roots / "logs")
    env[paths.TESTS_DIR_ENV] = str(roots / "tests")
    env["PYTHONPATH"] = os.pathsep.join([str(code_dir), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-m", "container_runtime", *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_cli_agent_then_grade_end_to_end(roots: Path, workflows: str, graders: str) -> None:
    stage_input(instruction="done")
    agent = run_cli(["agent", "--workflow", f"{workflows}:Echo"], roots, roots / "code")
    _, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err
    assert result().status == "success"
    assert result().output["trial"] == "trial-7"

    paths.label_path().parent.mkdir(parents=True)
    paths.label_path().write_text(json.dumps({"answer": "done"}))
    grade = run_cli(["grade", "--grader", f"{graders}:Exact"], roots, roots / "grader_code")
    _, err = grade.communicate(timeout=60)
    assert grade.returncode == 0, err
    assert json.loads(paths.reward_json_path().read_text())["reward"] == 1.0


def test_cli_agent_failure_exit_code(roots: Path, workflows: str) -> None:
    stage_input()
    proc = run_cli(["agent", "--workflow", f"{workflows}:Boom"], roots, roots / "code")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "RuntimeError: the agent broke" in err
    assert result().error == "the agent broke"


def test_cli_sigterm_still_writes_result(roots: Path, workflows: str) -> None:
    stage_input()
    proc = run_cli(["agent", "--workflow", f"{workflows}:Sleeper"], roots, roots / "code")
    started = roots / "logs" / "started"
    deadline = time.monotonic() + 30
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert started.exists(), proc.communicate(timeout=5)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert (result().status, result().error_type) == ("failure", "Terminated")


def test_cli_help_mentions_both_commands(roots: Path, tmp_path: Path) -> None:
    proc = run_cli(["--help"], roots, tmp_path)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "--workflow module:Class" in out and "--grader module:Class" in out
