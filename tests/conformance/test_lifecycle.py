"""A sandbox's life, on every backend: images made once, create, leftovers found by owner and
job and removed, an idempotent destroy after which the sandbox cannot be used, and a network
mode the backend does not offer refused with nothing left behind."""

from __future__ import annotations

import pytest

from orchestrator.common.errors import SandboxError
from orchestrator.sandbox import sandbox_name
from orchestrator.tasks.task import load_task
from tests.conformance.conftest import BackendUnderTest
from tests.conftest import BASE_IMAGE_MAP, EXAMPLES


async def test_an_image_is_cached_once_made(backend: BackendUnderTest) -> None:
    task = load_task(EXAMPLES / "hello-oracle")

    again = await backend.backend.ensure_image(task, BASE_IMAGE_MAP)
    plan = await backend.backend.plan_image(task, BASE_IMAGE_MAP)

    assert again.status == "cached"
    assert again.tag == backend.image == plan.tag


async def test_destroy_is_idempotent_and_ends_all_use(backend: BackendUnderTest) -> None:
    sandbox = await backend.backend.create_sandbox(backend.spec())
    try:
        assert sandbox.destroyed is False
        assert (await sandbox.exec("true")).exit_code == 0
    finally:
        await sandbox.destroy()
        await sandbox.destroy()

    assert sandbox.destroyed is True
    with pytest.raises(SandboxError):
        await sandbox.exec("true")
    assert await backend.backend.find_leftovers(job=backend.job_id) == []


async def test_leftovers_are_found_by_owner_and_job_and_removed(
    backend: BackendUnderTest,
) -> None:
    chosen = backend.backend
    async with backend.sandbox() as sandbox:
        by_owner = await chosen.find_leftovers(owner=backend.owner)
        by_job = await chosen.find_leftovers(job=backend.job_id)
        by_both = await chosen.find_leftovers(owner=backend.owner, job=backend.job_id)
        by_other_owner = await chosen.find_leftovers(owner=f"{backend.owner}-someone-else")

        assert sandbox.name in [leftover.name for leftover in by_owner]
        assert [leftover.name for leftover in by_job] == [sandbox.name]
        assert by_both == by_job
        assert by_job[0].owner == backend.owner
        assert by_job[0].job == backend.job_id
        assert sandbox.name == sandbox_name(by_job[0].trial, backend.job_id)
        assert sandbox.name not in [leftover.name for leftover in by_other_owner]

        assert await chosen.remove_leftovers(by_job) == 1
        assert await chosen.find_leftovers(job=backend.job_id) == []
        with pytest.raises(SandboxError):
            await sandbox.exec("true")
    # leaving the block destroyed it again: a removed sandbox's destroy is a no-op


async def test_a_network_mode_not_offered_is_refused_leaving_nothing(
    backend: BackendUnderTest,
) -> None:
    mode = "trialbox-no-such-network"
    assert mode not in (await backend.backend.capabilities()).network_modes

    with pytest.raises(SandboxError):
        async with backend.sandbox(network_mode=mode):
            pytest.fail("a sandbox was made")

    assert await backend.backend.find_leftovers(job=backend.job_id) == []


@pytest.mark.parametrize("mode", ["none", "bridge"])
async def test_the_network_modes_harbor_tasks_use_are_offered(
    backend: BackendUnderTest, mode: str
) -> None:
    assert mode in (await backend.backend.capabilities()).network_modes
    async with backend.sandbox(network_mode=mode) as sandbox:
        assert sandbox.capabilities == await backend.backend.capabilities()
