"""The relay against the real engine: whole trials through `run_trial`, and the launcher itself
on a bare sandbox.

Graces are 1 s and agent timeouts a few seconds, so the file runs in well under a minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from orchestrator import Limits, TrialConfig, TrialResult, run_trial
from orchestrator.backends.docker.sandbox import DockerSandbox, SandboxSpec
from orchestrator.sandbox import ExecResult
from relay import Command, Ending, Relay, RelayPolicy
from relay.launcher import SCOPE_MARKER
from tests.conftest import EXAMPLES, TEST_IMAGE_PREFIX, ensure_task_image

SECRET = "sk-relay-secret-987"
HELLO = EXAMPLES / "hello-oracle"
LABEL_TRIAL = "trialbox.trial"
POLICY = RelayPolicy(
    term_grace=1, kill_grace=1, abort_term_quiet=2, abort_kill_quiet=2, destroy_deadline=30
)


def task_toml(agent_timeout: float) -> str:
    return f"[agent]\ntimeout_sec = {agent_timeout}\n\n[verifier]\ntimeout_sec = 30\n"


ALIVE = """
def alive(pid_file):
    try:
        os.kill(int(open(pid_file).read()), 0)
    except ProcessLookupError:
        return False
    return True

def answer(url, within=20.0):
    # The body once the server answers: it may still be starting on a busy machine, and one
    # that was stopped never answers, so waiting decides nothing but when.
    import time
    deadline = time.monotonic() + within
    while True:
        try:
            return urllib.request.urlopen(url, timeout=5).read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
"""


def reward_if(python_condition: str) -> str:
    """A test.sh writing reward 1 when the Python expression holds, else 0."""
    return (
        "#!/bin/sh\npython3 - <<'PY'\nimport os, urllib.request\n"
        f"{ALIVE}\n"
        "try:\n"
        f"    ok = bool({python_condition})\n"
        "except Exception as exc:\n"
        "    print('check failed:', repr(exc))\n"
        "    ok = False\n"
        "open('/logs/verifier/reward.txt', 'w').write('1\\n' if ok else '0\\n')\n"
        "PY\n"
    )


@pytest.fixture
def quick(config: TrialConfig) -> TrialConfig:
    return config.model_copy(
        update={"limits": Limits(stop_term_grace_sec=1.0, stop_kill_grace_sec=1.0)}
    )


def trial_files(result: TrialResult) -> list[Path]:
    return [p for p in Path(result.trial_dir).rglob("*") if p.is_file()]


def agent_log(result: TrialResult, name: str) -> str:
    return (Path(result.trial_dir) / "logs" / "agent" / name).read_text()


async def wait_for_agent(
    client: docker.DockerClient, trial_id: str, trial: asyncio.Task, marker: str = "/tmp/started"
):
    """The trial's container once the agent has written `marker`."""
    deadline = time.monotonic() + 60
    while True:
        assert not trial.done(), f"the trial ended early: {trial.result()}"
        assert time.monotonic() < deadline, "the agent never started"
        found = await asyncio.to_thread(
            client.containers.list, filters={"label": f"{LABEL_TRIAL}={trial_id}"}
        )
        if found:
            probe = await asyncio.to_thread(found[0].exec_run, ["test", "-f", marker])
            if probe.exit_code == 0:
                return found[0]
        await asyncio.sleep(0.2)


# -- framework timeout --------------------------------------------------------------------------


async def test_a_server_left_running_past_the_timeout_is_scored(quick, make_task) -> None:
    task = make_task(
        "server",
        task_toml=task_toml(3),
        test_sh=reward_if("b'served-by-the-agent' in answer('http://127.0.0.1:8000/')"),
    )
    agent = (
        "command:mkdir -p /tmp/www && echo served-by-the-agent > /tmp/www/index.html"
        " && { python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/www"
        " >/tmp/server.log 2>&1 & } && sleep 600"
    )

    result = await run_trial(task, agent, config=quick)

    assert result.error is None, result.error
    assert result.agent.termination == "timeout"
    assert result.agent.exit_code == 124
    assert "TERM" in result.agent.detail
    assert result.status == "success"
    assert result.reward == 1.0  # the server outlived its leader and answered the verifier


async def test_a_term_ignoring_leader_is_killed_and_the_trial_scored(quick, make_task) -> None:
    # The verifier scores 1 only if the leader is really gone.
    task = make_task(
        "trap",
        task_toml=task_toml(2),
        test_sh=reward_if("not alive('/logs/agent/leader.pid')"),
    )
    agent = 'command:trap "" TERM; echo $$ > /logs/agent/leader.pid; sleep 600'

    result = await run_trial(task, agent, config=quick)

    assert result.error is None, result.error
    assert result.agent.termination == "timeout"
    assert result.agent.exit_code == 124
    assert result.agent.detail == "leader stopped by KILL"
    assert result.agent.stop_sec >= 0.9  # the TERM grace (1 s) was given in full first
    assert result.status == "success"
    assert result.reward == 1.0
    # The pid the relay recorded is the leader's own: the launcher exec'd, it did not fork.
    [recorded] = (Path(result.trial_dir) / "logs" / "agent" / ".relay").glob("subject-*.pid")
    assert recorded.read_text().strip() == agent_log(result, "leader.pid").strip()


# -- exit by itself -----------------------------------------------------------------------------


async def test_exit_3_leaves_background_children_running(quick, make_task) -> None:
    task = make_task(
        "exit3", task_toml=task_toml(30), test_sh=reward_if("alive('/logs/agent/child.pid')")
    )
    agent = "command:sleep 600 & echo $! > /logs/agent/child.pid; exit 3"

    result = await run_trial(task, agent, config=quick)

    assert result.error is None, result.error
    assert result.agent.termination == "exited"
    assert result.agent.exit_code == 3
    assert result.reward == 1.0  # the child was still alive at verification
    # The child holds no pipe of the exec: the agent's end was not delayed by it.
    assert result.agent.duration_sec < 10


# -- host abort ---------------------------------------------------------------------------------


async def test_a_host_abort_kills_the_group_and_removes_the_container(
    quick, make_task, docker_client
) -> None:
    task = make_task("abort", task_toml=task_toml(120))
    agent = "command:sleep 600 & sleep 600 & touch /tmp/started; wait"
    trial_id, job_id = f"relay-abort-{uuid.uuid4().hex[:8]}", f"job-{uuid.uuid4().hex[:8]}"
    trial = asyncio.ensure_future(
        run_trial(task, agent, config=quick, trial_id=trial_id, job_id=job_id)
    )
    try:
        await wait_for_agent(docker_client, trial_id, trial)
        started = time.monotonic()
        trial.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(trial, 60)
        elapsed = time.monotonic() - started
    finally:
        trial.cancel()
        with contextlib.suppress(BaseException):
            await trial

    result_file = quick.jobs_dir.resolve() / job_id / trial_id / "result.json"
    result = TrialResult.model_validate_json(result_file.read_text())
    assert result.status == "cancelled"
    assert result.agent.termination == "aborted"
    assert result.agent.detail == "group quiesced"  # TERM reached the whole group
    assert result.reward is None
    assert elapsed < 20
    left = await asyncio.to_thread(
        docker_client.containers.list, all=True, filters={"label": f"{LABEL_TRIAL}={trial_id}"}
    )
    assert left == []


# -- credentials --------------------------------------------------------------------------------


async def test_credentials_reach_the_agent_and_nothing_else(
    quick, make_task, docker_client
) -> None:
    config = quick.model_copy(update={"credentials": {"MY_API_KEY": SECRET}})
    task = make_task("creds", task_toml=task_toml(60))
    agent = (
        'command:printf %s "$MY_API_KEY" | sha256sum | cut -d" " -f1 > /logs/agent/key.sha256;'
        " ls /tmp/.trialbox-env-* 2>/dev/null | wc -l > /logs/agent/envfiles.txt;"
        ' echo "the key is $MY_API_KEY"; echo "the key is $MY_API_KEY" >&2;'
        " touch /tmp/started; sleep 3"
    )
    trial_id = f"relay-creds-{uuid.uuid4().hex[:8]}"
    trial = asyncio.ensure_future(run_trial(task, agent, config=config, trial_id=trial_id))
    try:
        container = await wait_for_agent(docker_client, trial_id, trial)
        api = docker_client.api
        inspected = await asyncio.to_thread(api.inspect_container, container.id)
        assert SECRET not in json.dumps(inspected)
        exec_ids = inspected.get("ExecIDs") or []
        execs = [await asyncio.to_thread(api.exec_inspect, e) for e in exec_ids]
        assert any("exec sh -c" in " ".join(e["ProcessConfig"]["arguments"]) for e in execs), (
            "the launcher's exec was not among those inspected"
        )
        for e in execs:
            assert SECRET not in json.dumps(e)
        top = await asyncio.to_thread(api.top, container.id, "-eo pid,args")
        assert any("sleep 3" in " ".join(p) for p in top["Processes"])
        assert SECRET not in json.dumps(top)
        result = await asyncio.wait_for(trial, 60)
    finally:
        trial.cancel()
        with contextlib.suppress(BaseException):
            await trial

    assert result.error is None, result.error
    assert result.agent.termination == "exited" and result.agent.exit_code == 0
    assert agent_log(result, "key.sha256").strip() == hashlib.sha256(SECRET.encode()).hexdigest()
    assert agent_log(result, "envfiles.txt").strip() == "0"  # gone before the agent started
    assert "the key is [redacted]" in agent_log(result, "stdout.txt")
    assert "the key is [redacted]" in agent_log(result, "stderr.txt")
    files = trial_files(result)
    assert Path(result.trial_dir, "result.json") in files
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path


# -- the launcher on a bare sandbox -------------------------------------------------------------


class KeepSandbox:
    """Passes exec and upload through; records destroy instead of doing it, so the test can
    look inside afterwards."""

    def __init__(self, inner: DockerSandbox) -> None:
        self.inner = inner
        self.destroy_calls = 0

    async def exec(self, command: str | Command, **kwargs: Any) -> ExecResult:
        return await self.inner.exec(command, **kwargs)

    async def upload_file(self, path: str, data: bytes, **kwargs) -> None:
        await self.inner.upload_file(path, data, **kwargs)

    async def destroy(self) -> None:
        self.destroy_calls += 1


async def _sandbox(config: TrialConfig, image: str) -> AsyncIterator[DockerSandbox]:
    spec = SandboxSpec(
        image=image,
        trial_id=f"relay-launcher-{uuid.uuid4().hex[:8]}",
        job_id="relay-launcher",
        owner=config.owner,
    )
    sandbox = await DockerSandbox.create(spec)
    try:
        yield sandbox
    finally:
        await sandbox.destroy()


@pytest.fixture
async def sandbox(config: TrialConfig) -> AsyncIterator[DockerSandbox]:
    """A bare sandbox of the example's image (a sandbox's image carries trialbox's runtime:
    its PID 1 is the runtime's Python)."""
    async for made in _sandbox(config, await ensure_task_image(config, HELLO)):
        yield made


def bare_relay(sandbox: KeepSandbox, state_dir: str = "/tmp/relay-state") -> Relay:
    return Relay(
        sandbox, policy=POLICY, state_dir=state_dir, stdout="/tmp/out.txt", stderr="/tmp/err.txt"
    )


@pytest.mark.parametrize(
    ("state_dir", "user"),
    [
        ("/dev/null/relay", "root"),  # mkdir cannot succeed, even as root
        ("/etc", "nobody"),  # the directory exists; the pid file is not writable
    ],
)
async def test_scope_unavailable_is_reported_and_the_env_file_removed(
    sandbox, state_dir: str, user: str
) -> None:
    kept = KeepSandbox(sandbox)
    relay = bare_relay(kept, state_dir=state_dir)

    outcome = await relay.run(
        "touch /tmp/subject-ran", timeout_sec=20, env={"K": SECRET}, user=user
    )

    assert outcome.ending is Ending.INFRA_FAILURE
    assert "scope" in outcome.detail
    assert kept.destroy_calls == 1
    check = await sandbox.exec(
        "ls /tmp/.trialbox-env-* 2>/dev/null | wc -l; test -e /tmp/subject-ran; echo ran=$?",
        timeout_sec=10,
    )
    assert check.output.split() == ["0", "ran=1"]


async def test_the_subject_printing_the_exact_marker_is_not_a_scope_failure(sandbox) -> None:
    kept = KeepSandbox(sandbox)
    relay = bare_relay(kept)
    # The subject can learn this launch's nonce from the pid file's name; print its marker.
    subject = (
        "n=$(ls /tmp/relay-state | sed -e 's/^subject-//' -e 's/[.]pid$//');"
        f' m="{SCOPE_MARKER}:$n"; echo "$m"; echo "$m" >&2; exit 125'
    )

    outcome = await relay.run(subject, timeout_sec=20)

    assert outcome.ending is Ending.EXITED
    assert outcome.exit_code == 125
    assert kept.destroy_calls == 0
    printed = await sandbox.exec("cat /tmp/err.txt", timeout_sec=10)
    assert relay.paths.scope_marker in printed.output  # it really imitated this launch's marker


async def test_a_subject_that_rewrites_its_pid_file_is_still_stopped_as_the_leader(
    sandbox,
) -> None:
    """The pid file is the subject's to write; the relay checks it in the sandbox, so a
    rewritten file neither misdirects the signal nor turns the trial into a discarded one."""
    kept = KeepSandbox(sandbox)
    relay = bare_relay(kept)
    subject = (
        "sleep 600 & for f in /tmp/relay-state/subject-*.pid; do echo $! > $f; done; sleep 600"
    )

    # The timeout leaves the subject a few seconds to rewrite the file before it is stopped.
    outcome = await relay.run(subject, timeout_sec=3)

    assert outcome.ending is Ending.TIMEOUT, outcome
    assert outcome.scoreable and not outcome.sandbox_destroyed
    assert kept.destroy_calls == 0
    # The background sleep the file pointed at was not the one signalled: it still runs.
    alive = await sandbox.exec('kill -0 "$(cat /tmp/relay-state/subject-*.pid)"', user="root")
    assert alive.exit_code == 0, alive.output


@pytest.fixture
async def nobody_sandbox(config: TrialConfig, docker_client) -> AsyncIterator[DockerSandbox]:
    """A sandbox whose image says `USER nobody`, as many task Dockerfiles do."""
    tag = f"{TEST_IMAGE_PREFIX}nobody:{uuid.uuid4().hex[:8]}"
    dockerfile = f"FROM {await ensure_task_image(config, HELLO)}\nUSER nobody\n"
    await asyncio.to_thread(
        docker_client.images.build,
        fileobj=io.BytesIO(dockerfile.encode()),
        tag=tag,
        pull=False,
        rm=True,
        forcerm=True,
    )
    try:
        async for made in _sandbox(config, tag):
            yield made
    finally:
        with contextlib.suppress(docker.errors.DockerException):
            await asyncio.to_thread(docker_client.images.remove, tag, force=True)


async def test_credentials_reach_a_subject_of_an_image_with_a_non_root_user(
    nobody_sandbox,
) -> None:
    kept = KeepSandbox(nobody_sandbox)
    relay = bare_relay(kept)

    outcome = await relay.run(
        'printf %s "$MY_API_KEY" | sha256sum > /tmp/key.sha',
        timeout_sec=20,
        env={"MY_API_KEY": SECRET},
    )
    after = await nobody_sandbox.exec(
        "ls /tmp/.trialbox-env-* 2>/dev/null | wc -l; cat /tmp/key.sha", timeout_sec=10, user="root"
    )

    assert (outcome.ending, outcome.exit_code) == (Ending.EXITED, 0)
    assert after.output.split()[:2] == ["0", hashlib.sha256(SECRET.encode()).hexdigest()]
