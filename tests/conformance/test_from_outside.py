"""What a backend says and does about a sandbox from outside it, on every backend: its health
running and once removed, `stop_all_from_host` refusing while pids are free, the image's USER
as the exec default, and a taken name refused as a conflict."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrator.common.errors import SandboxConflictError
from orchestrator.tasks.task import load_task
from relay.commands import UserIds
from tests.conformance.conftest import BackendUnderTest, wait_until
from tests.conftest import BASE_IMAGE_MAP, DEFAULT_DOCKERFILE, write_task


async def test_health_of_a_running_sandbox(backend: BackendUnderTest) -> None:
    async with backend.sandbox(pids_limit=256) as sandbox:
        quick = await sandbox.health()
        counted = await sandbox.health(pids=True)

    assert (quick.known, quick.exists, quick.running) == (True, True, True)
    assert (quick.oom_kills, quick.died_inside, quick.stopped_outside) == (0, False, False)
    assert (quick.pids_current, quick.pids_limit) == (None, None)  # read only when asked
    assert counted.pids_limit == 256
    assert counted.pids_current is not None and 1 <= counted.pids_current < 256
    assert counted.pids_exhausted is False


async def test_health_of_a_sandbox_removed_from_outside(backend: BackendUnderTest) -> None:
    async with backend.sandbox() as sandbox:
        leftovers = await backend.backend.find_leftovers(job=backend.job_id)
        assert await backend.backend.remove_leftovers(leftovers) == 1
        health = await sandbox.health(pids=True)

    assert (health.known, health.exists, health.running) == (True, False, False)
    assert health.stopped_outside is True  # the engine was asked to remove it
    assert (health.pids_current, health.pids_limit) == (None, None)


async def test_stop_all_from_host_refuses_while_pids_are_free(backend: BackendUnderTest) -> None:
    """Only a sandbox whose pids are all taken has its processes killed from the host: any
    other failure to run a command is no reason to kill the agent's servers."""
    async with backend.sandbox() as sandbox:
        slow = asyncio.ensure_future(sandbox.exec("echo up > /tmp/up; sleep 3", timeout_sec=20))

        async def slow_is_running() -> bool:
            return (await sandbox.exec("cat /tmp/up")).exit_code == 0

        await wait_until(slow_is_running)
        assert await sandbox.pids_exhausted() is False
        assert await sandbox.stop_all_from_host() is False
        ended = await asyncio.wait_for(slow, 30)
        after = await sandbox.exec("echo still")

    assert (ended.exit_code, ended.timed_out) == (0, False)  # it ran to its end
    assert after.output == "still\n"


async def test_the_image_user_is_the_exec_default(
    backend: BackendUnderTest, tmp_path: Path
) -> None:
    task = write_task(tmp_path, "user-nobody", dockerfile=f"{DEFAULT_DOCKERFILE}USER nobody\n")
    image = await backend.backend.ensure_image(load_task(task), BASE_IMAGE_MAP)
    async with backend.sandbox(image=image.tag) as sandbox:
        defaults = await sandbox.image_defaults()
        default = await sandbox.exec(UserIds())
        as_root = await sandbox.exec(UserIds(), user="root")

    assert defaults.user == "nobody"
    assert UserIds.read(default) == (65534, 65534)
    assert UserIds.read(as_root) == (0, 0)


async def test_an_image_without_user_reports_none(backend: BackendUnderTest) -> None:
    async with backend.sandbox() as sandbox:
        defaults = await sandbox.image_defaults()

    assert defaults.user == ""
    assert defaults.healthcheck is None


async def test_a_taken_name_is_a_conflict_and_the_holder_survives(
    backend: BackendUnderTest,
) -> None:
    spec = backend.spec()
    holder = await backend.backend.create_sandbox(spec)
    try:
        with pytest.raises(SandboxConflictError):
            await backend.backend.create_sandbox(spec)
        alive = await holder.exec("echo alive")
        listed = await backend.backend.find_leftovers(job=backend.job_id)
    finally:
        await holder.destroy()

    assert alive.output == "alive\n"
    assert [leftover.name for leftover in listed] == [spec.name]
