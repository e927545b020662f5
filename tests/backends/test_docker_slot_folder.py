"""A Docker sandbox's slot folder (`SandboxSpec.slot_mount`: the host folder mounted
read-only, for the gateway's socket and the verifier's staged tests) goes with the sandbox:
at its destroy, and when a process that died without destroying it is reaped."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import TrialConfig
from orchestrator.backends.docker.backend import DockerBackend
from orchestrator.backends.docker.sandbox import is_slot_folder
from orchestrator.sandbox.spec import SLOT_DIR
from tests.conftest import docker_sandbox


@pytest.mark.docker
async def test_the_slot_folder_is_read_only_inside_and_goes_at_destroy(
    config: TrialConfig,
) -> None:
    async with docker_sandbox(config, name="slot", slot_mount=SLOT_DIR) as sandbox:
        folder = sandbox.slot_folder
        assert folder is not None and is_slot_folder(str(folder))
        (folder / "from-host").write_text("hi")
        seen = await sandbox.exec(f"cat {SLOT_DIR}/from-host; touch {SLOT_DIR}/x")
        assert seen.output.startswith("hi") and seen.exit_code != 0
    assert not folder.exists()


@pytest.mark.docker
async def test_reap_removes_the_slot_folder_of_a_sandbox_its_maker_left(
    config: TrialConfig,
) -> None:
    async with docker_sandbox(config, name="slot-reap", slot_mount=SLOT_DIR) as sandbox:
        # Its maker "died": another process reaps it before anything destroys it.
        folder, job = sandbox.slot_folder, sandbox.spec.job_id
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
