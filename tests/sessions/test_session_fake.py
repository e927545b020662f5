"""Sessions (trials/session.py, docs/sessions.md) through the fake backend: a task's sandbox
driven a call at a time, then verified exactly as a trial's, in milliseconds.

What is proven here is the session's own decisions (the label kept back, a forged reward
reset, timeouts and the budget, paths refused, the end and its result.json, aborts and
expiry, faults in their categories); tests/sessions/test_session_docker.py runs one on a
real engine.
"""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path
from typing import Any

import pytest

from container_runtime import paths
from orchestrator import Limits, TrialConfig, TrialEngine, TrialResult, abort
from orchestrator.backends.fake import ExecCall, FakeBackend, FakeSandbox
from orchestrator.common.errors import (
    SessionBudgetError,
    SessionClosedError,
    SessionPathError,
)
from orchestrator.sandbox import Health
from orchestrator.service.rollouts import EngineClosed, ScopeAborted
from orchestrator.tasks.task import load_task
from orchestrator.trials.session import Session, open_session
from tests.conftest import write_task

QUICK = Limits(stop_term_grace_sec=0.5, stop_kill_grace_sec=0.5)


def fake_config(tmp_path: Path) -> TrialConfig:
    return TrialConfig(jobs_dir=tmp_path / "jobs", backend={"type": "fake"}, limits=QUICK)


def on_disk(result: TrialResult) -> TrialResult:
    return TrialResult.model_validate_json((Path(result.trial_dir) / "result.json").read_text())


async def opened(
    tmp_path: Path,
    backend: FakeBackend,
    *,
    session_id: str = "s-1",
    metadata: dict[str, Any] | None = None,
    idle_ttl_sec: float | None = None,
    **task: Any,
) -> Session:
    folder = write_task(tmp_path / "tasks", "task", **task)
    return await open_session(
        load_task(folder), config=fake_config(tmp_path), backend=backend, job_id="job-s",
        session_id=session_id, metadata=metadata, idle_ttl_sec=idle_ttl_sec,
    )  # fmt: skip


async def hello_checked(sandbox: FakeSandbox, call: ExecCall) -> int:
    """The verifier: 1 when /app/hello.txt says hello."""
    ok = sandbox.path("/app/hello.txt").exists()
    ok = ok and sandbox.path("/app/hello.txt").read_bytes() == b"hello\n"
    return await call.sh(f"echo {int(ok)} > /logs/verifier/reward.txt")


# -- an episode --------------------------------------------------------------------------------


async def test_a_session_is_solved_by_commands_and_verified_as_a_trial(tmp_path: Path) -> None:
    backend = FakeBackend(QUICK, verifier=hello_checked)
    session = await opened(tmp_path, backend)
    assert session.status == "ready"
    assert session.instruction == "Do the thing.\n"

    done = await session.exec("mkdir -p /app && echo hello > /app/hello.txt && echo made")
    said = await session.exec(argv=["cat", "/app/hello.txt"])
    result = await session.verify()

    assert (done.exit_code, done.stdout, done.stderr, done.timed_out) == (0, "made\n", "", False)
    assert (said.exit_code, said.stdout) == (0, "hello\n")
    assert (result.status, result.reward, result.rewards) == ("success", 1.0, {"reward": 1.0})
    assert (result.agent_spec, result.session_id, result.error) == ("session", "s-1", None)
    assert result.agent.termination == "exited"
    assert session.status == "closed"
    assert backend.created[0].destroyed and len(backend.created) == 1
    assert on_disk(result) == result
    assert Path(result.trial_dir).name == "s-1"
    assert (Path(result.trial_dir) / "logs" / "verifier" / "reward.txt").read_text() == "1\n"


async def test_calls_after_the_end_are_refused_naming_the_status(tmp_path: Path) -> None:
    session = await opened(tmp_path, FakeBackend(QUICK))
    result = await session.verify()

    for call in (session.exec("true"), session.read_file("/etc/x"), session.verify()):
        with pytest.raises(SessionClosedError, match=r"session s-1 is closed: .* success"):
            await call
    assert await session.close() is result  # closing an ended session answers its result


# -- the verifier's guarantees -------------------------------------------------------------------


async def test_the_label_stays_hidden_until_verify(tmp_path: Path) -> None:
    seen: list[bytes | None] = []

    async def label_checked(sandbox: FakeSandbox, call: ExecCall) -> int:
        label = sandbox.path(f"{paths.TESTS_DIR}/label.json")
        seen.append(label.read_bytes() if label.exists() else None)
        return await call.sh("echo 1 > /logs/verifier/reward.txt")

    backend = FakeBackend(QUICK, verifier=label_checked)
    session = await opened(tmp_path, backend, metadata={"label": {"answer": 42}, "hint": "h"})
    sandbox = backend.created[0]

    looked = await session.exec(f"cat {paths.TESTS_DIR}/label.json")
    given = json.loads(await session.read_file(paths.CONTAINER_INPUT))
    assert looked.exit_code != 0
    assert not sandbox.path(paths.TESTS_DIR).exists()
    assert given["metadata"] == {"hint": "h"}  # the label is not in the agent's input
    with pytest.raises(SessionPathError):
        await session.read_file(f"{paths.TESTS_DIR}/label.json")

    result = await session.verify()

    assert seen == [b'{"answer": 42}']  # there for the verifier, only then
    assert result.reward == 1.0


async def test_a_reward_written_by_a_command_before_verify_is_ignored(tmp_path: Path) -> None:
    # The verifier writes no reward: a forged one, were it kept, would score.
    session = await opened(tmp_path, FakeBackend(QUICK), test_sh="#!/bin/sh\necho looked\n")

    forged = await session.exec("echo 1 > /logs/verifier/reward.txt")
    result = await session.verify()

    assert forged.exit_code == 0
    assert (result.status, result.reward, result.rewards) == ("failure", None, {})
    assert result.error is not None and result.error.type == "RewardFileError"


# -- time ----------------------------------------------------------------------------------------


async def test_a_command_past_its_timeout_leaves_the_session_usable(tmp_path: Path) -> None:
    backend = FakeBackend(QUICK, verifier=hello_checked)
    session = await opened(tmp_path, backend)

    slow = await session.exec("sleep 30", timeout_sec=0.2)
    later = await session.exec("mkdir -p /app && echo hello > /app/hello.txt && echo again")
    health = await backend.created[0].health(pids=True)
    result = await session.verify()

    assert (slow.timed_out, slow.exit_code) == (True, 124)
    assert slow.duration_sec < 5
    assert health.pids_current == 2  # nothing of it runs on: PID 1 and its sleep alone
    assert (later.exit_code, later.stdout) == (0, "again\n")
    assert result.reward == 1.0


async def test_past_its_budget_only_verify_and_close_remain(tmp_path: Path) -> None:
    session = await opened(tmp_path, FakeBackend(QUICK), task_toml="[agent]\ntimeout_sec = 0.3\n")

    spent = await session.exec("sleep 30")  # no timeout of its own: the budget's rest
    assert spent.timed_out and session.remaining_sec == 0
    with pytest.raises(SessionBudgetError, match=r"budget .*0\.3 s.* only verify\(\) and close"):
        await session.exec("true")
    with pytest.raises(SessionBudgetError):
        await session.write_file("/app/x", b"x")
    result = await session.verify()

    assert (result.status, result.reward) == ("success", 1.0)
    assert result.agent.termination == "timeout"


# -- files and paths -----------------------------------------------------------------------------


async def test_files_round_trip_and_reads_are_capped(tmp_path: Path) -> None:
    backend = FakeBackend(QUICK)
    session = await opened(tmp_path, backend)

    await session.write_file("/app/data/blob.bin", bytes(range(256)) * 4, mode=0o600)
    back = await session.read_file("/app/data/blob.bin")
    with pytest.raises(ValueError, match="longer than max_bytes"):
        await session.read_file("/app/data/blob.bin", max_bytes=100)
    with pytest.raises(FileNotFoundError):
        await session.read_file("/app/none.txt")
    still = await session.exec("cat /app/data/blob.bin")

    assert back == bytes(range(256)) * 4
    assert stat.S_IMODE(backend.created[0].path("/app/data/blob.bin").stat().st_mode) == 0o600
    assert still.exit_code == 0 and session.status == "ready"
    await session.close()


@pytest.mark.parametrize(
    "path",
    ["relative.txt", "/tests", "/tests/label.json", "/logs/verifier/reward.txt",
     "/logs/verifier", "/logs/agent/../verifier/reward.txt", "//tests/x"],
)  # fmt: skip
async def test_paths_are_refused_when_relative_or_the_verifier_s(tmp_path: Path, path: str) -> None:
    backend = FakeBackend(QUICK)
    session = await opened(tmp_path, backend)

    with pytest.raises(SessionPathError):
        await session.write_file(path, b"1\n")
    with pytest.raises(SessionPathError):
        await session.read_file(path)
    with pytest.raises(SessionPathError):
        await session.exec("true", cwd="relative")

    assert not backend.created[0].path("/logs/verifier/reward.txt").exists()
    assert session.status == "ready"
    await session.close()


# -- the end without verifying -------------------------------------------------------------------


async def test_close_leaves_no_sandbox_and_a_cancelled_result(tmp_path: Path) -> None:
    backend = FakeBackend(QUICK)
    session = await opened(tmp_path, backend)
    await session.exec("echo note > /logs/agent/note.txt")

    result = await session.close()

    assert backend.created[0].destroyed and not backend.created[0].present
    assert (result.status, result.reward, result.agent.termination) == (
        "cancelled", None, "aborted",
    )  # fmt: skip
    assert on_disk(result) == result
    assert (Path(result.trial_dir) / "logs" / "agent" / "note.txt").read_text() == "note\n"
    with pytest.raises(SessionClosedError, match="is closed: exec is refused"):
        await session.exec("true")


async def test_the_context_manager_closes_and_close_stops_a_running_command(
    tmp_path: Path,
) -> None:
    backend = FakeBackend(QUICK)
    async with await opened(tmp_path, backend) as session:
        running = asyncio.create_task(session.exec("sleep 30"))
        await asyncio.sleep(0.05)
        result = await session.close()
        with pytest.raises(SessionClosedError, match="closed while exec ran"):
            await running
    assert result.status == "cancelled"
    assert backend.created[0].destroyed


async def test_an_idle_session_expires_and_leaves_nothing(tmp_path: Path) -> None:
    backend = FakeBackend(QUICK)
    session = await opened(tmp_path, backend, idle_ttl_sec=0.2)
    await session.exec("true")

    await asyncio.sleep(0.6)

    assert session.status == "expired"
    assert backend.created[0].destroyed
    assert on_disk(session.result).status == "cancelled"
    assert any("expired" in w for w in session.result.warnings)
    with pytest.raises(SessionClosedError, match="is expired"):
        await session.exec("true")


# -- faults --------------------------------------------------------------------------------------


async def test_a_session_that_cannot_open_leaves_a_result_and_no_sandbox(tmp_path: Path) -> None:
    backend = FakeBackend(QUICK)
    with pytest.raises(Exception, match="ghost") as raised:
        await opened(tmp_path, backend, task_toml='[agent]\nuser = "ghost"\n')

    result = TrialResult.model_validate_json(
        (tmp_path / "jobs" / "job-s" / "s-1" / "result.json").read_text()
    )
    assert type(raised.value).__name__ == "TaskError"
    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("validation", "start")
    assert all(sandbox.destroyed for sandbox in backend.created)


async def test_a_sandbox_removed_from_outside_ends_the_session_as_infra(tmp_path: Path) -> None:
    backend = FakeBackend(QUICK)
    session = await opened(tmp_path, backend)
    backend.created[0].remove_now()

    with pytest.raises(Exception, match="from outside") as raised:
        await session.exec("true")

    assert type(raised.value).__name__ == "SandboxLostError"
    result = on_disk(session.result)
    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("infra", "agent")
    assert session.status == "closed"


@pytest.mark.parametrize(
    ("engine_says", "error_type"),
    [
        (Health(oom_kills=1, running=False), "AgentResourceError"),  # its memory: the agent's
        (Health(running=False, died_inside=True), "AgentResourceError"),  # it ended inside
    ],
)
async def test_a_sandbox_the_commands_broke_ends_the_session_as_the_agent_s(
    tmp_path: Path, engine_says: Health, error_type: str
) -> None:
    backend = FakeBackend(QUICK)
    session = await opened(tmp_path, backend, task_toml="[environment]\nmemory_mb = 256\n")
    await session.exec("echo working")
    backend.created[0].engine_health = engine_says  # what its last command did to it

    with pytest.raises(Exception) as raised:
        await session.exec("true")

    assert type(raised.value).__name__ == error_type
    result = on_disk(session.result)
    assert result.error is not None
    assert (result.error.category, result.error.type) == ("agent", error_type)
    assert result.error.discardable is False  # the sample counts
    assert session.status == "closed"
    assert backend.created[0].destroyed


# -- through the engine --------------------------------------------------------------------------


async def test_the_engine_opens_sessions_in_its_job_folder(tmp_path: Path) -> None:
    task = write_task(tmp_path / "tasks", "hello")
    backend = FakeBackend(QUICK)
    async with TrialEngine(
        config=fake_config(tmp_path), backend=backend, tasks_dir=tmp_path / "tasks",
        job_id="serve-s",
    ) as engine:  # fmt: skip
        async with await engine.open_session(task_id="hello", session_id="a::1") as session:
            with pytest.raises(ValueError, match="is live"):
                await engine.open_session(task=task, session_id="a::1")
            assert list(engine.sessions) == ["a::1"]
            result = await session.verify()
        assert engine.sessions == {}
        with pytest.raises(ValueError, match="session id"):
            await engine.open_session(task=task, session_id="/bad")

    assert result.reward == 1.0
    assert Path(result.trial_dir).parent == (tmp_path / "jobs" / "serve-s").resolve()


async def test_abort_and_shutdown_end_live_sessions(tmp_path: Path) -> None:
    task = write_task(tmp_path / "tasks", "hello")
    backend = FakeBackend(QUICK)
    engine = TrialEngine(config=fake_config(tmp_path), backend=backend, task=task)
    mine = await engine.open_session(session_id="tenant-a::1")
    theirs = await engine.open_session(session_id="tenant-b::1")

    said = abort("tenant-a::")
    await asyncio.sleep(0.1)
    assert said == {"tenant-a::1": "cancelled_running"}
    assert mine.status == "closed" and mine.result.status == "cancelled"
    assert theirs.status == "ready"
    with pytest.raises(ScopeAborted, match="'tenant-a::' was aborted"):
        await engine.open_session(session_id="tenant-a::2")  # late, like a late rollout
    other = await engine.open_session(session_id="tenant-b::2")
    await other.close()

    await engine.shutdown(drain_sec=0)

    assert theirs.result.status == "cancelled"
    assert any("shut down" in w for w in theirs.result.warnings)
    assert all(sandbox.destroyed for sandbox in backend.created)


# -- ends that are cut short ---------------------------------------------------------------------


async def test_a_verify_cancelled_while_waiting_for_a_call_leaves_the_session_usable(
    tmp_path: Path,
) -> None:
    session = await opened(tmp_path, FakeBackend(QUICK))
    running = asyncio.ensure_future(session.exec("sleep 0.5"))
    await asyncio.sleep(0.05)

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(session.verify(), 0.1)  # never got past the running call
    await running

    assert session.status == "ready"
    assert (await session.exec("echo still")).stdout == "still\n"
    assert (await session.close()).status == "cancelled"


async def test_a_verify_cancelled_while_it_runs_still_ends_the_session_and_its_sandbox(
    tmp_path: Path,
) -> None:
    started = asyncio.Event()

    async def slow_verifier(sandbox: FakeSandbox, call: ExecCall) -> int:
        started.set()
        await asyncio.sleep(30)
        return 0

    backend = FakeBackend(QUICK, verifier=slow_verifier)
    session = await opened(tmp_path, backend)
    verifying = asyncio.ensure_future(session.verify())
    await started.wait()
    verifying.cancel()

    ended = await asyncio.wait_for(session.close(), 10)  # waits for that end, never hangs

    assert ended.status == "cancelled"
    assert session.status == "closed"
    assert backend.created[0].destroyed
    assert on_disk(ended).status == "cancelled"


async def test_a_session_still_opening_at_shutdown_is_ended_not_left_running(
    tmp_path: Path,
) -> None:
    task = write_task(tmp_path / "tasks", "hello")
    backend = FakeBackend(QUICK, build_sec=0.5)
    engine = TrialEngine(config=fake_config(tmp_path), backend=backend, task=task)
    opening = asyncio.ensure_future(engine.open_session(session_id="late"))
    await asyncio.sleep(0.1)

    await engine.shutdown(drain_sec=0)

    with pytest.raises(EngineClosed):
        await opening
    assert engine.sessions == {}
    assert all(sandbox.destroyed for sandbox in backend.created)


async def test_a_session_opening_when_its_scope_is_aborted_is_ended_once_ready(
    tmp_path: Path,
) -> None:
    task = write_task(tmp_path / "tasks", "hello")
    backend = FakeBackend(QUICK, build_sec=0.5)
    engine = TrialEngine(config=fake_config(tmp_path), backend=backend, task=task)
    opening = asyncio.ensure_future(engine.open_session(session_id="tenant-c::1"))
    await asyncio.sleep(0.1)

    said = abort("tenant-c::")

    with pytest.raises(ScopeAborted, match="aborted while it opened"):
        await opening
    assert said == {"tenant-c::1": "cancelled_running"}
    assert all(sandbox.destroyed for sandbox in backend.created)
    await engine.shutdown(drain_sec=0)
