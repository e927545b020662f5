"""What only the fake backend promises, which the trial tests here stand on: single-flight
"builds" and content-hash tags, its refusals, the scripting hooks, trialbox's commands and
the task's text run by a real sh inside the sandbox's folder and namespaces (and nothing of
them left once the sandbox ends), and the fault wrapper over it. What it shares with Docker is the
conformance suite's (tests/conformance)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from orchestrator import Limits, TrialConfig
from orchestrator.backends import build_backend
from orchestrator.backends.fake import ExecCall, FakeBackend, FakeSandbox, shell
from orchestrator.backends.faults import Faults, FaultyBackend
from orchestrator.common.errors import SandboxConflictError, SandboxError, SandboxNotFoundError
from orchestrator.sandbox import Backend, SandboxSpec
from orchestrator.sandbox.commands import PathExists, RunVerifier, StartForwarder
from orchestrator.tasks.task import load_task
from relay.commands import UserIds
from tests.conftest import REPO_ROOT, write_task


async def made(backend: Backend, tmp_path: Path, **task: Any) -> Any:
    built = await backend.ensure_image(load_task(write_task(tmp_path, "t", **task)))
    sandbox = await backend.create_sandbox(
        SandboxSpec(image=built.tag, trial_id="t-1", job_id="j-1", owner="me")
    )
    return sandbox


async def test_a_config_naming_the_fake_builds_it() -> None:
    config = TrialConfig(backend={"type": "fake"})

    assert isinstance(build_backend(config.backend, Limits()), FakeBackend)


async def test_concurrent_requests_for_one_image_share_one_build(tmp_path: Path) -> None:
    backend = FakeBackend(build_sec=0.05)
    task = load_task(write_task(tmp_path, "t"))

    outcomes = await asyncio.gather(*(backend.ensure_image(task) for _ in range(3)))
    later = await backend.ensure_image(task)

    assert sorted(o.status for o in outcomes) == ["built", "cached", "cached"]
    assert later.status == "cached"
    assert backend.builds == 1


async def test_the_tag_hashes_the_environment_and_the_base_image_map(tmp_path: Path) -> None:
    backend = FakeBackend()
    one = load_task(write_task(tmp_path, "one"))
    same = load_task(write_task(tmp_path, "same", instruction="Other words.\n"))
    other = load_task(write_task(tmp_path, "other", dockerfile="FROM python:3.12\n"))

    tag = (await backend.plan_image(one, {})).tag

    assert (await backend.plan_image(same, {})).tag == tag  # only environment/ counts
    assert (await backend.plan_image(other, {})).tag != tag
    assert (await backend.plan_image(one, {"python:3.11-slim-bookworm": "local"})).tag != tag


async def test_the_final_stage_s_workdir_and_user_are_the_defaults(tmp_path: Path) -> None:
    dockerfile = (
        "FROM python:3.11 AS build\nWORKDIR /build\nUSER nobody\n"
        "FROM python:3.11-slim\nWORKDIR /srv\nWORKDIR app\nUSER nobody\n"
    )
    sandbox = await made(FakeBackend(), tmp_path, dockerfile=dockerfile)
    try:
        ids = await sandbox.exec(UserIds())
    finally:
        await sandbox.destroy()

    assert sandbox.workdir == "/srv/app"
    assert UserIds.read(ids) == (65534, 65534)  # nobody


async def test_an_unknown_image_and_a_taken_name_are_refused(tmp_path: Path) -> None:
    backend = FakeBackend()
    sandbox = await made(backend, tmp_path)
    try:
        with pytest.raises(SandboxConflictError, match="in use"):
            await backend.create_sandbox(sandbox.spec)
        with pytest.raises(SandboxNotFoundError, match="no such image"):
            await backend.create_sandbox(sandbox.spec.model_copy(update={"image": "nope:1"}))
    finally:
        await sandbox.destroy()


async def test_the_task_s_text_runs_with_a_real_sh_in_the_sandbox_s_folder(
    tmp_path: Path,
) -> None:
    name = f"/tmp/trialbox-fake-test-{uuid.uuid4().hex}"
    sandbox = await made(FakeBackend(), tmp_path)
    try:
        result = await sandbox.exec(
            f'echo a | tr a b; echo "$(id -u):$(pwd):$X:${{HOME-none}}"; echo c & wait; '
            f"cat /nowhere 2>/dev/null || echo no; echo x > {name}",
            user="nobody", workdir="/tmp", env={"X": "x y"},
        )  # fmt: skip
        mine = await sandbox.exec(f"cat {name}", user="nobody")
        as_root = await sandbox.exec(f"cat {name}", user="root")
    finally:
        await sandbox.destroy()

    assert (result.exit_code, result.output) == (0, "b\n65534:/tmp:x y:none\nc\nno\n")
    assert sandbox.path(name).read_bytes() == b"x\n"  # written in the sandbox's folder
    assert not Path(name).exists()  # not on the host
    assert sandbox.path(name).stat().st_uid == 65534  # by its user
    assert mine.output == as_root.output == "x\n"


def _running(marker: str) -> list[str]:
    """The host's processes whose command line holds `marker`."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes():
                found.append(proc.name)
    return found


async def test_a_timed_out_or_removed_run_ends_with_its_children_and_mounts(
    tmp_path: Path,
) -> None:
    sandbox = await made(FakeBackend(), tmp_path)
    timed_out = await sandbox.exec("sleep 31.4159 & sleep 31.4159", timeout_sec=0.3)
    running = asyncio.ensure_future(
        sandbox.exec("echo up; sleep 27.1$((7+1)) & sleep 27.1$((7+1))")
    )
    for _ in range(500):
        if _running("27.18"):
            break
        await asyncio.sleep(0.01)
    sandbox.remove_now()
    removed = await running

    assert (timed_out.exit_code, timed_out.timed_out) == (124, True)
    assert (removed.exit_code, removed.output) == (137, "up\n")
    for _ in range(100):  # the kernel ends a namespace's processes as its init exits
        if not _running("31.4159") and not _running("27.18"):
            break
        await asyncio.sleep(0.01)
    assert _running("31.4159") == _running("27.18") == []
    assert str(sandbox.root) not in Path("/proc/self/mounts").read_text()


LONE_RUN = """
import asyncio, sys
from pathlib import Path
from tests.trials.test_fake_backend import FakeBackend, made
async def main():
    sandbox = await made(FakeBackend(), Path(sys.argv[1]))
    print("up", flush=True)
    await sandbox.exec("sleep 29.9$((6+1)) & sleep 29.9$((6+1))")  # only sleep says 29.97
asyncio.run(main())
"""


async def test_a_run_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """No exit handler runs after a SIGKILL: the init's parent-death signal ends the run."""
    lone = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LONE_RUN, str(tmp_path), cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        env=os.environ | {"TMPDIR": str(tmp_path)},  # the sandbox's folder: no exit removes it
    )  # fmt: skip
    assert lone.stdout is not None
    assert await lone.stdout.readline() == b"up\n"
    for _ in range(500):
        if _running("29.97"):
            break
        await asyncio.sleep(0.01)
    lone.kill()
    await lone.wait()
    for _ in range(200):
        if not _running("29.97"):
            break
        await asyncio.sleep(0.01)

    assert _running("29.97") == []


async def test_a_host_that_cannot_make_the_namespaces_is_told_what_is_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shell, "NAMESPACES", ("/usr/bin/unshare", "--no-such-option"))
    with pytest.raises(SandboxError, match="needs root and util-linux's unshare"):
        await made(FakeBackend(), tmp_path)  # the sandbox's namespaces start with it


async def test_trialbox_s_own_commands_run_their_sh_text(tmp_path: Path) -> None:
    sandbox = await made(FakeBackend(), tmp_path)
    try:
        ids = await sandbox.exec(UserIds(), user="nobody")
        there = await sandbox.exec(PathExists(sandbox.workdir))
        missing = await sandbox.exec(PathExists("/nowhere"))
        forwarder = await sandbox.exec(StartForwarder("/run/socket"))
    finally:
        await sandbox.destroy()

    assert UserIds.read(ids) == (65534, 65534)
    assert (there.exit_code, missing.exit_code) == (0, 1)
    assert forwarder.exit_code == 127  # no runtime's python in the sandbox: no gateway here


async def test_a_user_the_image_does_not_have_exits_126_with_the_engine_s_words(
    tmp_path: Path,
) -> None:
    sandbox = await made(FakeBackend(), tmp_path)
    try:
        result = await sandbox.exec("true", user="ghost")
    finally:
        await sandbox.destroy()

    assert result.exit_code == 126
    assert result.output.startswith("unable to find user ghost: no matching entries")


async def test_a_handler_s_result_is_the_exit_code_and_its_sandbox_error_the_exec_s(
    tmp_path: Path,
) -> None:
    calls: list[str] = []

    async def verifier(sandbox: FakeSandbox, call: ExecCall) -> int | None:
        calls.append(call.command)
        if call.env.get("MODE") == "raise":
            raise SandboxError("the engine went away")
        call.print(f"as {call.user.name} in {call.workdir}\n")
        return None if call.env.get("MODE") == "none" else 5

    run = RunVerifier("trialbox-reward-test")
    sandbox = await made(FakeBackend(verifier=verifier), tmp_path)
    try:
        sandbox.path("/logs/verifier").mkdir(parents=True)
        five = await sandbox.exec(run, user="root", workdir="/tmp")
        printed = sandbox.path("/logs/verifier/test-stdout.txt").read_bytes()
        zero = await sandbox.exec(run, env={"MODE": "none"})
        with pytest.raises(SandboxError, match="went away"):
            await sandbox.exec(run, env={"MODE": "raise"})
    finally:
        await sandbox.destroy()

    assert (five.exit_code, zero.exit_code) == (5, 0)
    assert calls == ["/tests/test.sh"] * 3
    assert printed == b"as root in /tmp\n"  # its output went where the run line sent it


async def test_an_injected_exec_fault_hits_only_matching_commands(tmp_path: Path) -> None:
    backend = FaultyBackend(FakeBackend(), Faults(exec_fails_on=PathExists))
    sandbox = await made(backend, tmp_path)
    try:
        fine = await sandbox.exec("echo fine")
        with pytest.raises(SandboxError, match="injected fault"):
            await sandbox.exec(PathExists("/tmp"))
    finally:
        await sandbox.destroy()

    assert fine.output == "fine\n"
    assert sandbox.execs == ["echo fine"]  # the failed exec never reached the sandbox


async def test_a_failed_destroy_keeps_the_sandbox_usable_and_listed(tmp_path: Path) -> None:
    backend = FaultyBackend(FakeBackend(), Faults(destroy_fails=True))
    sandbox = await made(backend, tmp_path)

    with pytest.raises(SandboxError, match="injected fault"):
        await sandbox.destroy()
    with pytest.raises(SandboxError, match="injected fault"):
        await sandbox.destroy()  # the same failed removal, reported again

    assert sandbox.present
    assert (await sandbox.exec("true")).exit_code == 0
    leftovers = await backend.find_leftovers(owner="me")
    assert await backend.remove_leftovers(leftovers) == 1
    assert not sandbox.present
