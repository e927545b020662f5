"""The promise end to end, as a user meets it: `trialbox run` killed with SIGKILL halfway
through a job, then `trialbox run --resume` on its folder. Real processes, the fake backend
(so no engine is needed, and the fake's runs of the task's text die with the CLI: see
tests/trials/test_fake_backend.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator import TrialResult
from tests.conftest import REPO_ROOT
from tests.jobs.helpers import make_tasks

TASKS = [f"task-{i}" for i in range(6)]


def trialbox(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", *args]


def gone(group: int, *, within: float = 10.0) -> bool:
    """True once the process group is empty: a child the kill caught mid-spawn (before its
    own session) is in it until the host's init reaps it, which can take a second."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def readable(data: bytes) -> TrialResult | None:
    """The result, or None for one the kill cut while it was being written."""
    try:
        return TrialResult.model_validate_json(data)
    except ValidationError:
        return None


def wait_for_a_result(job_dir: Path, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while not list(job_dir.glob("*/result.json")):
        assert process.poll() is None, "the job ended before it could be killed"
        assert time.monotonic() < deadline, "no result.json within 60 s"
        time.sleep(0.02)


def kill_halfway(command: list[str], job_dir: Path, output: Any = subprocess.DEVNULL) -> None:
    """Start `command` (a trialbox run) in its own process group, SIGKILL the whole group once
    the first result is written, and check nothing of it is left. Its temporary files (the
    fake backend's sandbox folders among them: no exit handler runs after a SIGKILL) go to a
    folder of its own, removed here."""
    scratch = tempfile.mkdtemp(prefix="trialbox-killed-")
    first = subprocess.Popen(
        command, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=output, stderr=output,
        start_new_session=True, env={**os.environ, "TMPDIR": scratch},
    )  # fmt: skip
    try:
        wait_for_a_result(job_dir, first)
        os.killpg(first.pid, signal.SIGKILL)
        assert first.wait(timeout=10) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=10)
        shutil.rmtree(scratch, ignore_errors=True)
    assert gone(first.pid)  # the whole process group


def test_a_job_killed_halfway_is_finished_by_resume(tmp_path: Path) -> None:
    make_tasks(tmp_path, *TASKS, solve_sh="#!/bin/sh\nsleep 0.5\n")
    job_dir = tmp_path / "jobs" / "killed"
    with (tmp_path / "first.log").open("wb") as log:
        kill_halfway(
            trialbox("run", str(tmp_path / "tasks"), "--backend", "fake", "-n", "2",
                     "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "killed"),
            job_dir, log,
        )  # fmt: skip

    before = {p: p.read_bytes() for p in job_dir.glob("*/result.json")}
    finished = [r for r in map(readable, before.values()) if r is not None]
    assert 1 <= len(finished) < len(TASKS), "killed halfway: some done, some not"
    at_kill = json.loads((job_dir / "job.json").read_text())  # whole: written atomically
    assert at_kill["n_trials"] <= len(before)

    second = subprocess.Popen(
        trialbox("run", "--resume", str(job_dir), "--json", "-n", "3"),
        cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = second.communicate(timeout=120)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(timeout=10)

    assert second.returncode == 0, err.decode()
    assert gone(second.pid)
    job = json.loads(out)
    assert job["job_id"] == "killed"
    assert json.loads((job_dir / "job.json").read_text()) == job
    by_task = {name: [t for t in job["trials"] if t["task_name"] == name] for name in TASKS}
    assert all(len(trials) == 1 for trials in by_task.values()), by_task
    assert (job["n_trials"], job["n_counted"], job["mean_reward"]) == (6, 6, 1.0)
    assert job["counts_by_status"] == {"success": 6}
    kept_ids = {t["trial_id"] for t in job["trials"]}
    for result in finished:
        assert result.trial_id in kept_ids  # kept, not run again
    assert {p: p.read_bytes() for p in before} == before  # untouched, byte for byte
    ran_again = [t for t in job["trials"] if t["trial_id"] not in {r.trial_id for r in finished}]
    assert len(ran_again) == len(TASKS) - len(finished)
    assert all(Path(t["trial_dir"], "result.json").is_file() for t in ran_again)
    assert f"kept {len(finished)} finished trial(s) of 6" in err.decode()
