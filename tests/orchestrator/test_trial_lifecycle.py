"""The sandbox around a trial: its limits and labels, kept containers, cancellation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import docker
import docker.errors
import pytest

from orchestrator import TrialConfig, TrialResult, run_trial

REPO_ROOT = Path(__file__).resolve().parents[2]
HELLO = REPO_ROOT / "examples" / "hello-oracle"


async def test_kept_container_carries_labels_and_limits(
    config: TrialConfig, make_task, docker_ready: docker.DockerClient
) -> None:
    task = make_task(
        "limits",
        task_toml="[environment]\ncpus = 0.5\nmemory_mb = 256\npids_limit = 64\n",
    )
    config = config.model_copy(update={"keep_containers": True})
    result = await run_trial(task, "nop", config=config, job_id="job-limits")
    try:
        container = docker_ready.containers.get(f"trialbox-{result.trial_id}")
        assert container.labels["trialbox.trial"] == result.trial_id
        assert container.labels["trialbox.job"] == "job-limits"
        assert container.labels["trialbox.owner"] == config.owner
        host = container.attrs["HostConfig"]
        assert host["NanoCpus"] == 500_000_000
        assert host["Memory"] == 256 * 1024 * 1024
        assert host["PidsLimit"] == 64
        assert host["Init"] is True
        assert host["NetworkMode"] == "none"
        assert "no-new-privileges" in host["SecurityOpt"]
        assert container.status == "running"
    finally:
        docker_ready.containers.get(f"trialbox-{result.trial_id}").remove(force=True)
    assert result.reward == 1.0


async def test_cancelled_trial_cleans_up_and_says_so(
    config: TrialConfig, docker_ready: docker.DockerClient, container_watch
) -> None:
    running = asyncio.ensure_future(
        run_trial(HELLO, "command:sleep 60", config=config, job_id=container_watch.job_id)
    )
    labels = {"label": f"trialbox.job={container_watch.job_id}"}
    for _ in range(300):  # until the agent is at work (the image is cached)
        found = await asyncio.to_thread(docker_ready.containers.list, filters=labels)
        if found and found[0].status == "running":
            break
        await asyncio.sleep(0.05)
    else:
        running.cancel()
        pytest.fail("the trial's container never started")
    await asyncio.sleep(0.5)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running

    assert container_watch.created() != []
    left = await asyncio.to_thread(docker_ready.containers.list, all=True, filters=labels)
    assert left == []
    job_dir = config.jobs_dir.resolve() / container_watch.job_id
    (result_file,) = job_dir.glob("*/result.json")
    result = TrialResult.model_validate_json(result_file.read_text())
    assert result.status == "cancelled"
    assert result.agent.termination == "aborted"
    assert result.reward is None
    assert json.loads(result_file.read_text())["finished_at"] is not None
