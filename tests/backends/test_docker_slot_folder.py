"""A Docker sandbox's slot folder (`SandboxSpec.slot_mount`: the host folder mounted
read-only, for the gateway's socket and the verifier's staged tests) goes with the sandbox:
at its destroy, and when a process that died without destroying it is reaped."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import TrialConfig
from orchestrator.backends.docker.backend import DockerBackend
from orchestrator.backends.docker.sandbox import DockerSandbox, is_slot_folder
from orchestrator.common.ids import new_id
from orchestrator.sandbox import SandboxSpec
from orchestrator.sandbox.spec import SLOT_DIR
from tests.conftest import EXAMPLES, ensure_task_image


async def made(config: TrialConfig, job: str) -> DockerSandbox:
    image = await ensure_task_image(config, EXAMPLES / "hello-oracle")
    spec = SandboxSpec(
        image=image, trial_id=new_id("slot"), job_id=job, owner=config.owner, slot_mount=SLOT_DIR
    )
    sandbox = await DockerBackend(config.limits).create_sandbox(spec)
    assert isinstance(sandbox, DockerSandbox) and sandbox.slot_folder is not None
    return sandbox


@pytest.mark.docker
async def test_the_slot_folder_is_read_only_inside_and_goes_at_destroy(
    config: TrialConfig,
) -> None:
    sandbox = await made(config, new_id("job-slot"))
    folder = sandbox.slot_folder
    assert folder is not None and is_slot_folder(str(folder))
    try:
        (folder / "from-host").write_text("hi")
        seen = await sandbox.exec(f"cat {SLOT_DIR}/from-host; touch {SLOT_DIR}/x")
        assert seen.output.startswith("hi") and seen.exit_code != 0
    finally:
        await sandbox.destroy()
    assert not folder.exists()


@pytest.mark.docker
async def test_reap_removes_the_slot_folder_of_a_sandbox_its_maker_left(
    config: TrialConfig,
) -> None:
    job = new_id("job-slot-reap")
    sandbox = await made(config, job)  # its maker "dies": nothing destroys it
    folder = sandbox.slot_folder
    assert folder is not None
    (folder / "verifier-x").mkdir()
    reaper = DockerBackend(config.limits)

    (left,) = await reaper.find_leftovers(owner=config.owner, job=job)
    assert left.slot_folder == str(folder)
    assert await reaper.remove_leftovers([left]) == 1

    assert not folder.exists()
    assert await reaper.find_leftovers(owner=config.owner, job=job) == []


def test_only_a_slot_folder_of_this_host_s_temporary_folder_is_taken_for_one(
    tmp_path: Path,
) -> None:
    assert not is_slot_folder("/")
    assert not is_slot_folder("/home/tbslot-x")
    assert not is_slot_folder(str(tmp_path / "tbslot-x"))  # a folder below the temporary one
