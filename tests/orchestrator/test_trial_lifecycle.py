"""The sandbox around a trial: its limits and labels, kept containers, cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import docker
import docker.errors
import pytest

from orchestrator import TrialConfig, TrialResult, run_trial
from orchestrator.backends.docker.sandbox import KEEPALIVE
from orchestrator.sandbox import sandbox_name
from tests.conftest import remove_trial_container

REPO_ROOT = Path(__file__).resolve().parents[2]
HELLO = REPO_ROOT / "examples" / "hello-oracle"
STARTED = "/tmp/agent-started"


async def until_agent_started(
    client: docker.DockerClient, job_id: str, trial: asyncio.Future, within: float = 120
) -> None:
    """The job's container runs and its agent has written STARTED (an image build included)."""
    deadline = time.monotonic() + within
    while True:
        assert not trial.done(), f"the trial ended early: {trial.result()}"
        assert time.monotonic() < deadline, f"the agent did not start within {within} s"
        found = await asyncio.to_thread(
            client.containers.list, filters={"label": f"trialbox.job={job_id}"}
        )
        if found:
            probe = await asyncio.to_thread(found[0].exec_run, ["test", "-e", STARTED])
            if probe.exit_code == 0:
                return
        await asyncio.sleep(0.1)


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
        container = docker_ready.containers.get(sandbox_name(result.trial_id, result.job_id))
        assert container.labels["trialbox.trial"] == result.trial_id
        assert container.labels["trialbox.job"] == "job-limits"
        assert container.labels["trialbox.owner"] == config.owner
        host = container.attrs["HostConfig"]
        assert host["NanoCpus"] == 500_000_000
        assert host["Memory"] == 256 * 1024 * 1024
        assert host["PidsLimit"] == 64
        # The image's ENTRYPOINT (none here) is kept; the command is the quiet sh reaper,
        # not Docker's init (which forwards signals).
        assert container.attrs["Config"]["Entrypoint"] is None
        assert container.attrs["Config"]["Cmd"] == ["sh", "-c", KEEPALIVE]
        assert host["NetworkMode"] == "bridge"  # no network key: a network, as in Harbor
        assert "no-new-privileges" in host["SecurityOpt"]
        assert container.status == "running"
    finally:
        remove_trial_container(
            docker_ready.containers.get(sandbox_name(result.trial_id, result.job_id))
        )
    assert result.reward == 1.0


async def test_cancelled_trial_cleans_up_and_says_so(
    config: TrialConfig, docker_ready: docker.DockerClient, container_watch
) -> None:
    running = asyncio.ensure_future(
        run_trial(
            HELLO, f"command:touch {STARTED}; sleep 60", config=config,
            job_id=container_watch.job_id,
        )
    )  # fmt: skip
    try:
        await until_agent_started(docker_ready, container_watch.job_id, running)
    except BaseException:
        running.cancel()
        with contextlib.suppress(BaseException):
            await running
        raise
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running

    assert container_watch.created() != []
    labels = {"label": f"trialbox.job={container_watch.job_id}"}
    left = await asyncio.to_thread(docker_ready.containers.list, all=True, filters=labels)
    assert left == []
    job_dir = config.jobs_dir.resolve() / container_watch.job_id
    (result_file,) = job_dir.glob("*/result.json")
    result = TrialResult.model_validate_json(result_file.read_text())
    assert result.status == "cancelled"
    assert result.agent.termination == "aborted"
    assert result.agent.detail == "group quiesced"  # the relay found the agent at work
    assert result.reward is None
    assert json.loads(result_file.read_text())["finished_at"] is not None


async def test_a_failed_teardown_keeps_a_scored_trial_scored(
    config: TrialConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine removes the container but then errors (a fault it won't make on demand):
    the score stands and the failure is reported as a warning."""
    from orchestrator.backends.docker.sandbox import DockerSandbox
    from orchestrator.common.errors import SandboxError

    real_remove = DockerSandbox._remove

    async def remove_then_fail(self: DockerSandbox) -> None:
        await real_remove(self)
        raise SandboxError("remove container: engine error 500: injected")

    monkeypatch.setattr(DockerSandbox, "_remove", remove_then_fail)
    result = await run_trial(HELLO, "oracle", config=config)

    assert (result.status, result.reward, result.error) == ("success", 1.0, None)
    assert any("teardown failed" in w and "injected" in w for w in result.warnings)


async def test_an_exec_is_never_run_twice_when_the_engine_errs_after_it(
    config: TrialConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transport error after the command ran must not make a retry run it again."""
    import requests

    from orchestrator.backends.docker import api as docker_api
    from orchestrator.backends.docker.sandbox import DockerSandbox, SandboxSpec
    from orchestrator.common.errors import SandboxError

    spec = SandboxSpec(
        image=(await _hello_image(config)), trial_id="once-only", job_id="job-once",
        owner=config.owner,
    )  # fmt: skip
    sandbox = await DockerSandbox.create(spec)
    try:
        api = docker_api.docker_client().api
        real_inspect = api.exec_inspect
        calls = {"n": 0}

        def flaky_inspect(exec_id: str) -> dict:
            calls["n"] += 1
            if calls["n"] == 1:
                raise requests.exceptions.ConnectionError("injected: connection reset")
            return real_inspect(exec_id)

        monkeypatch.setattr(api, "exec_inspect", flaky_inspect)
        with pytest.raises(SandboxError, match="injected"):
            await sandbox.exec("echo ran >> /tmp/count", timeout_sec=10)
        monkeypatch.setattr(api, "exec_inspect", real_inspect)
        counted = await sandbox.exec("wc -l < /tmp/count", timeout_sec=10)
        assert counted.output.strip() == "1"
    finally:
        await sandbox.destroy()


async def _hello_image(config: TrialConfig) -> str:
    from orchestrator import load_task
    from orchestrator.backends.docker.images import default_builder

    built = await default_builder().ensure_image(load_task(HELLO), config.base_image_map)
    return built.tag
