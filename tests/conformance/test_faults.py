"""The fault wrapper (`backends/faults.py`) over every backend: the same injected failure
does the same on the fake and on the real engine, and what it leaves behind is real there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.backends.faults import Faults, FaultyBackend
from orchestrator.common.errors import ImageBuildError, SandboxError
from orchestrator.sandbox.commands import PathExists
from orchestrator.tasks.task import load_task
from relay import Ending
from tests.conformance.conftest import BackendUnderTest
from tests.conformance.test_relay import make_relay
from tests.conftest import BASE_IMAGE_MAP, EXAMPLES


async def test_an_exec_fault_fails_only_that_kind_and_the_sandbox_goes_on(
    backend: BackendUnderTest,
) -> None:
    faulty = FaultyBackend(backend.backend, Faults(exec_fails_on=PathExists))
    sandbox = await faulty.create_sandbox(backend.spec())
    try:
        with pytest.raises(SandboxError, match="injected fault"):
            await sandbox.exec(PathExists("/tmp"))
        after = await sandbox.exec("echo still here")
    finally:
        await sandbox.destroy()

    assert (after.exit_code, after.output) == (0, "still here\n")
    assert sandbox.destroyed


async def test_build_create_and_download_faults_raise_before_the_engine_is_asked(
    backend: BackendUnderTest, tmp_path: Path
) -> None:
    task = load_task(EXAMPLES / "hello-oracle")
    failing = FaultyBackend(
        backend.backend, Faults(build_fails=True, create_fails=True, download_fails=True)
    )
    copying = FaultyBackend(backend.backend, Faults(download_fails=True))

    with pytest.raises(ImageBuildError, match="injected fault"):
        await failing.ensure_image(task, BASE_IMAGE_MAP)
    with pytest.raises(SandboxError, match="injected fault"):
        await failing.create_sandbox(backend.spec())
    sandbox = await copying.create_sandbox(backend.spec())
    try:
        with pytest.raises(SandboxError, match="injected fault"):
            await sandbox.download("/tmp", tmp_path, file_cap=1024)
    finally:
        await sandbox.destroy()

    assert failing.created == []
    assert await backend.backend.find_leftovers(job=backend.job_id) == []


async def test_a_failed_destroy_leaves_a_real_leftover_that_reaping_removes(
    backend: BackendUnderTest,
) -> None:
    faulty = FaultyBackend(backend.backend, Faults(destroy_fails=True))
    sandbox = await faulty.create_sandbox(backend.spec())
    try:
        with pytest.raises(SandboxError, match="injected fault"):
            await sandbox.destroy()
        left = await faulty.find_leftovers(job=backend.job_id)
        assert [leftover.name for leftover in left] == [sandbox.name]
        assert (await sandbox.exec("true")).exit_code == 0  # still there and usable
    finally:
        removed = await backend.backend.remove_leftovers(
            await backend.backend.find_leftovers(job=backend.job_id)
        )

    assert removed == 1
    assert await backend.backend.find_leftovers(job=backend.job_id) == []


async def test_a_leader_that_ignores_term_takes_the_relay_s_kill(
    backend: BackendUnderTest,
) -> None:
    faulty = FaultyBackend(backend.backend, Faults(leader_ignores_term=True))
    sandbox = await faulty.create_sandbox(backend.spec())
    try:
        outcome = await make_relay(sandbox).run("echo started; sleep 60", timeout_sec=0.3)
    finally:
        await sandbox.destroy()

    assert outcome.ending is Ending.TIMEOUT
    assert outcome.detail == "leader stopped by KILL"
