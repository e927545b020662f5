"""A job on the real engine killed with SIGKILL halfway: the containers it left are removed
by `--resume`, which then finishes the job; nothing is left on the engine afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import docker

from tests.conftest import BASE_IMAGE, REPO_ROOT, remove_trial_container
from tests.jobs.helpers import make_tasks
from tests.jobs.test_kill_and_resume import gone, trialbox, wait_for_a_result

TASKS = ["quick", "slow-1", "slow-2", "slow-3"]


def ours(client: docker.DockerClient, job_id: str) -> list[str]:
    found = client.containers.list(
        ignore_removed=True, all=True, filters={"label": f"trialbox.job={job_id}"}
    )
    return [c.name for c in found]


def test_resume_removes_what_a_killed_job_left_on_the_engine_and_finishes_it(
    tmp_path: Path, docker_ready: docker.DockerClient
) -> None:
    # The first task finishes at once; the others are still working when it does (and the
    # kill comes), and are quick when they run again.
    quick = "#!/bin/sh\n"
    make_tasks(tmp_path, TASKS[0], dockerfile=f"FROM {BASE_IMAGE}\n", solve_sh=quick)
    slow = make_tasks(
        tmp_path, *TASKS[1:], dockerfile=f"FROM {BASE_IMAGE}\n", solve_sh="#!/bin/sh\nsleep 60\n"
    )
    job_id = f"killed-{uuid.uuid4().hex[:8]}"
    job_dir = tmp_path / "jobs" / job_id
    first = subprocess.Popen(
        trialbox("run", str(tmp_path / "tasks"), "-n", "2", "--jobs-dir",
                 str(tmp_path / "jobs"), "--job-name", job_id),
        cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for_a_result(job_dir, first)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        assert gone(first.pid)
        left = ours(docker_ready, job_id)
        assert left, "a trial was in flight: its container is left behind"
        for task in slow:
            (task / "solution" / "solve.sh").write_text(quick)

        resumed = subprocess.run(
            trialbox("run", "--resume", str(job_dir), "--json"),
            cwd=REPO_ROOT, stdin=subprocess.DEVNULL, capture_output=True, timeout=300,
        )  # fmt: skip

        assert resumed.returncode == 0, resumed.stderr.decode()
        assert "sandbox(es) the stopped run left" in resumed.stderr.decode()
        job = json.loads(resumed.stdout)
        assert (job["n_trials"], job["n_counted"], job["mean_reward"]) == (4, 4, 1.0)
        assert ours(docker_ready, job_id) == []
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=10)
        for name in ours(docker_ready, job_id):
            remove_trial_container(docker_ready.containers.get(name))
