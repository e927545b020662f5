"""Faults in and around the sandbox, each landing in its true category, against the real
engine: what the agent does to its own sandbox counts (`agent`), or is survived and scored;
what happens to the sandbox from outside is `infra`. Every case writes a result.json and
leaves no container (the conftest's leak check)."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from orchestrator import Limits, TrialConfig, TrialResult, run_trial
from orchestrator.sandbox import sandbox_name
from tests.conftest import BASE_IMAGE, DEFAULT_DOCKERFILE, OFFICIAL_IMAGE, REPO_ROOT, MakeTask

pytestmark = pytest.mark.docker

WRITES_ANSWER = '#!/bin/sh\n[ "$(cat /app/answer.txt)" = 42 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n'  # noqa: E501


def task_toml(*, agent_timeout: float = 60, pids: int = 1024, memory_mb: int = 512) -> str:
    return (
        f"[agent]\ntimeout_sec = {agent_timeout}\n[verifier]\ntimeout_sec = 60\n"
        f"[environment]\npids_limit = {pids}\nmemory_mb = {memory_mb}\n"
    )


def written(result: TrialResult) -> dict:
    """The result as written to disk: every case must have one."""
    return json.loads((Path(result.trial_dir) / "result.json").read_text())


def python_agent(code: str) -> str:
    return "command:exec /opt/trialbox/venv/bin/python -c " + shlex.quote(code)


async def test_an_agent_holding_every_pid_past_its_timeout_is_stopped_and_still_scored(
    config: TrialConfig, make_task: MakeTask
) -> None:
    """No command can run in the sandbox (no `kill`, no verifier): the relay stops every
    process from the host, the pids are free again, and the agent's answer is verified."""
    hog = (
        "import subprocess, time\n"
        "open('/app/answer.txt', 'w').write('42')\n"
        "procs = []\n"
        "while True:\n"
        "    try: procs.append(subprocess.Popen(['sleep', '300']))\n"
        "    except OSError: break\n"
        "time.sleep(300)\n"
    )
    task = make_task(task_toml=task_toml(agent_timeout=5, pids=48), test_sh=WRITES_ANSWER)
    result = await run_trial(task, python_agent(hog), config=config)  # the default graces
    assert (result.status, result.reward, result.error) == ("success", 1.0, None)
    assert result.agent.termination == "timeout"
    assert "killed from the host" in result.agent.detail
    assert written(result)["reward"] == 1.0


async def test_a_bash_fork_loop_at_the_default_pids_limit_is_stopped_from_the_host_and_scored(
    config: TrialConfig, make_task: MakeTask
) -> None:
    """Issue 18 item 4, with every default (graces, pids_limit 1024): bash retries the forks
    that fail, so at the agent's timeout the pids are all taken and nothing can start inside.
    The host's pid reading decides at once, the host stops every process, and the sample
    counts: the verifier runs and scores the answer the agent wrote first."""
    task = make_task(task_toml=task_toml(agent_timeout=10), test_sh=WRITES_ANSWER)
    agent = "command:echo 42 > /app/answer.txt; bash -c 'while true; do sleep 1000 & done'"
    result = await run_trial(task, agent, config=config)
    assert (result.status, result.reward, result.error) == ("success", 1.0, None)
    assert (result.agent.termination, result.agent.exit_code) == ("timeout", 124)
    assert "every pid the sandbox allows was taken" in result.agent.detail
    on_disk = written(result)
    assert (on_disk["status"], on_disk["reward"], on_disk["error"]) == ("success", 1.0, None)
    assert on_disk["agent"]["termination"] == "timeout"
    assert (Path(result.trial_dir) / "logs" / "verifier" / "reward.txt").read_text() == "1\n"


@pytest.mark.parametrize("freed", [0, 1], ids=["all-taken", "two-left"])
async def test_leftover_processes_holding_every_pid_are_killed_so_the_verifier_runs(
    config: TrialConfig, make_task: MakeTask, freed: int
) -> None:
    """The agent's leader ends (its own pid freed) and leaves sleepers holding the rest; with
    `two-left` one of them ends too, as a fork loop's parents do: two free pids are too few
    for any command of the framework's, and the leftovers are still killed from the host."""
    leave = (
        "import subprocess\n"
        "open('/app/answer.txt', 'w').write('42')\n"
        "procs = []\n"
        "while True:\n"
        "    try: procs.append(subprocess.Popen(['sleep', '300'], start_new_session=True))\n"
        "    except OSError: break\n"
        f"for proc in procs[:{freed}]: proc.kill(); proc.wait()\n"
    )
    task = make_task(task_toml=task_toml(pids=48), test_sh=WRITES_ANSWER)
    result = await run_trial(task, python_agent(leave), config=config)
    assert (result.status, result.reward) == ("success", 1.0)
    assert result.agent.termination == "exited"
    held = f"({47 - freed} of 48)"  # the leader's pid is free once it exited
    assert any("held every pid" in w and held in w for w in result.warnings), result.warnings


async def test_an_agent_that_runs_out_of_memory_is_warned_about_and_scored(
    config: TrialConfig, make_task: MakeTask
) -> None:
    hog = "x = []\nwhile True: x.append(bytearray(32 * 1024 * 1024))\n"
    task = make_task(task_toml=task_toml(memory_mb=128), test_sh=WRITES_ANSWER)
    agent = "command:echo 42 > /app/answer.txt; /opt/trialbox/venv/bin/python -c " + shlex.quote(
        hog
    )
    result = await run_trial(task, agent, config=config)
    assert (result.status, result.reward) == ("success", 1.0)
    assert result.agent.exit_code == 137
    assert any("out of memory" in w for w in result.warnings), result.warnings
    assert "memory_mb=128" in result.agent.detail


@pytest.mark.parametrize("signal", ["TERM", "KILL", "INT", "HUP"])
async def test_an_agent_cannot_stop_its_own_sandbox_with_kill_1(
    config: TrialConfig, make_task: MakeTask, signal: str
) -> None:
    task = make_task(test_sh=WRITES_ANSWER)
    agent = f"command:kill -{signal} 1; sleep 1; echo 42 > /app/answer.txt"
    result = await run_trial(task, agent, config=config)
    assert (result.status, result.reward, result.error) == ("success", 1.0, None)


async def _kill_when(
    client: docker.DockerClient, name: str, marker: str, within: float = 60
) -> None:
    """Kill the container `name` through the engine once `marker` exists in it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        await asyncio.sleep(0.1)
        try:
            container = await asyncio.to_thread(client.containers.get, name)
            probe = await asyncio.to_thread(container.exec_run, f"test -e {marker}")
        except (docker.errors.NotFound, docker.errors.APIError):
            continue
        if probe.exit_code == 0:
            await asyncio.to_thread(container.kill)
            return
    raise AssertionError(f"{marker} never appeared in {name}")


@pytest.mark.parametrize("when", ["agent", "verifier"])
async def test_a_sandbox_killed_from_outside_is_infra(
    config: TrialConfig, make_task: MakeTask, docker_client: docker.DockerClient, when: str
) -> None:
    test_sh = "#!/bin/sh\ntouch /tmp/verifying\nsleep 60\necho 1 > /logs/verifier/reward.txt\n"
    task = make_task(test_sh=test_sh)
    agent = "command:touch /tmp/working; sleep 60" if when == "agent" else "nop"
    marker = "/tmp/working" if when == "agent" else "/tmp/verifying"
    trial_id, job_id = f"killed-{when}", f"job-killed-{when}"
    name = sandbox_name(trial_id, job_id)
    killer = asyncio.ensure_future(_kill_when(docker_client, name, marker))
    result = await run_trial(task, agent, config=config, trial_id=trial_id, job_id=job_id)
    await killer
    assert result.status == "failure"
    assert result.error is not None
    assert (result.error.category, result.error.type) == ("infra", "SandboxLostError")
    assert result.error.phase == ("agent" if when == "agent" else "verify")
    assert "from outside" in result.error.message
    assert result.reward is None and written(result)["error"]["discardable"] is True


async def test_a_failing_dockerfile_step_is_validation_with_its_whole_build_log_kept(
    config: TrialConfig, make_task: MakeTask
) -> None:
    coloured = r"printf '\033[1;31mstep-output-7d1f\033[0m\n'"  # as a tool prints for a tty
    dockerfile = DEFAULT_DOCKERFILE + f"RUN {coloured} && exit 3\n"
    task = make_task(dockerfile=dockerfile)
    result = await run_trial(task, "nop", config=config)
    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("validation", "image")
    assert "returned a non-zero code: 3" in result.error.message
    log = Path(result.trial_dir) / "image-build.log"
    assert str(log) in result.error.message
    assert "\nstep-output-7d1f\n" in log.read_text()  # the colours gone, the words kept
    assert "\x1b" not in log.read_text() + result.error.message


async def test_files_cut_at_the_cap_are_warned_about_and_a_cut_reward_says_so(
    config: TrialConfig, make_task: MakeTask
) -> None:
    """A reward.json past the collection cap: scored from the verifier's snapshot, which holds
    it whole (the cut copy is only a warning); where no snapshot could be printed (here the
    agent removed `od`), the collected copy is scored and its cut says so."""
    padded_reward = (
        '#!/bin/sh\nprintf \'{"reward": 1, "pad": 0\' > /logs/verifier/reward.json\n'
        "head -c 5000 /dev/zero | tr '\\0' ' ' >> /logs/verifier/reward.json\n"
        "printf '}' >> /logs/verifier/reward.json\n"
    )
    task = make_task(test_sh=padded_reward)
    capped = config.model_copy(update={"limits": Limits(log_file_cap_bytes=1024)})
    agent = "command:head -c 3000 /dev/zero | tr '\\0' y"
    whole = await run_trial(task, agent, config=capped)
    assert "logs/agent/stdout.txt was cut at 1024 bytes (Limits.log_file_cap_bytes)" in (
        whole.warnings
    )
    assert whole.error is None, whole.error
    assert whole.rewards == {"reward": 1.0, "pad": 0.0}
    assert any("logs/verifier/reward.json was cut" in w for w in whole.warnings), whole.warnings

    result = await run_trial(task, f"{agent}; rm -f /usr/bin/od", config=capped)
    assert result.error is not None
    assert (result.error.category, result.error.type) == ("validation", "RewardFileError")
    assert result.error.message.startswith("/logs/verifier/reward.json: cut at the collection cap")


def test_trialbox_run_exits_1_for_a_task_whose_dockerfile_step_fails(
    docker_ready: docker.DockerClient, make_task: MakeTask, tmp_path: Path
) -> None:
    task = make_task(dockerfile=DEFAULT_DOCKERFILE + "RUN exit 5\n")
    done = subprocess.run(
        [
            sys.executable, "-m", "orchestrator.cli", "run", str(task), "--agent", "nop",
            "--json", "--jobs-dir", str(tmp_path / "jobs"),
            "--base-image", f"{OFFICIAL_IMAGE}={BASE_IMAGE}",
        ],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    job = json.loads(done.stdout)
    assert (job["n_trials"], job["n_counted"], job["mean_reward"]) == (1, 0, None)
