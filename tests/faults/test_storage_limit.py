"""An agent that writes past its task's `storage_mb` is stopped there and fails as the agent's
(`AgentResourceError`, counted), with a warning naming what it wrote and the limit: the real
engine, the default limits but the task's storage_mb, so the host's disk is never filled.

On an engine whose storage driver has no size option (fuse-overlayfs here) it is the watcher
of backends/docker/storage.py that stops it; the engine's refusal of the option is taken here
too, and the driver decision is in tests/orchestrator/test_docker_storage.py, on fakes.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import docker
import pytest

from orchestrator import TrialConfig, run_trial
from orchestrator.backends.docker import storage
from orchestrator.backends.docker.sandbox import DockerSandbox
from orchestrator.sandbox import SandboxSpec
from tests.conftest import BASE_IMAGE, DEFAULT_DOCKERFILE, TEST_OWNER, MakeTask

pytestmark = pytest.mark.docker

STORAGE_MB = 50
CHUNK_MB, CHUNKS = 5, 40  # 200 MB in all, written in chunks the watcher can see go by
TASK_TOML = (
    "[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n"
    f"[environment]\nstorage_mb = {STORAGE_MB}\n"
)
# An image's VOLUME is on the host's disk too, outside the writable layer.
WITH_VOLUME = f"{DEFAULT_DOCKERFILE}RUN mkdir /data\nVOLUME /data\n"


def filling(folder: str) -> str:
    return (
        f"command:for i in $(seq 1 {CHUNKS}); do "
        f"dd if=/dev/zero of={folder}/fill.$i bs=1M count={CHUNK_MB} status=none || exit 3; "
        "echo wrote $i; sleep 0.1; done; echo 1 > /app/answer.txt"
    )


@pytest.mark.parametrize(
    ("folder", "dockerfile"),
    [("/logs/agent", DEFAULT_DOCKERFILE), ("/app", DEFAULT_DOCKERFILE), ("/data", WITH_VOLUME)],
    ids=["logs", "layer", "volume"],
)
async def test_an_agent_that_fills_its_disk_is_stopped_at_storage_mb_as_agent(
    config: TrialConfig,
    make_task: MakeTask,
    docker_client: docker.DockerClient,
    folder: str,
    dockerfile: str,
) -> None:
    task = make_task(task_toml=TASK_TOML, dockerfile=dockerfile)

    result = await run_trial(task, filling(folder), config=config)

    assert (result.status, result.reward) == ("failure", None)
    assert result.error is not None, result
    assert (result.error.category, result.error.type, result.error.phase) == (
        "agent", "AgentResourceError", "agent",
    ), result.error  # fmt: skip
    assert f"storage_mb={STORAGE_MB}" in result.error.message
    notes = [w for w in result.warnings if "filled its disk" in w]
    assert len(notes) == 1, result.warnings
    said = re.search(r"wrote (\d+) MiB", notes[0])
    assert said is not None, notes[0]
    wrote = int(said.group(1))
    assert wrote >= STORAGE_MB, notes[0]
    # What reached the host: the limit and what a fast writer adds between two looks, far
    # from the 200 MB the agent meant to write (its own count of chunks says so too).
    assert wrote < CHUNK_MB * CHUNKS / 2, notes[0]
    stdout = (Path(result.trial_dir) / "logs" / "agent" / "stdout.txt").read_text()
    chunks = [int(n) for n in re.findall(r"^wrote (\d+)$", stdout, re.MULTILINE)]
    assert chunks and max(chunks) * CHUNK_MB < CHUNK_MB * CHUNKS / 2, stdout
    written = json.loads((Path(result.trial_dir) / "result.json").read_text())
    assert written["error"]["category"] == "agent"
    assert written["error"]["discardable"] is False
    assert any("filled its disk" in w for w in written["warnings"])
    left = docker_client.containers.list(
        all=True, filters={"label": f"trialbox.trial={result.trial_id}"}
    )
    assert not left, [c.name for c in left]


async def test_an_agent_s_leftover_that_fills_the_disk_under_the_verifier_is_the_agent_s(
    config: TrialConfig, make_task: MakeTask
) -> None:
    # The agent leaves a writer behind and ends at once; tests/test.sh takes its time.
    task = make_task(
        task_toml=TASK_TOML, test_sh="#!/bin/sh\nsleep 30\necho 1 > /logs/verifier/reward.txt\n"
    )
    leftover = filling("/app").removeprefix("command:")

    result = await run_trial(task, f"command:({leftover}) >/dev/null 2>&1 & exit 0", config=config)

    assert (result.status, result.reward) == ("failure", None)
    assert result.error is not None, result
    assert (result.error.category, result.error.type, result.error.phase) == (
        "agent", "AgentResourceError", "verify",
    ), result.error  # fmt: skip
    assert f"storage_mb={STORAGE_MB}" in result.error.message
    assert [w for w in result.warnings if "filled its disk" in w], result.warnings


async def test_an_engine_that_refuses_the_size_option_gets_a_sandbox_without_it(
    docker_ready: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This engine's driver has no size option (fuse-overlayfs); taken for overlay2, it is
    # asked for one, refuses by name, and the sandbox is made without: watched instead.
    engine_id = f"{docker_ready.info()['ID']}-as-overlay2"
    monkeypatch.setattr(storage, "_engine_driver", lambda: (engine_id, "overlay2"))
    monkeypatch.setattr(storage, "_refused", set())
    spec = SandboxSpec(
        image=BASE_IMAGE, trial_id=f"size-{uuid.uuid4().hex[:8]}", job_id="job-size",
        owner=TEST_OWNER, storage_mb=STORAGE_MB,
    )  # fmt: skip

    sandbox = await DockerSandbox.create(spec)
    try:
        host_config = docker_ready.api.inspect_container(sandbox.container_id)["HostConfig"]
        assert not host_config.get("StorageOpt"), host_config.get("StorageOpt")
        assert storage._refused == {engine_id}
        assert sandbox._disk is not None and not sandbox._disk.enforced
        assert (await sandbox.exec("echo up")).output == "up\n"
    finally:
        await sandbox.destroy()
