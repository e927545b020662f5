"""Which sandboxes a starting process removes as a dead predecessor's (`sandbox.reclaim`), on
the fake backend with real processes as the creators: only those of this jobs folder, made on
this host by a process that is gone (or whose pid is another process's now); `resume_job`
does it too."""

from __future__ import annotations

import logging
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from orchestrator.backends.fake import FakeBackend
from orchestrator.sandbox import SandboxSpec
from orchestrator.sandbox.creator import (
    LABEL_HOST,
    LABEL_JOBS_DIR,
    LABEL_PID,
    LABEL_PID_STARTED,
    Creator,
    is_gone,
    this_process,
)
from orchestrator.sandbox.reclaim import reclaim_dead
from orchestrator.service.job import resume_job, run_job
from orchestrator.tasks.task import load_task
from tests.conftest import write_task
from tests.jobs.helpers import QUICK, fake_config, make_tasks


def creator_of(process: subprocess.Popen[bytes]) -> Creator:
    started = f"{psutil.Process(process.pid).create_time():.2f}"
    return Creator(host=socket.gethostname(), pid=process.pid, started=started)


@pytest.fixture
def live() -> Iterator[Creator]:
    """A process that is alive for the whole test."""
    process = subprocess.Popen(["sleep", "300"])
    try:
        yield creator_of(process)
    finally:
        process.kill()
        process.wait(timeout=10)


@pytest.fixture
def dead() -> Creator:
    """A process that ran, and ended (reaped)."""
    process = subprocess.Popen(["sleep", "300"])
    creator = creator_of(process)
    process.kill()
    process.wait(timeout=10)
    return creator


def test_a_process_is_gone_when_it_ended_or_its_pid_is_another_process_s(
    live: Creator, dead: Creator
) -> None:
    assert not is_gone(live)
    assert is_gone(dead)
    assert is_gone(live.model_copy(update={"started": "1.00"}))  # pid reused since
    assert not is_gone(dead.model_copy(update={"host": "another-host"}))  # never judged
    assert not is_gone(this_process())


def test_labels_name_the_creator_and_the_jobs_folder_and_read_back() -> None:
    spec = SandboxSpec(image="i", trial_id="t", job_id="j", owner="o", jobs_dir="/data/jobs")

    labels = spec.labels

    assert labels[LABEL_JOBS_DIR] == "/data/jobs"
    assert Creator.from_labels(labels) == this_process()
    assert labels[LABEL_PID] == str(this_process().pid)
    assert Creator.from_labels({LABEL_HOST: "h", LABEL_PID: "x1", LABEL_PID_STARTED: "1"}) is None
    assert Creator.from_labels({LABEL_HOST: "h", LABEL_PID: "12"}) is None


async def test_only_the_sandboxes_a_dead_process_left_on_this_folder_are_removed(
    tmp_path: Path, live: Creator, dead: Creator, caplog: pytest.LogCaptureFixture
) -> None:
    backend = FakeBackend()
    built = await backend.ensure_image(load_task(write_task(tmp_path, "t")))
    here, elsewhere = tmp_path / "jobs", tmp_path / "other-jobs"
    here.mkdir()
    cases = {
        "dead-here": (dead, here),
        "reused-pid-here": (live.model_copy(update={"started": "1.00"}), here),
        "live-here": (live, here),
        "mine-here": (this_process(), here),
        "dead-elsewhere": (dead, elsewhere),
        "dead-other-host": (dead.model_copy(update={"host": "another-host"}), here),
    }
    for trial, (creator, folder) in cases.items():
        spec = SandboxSpec(
            image=built.tag, trial_id=trial, job_id="j", owner="o", jobs_dir=str(folder),
            creator=creator,
        )  # fmt: skip
        await backend.create_sandbox(spec)

    with caplog.at_level(logging.WARNING, logger="orchestrator.sandbox.reclaim"):
        removed = await reclaim_dead(backend, here)

    assert removed == 2
    left = {item.trial for item in await backend.find_leftovers()}
    assert left == {"live-here", "mine-here", "dead-elsewhere", "dead-other-host"}
    [line] = [r.getMessage() for r in caplog.records]
    assert "removed 2 sandbox(es) that dead trialbox process(es) left" in line
    assert "trialbox-dead-here." in line and "trialbox-reused-pid-here." in line
    assert await reclaim_dead(backend, here) == 0  # nothing more, and nothing said
    assert len(caplog.records) == 1


async def test_resume_removes_what_a_dead_run_of_another_job_left_on_its_folder(
    tmp_path: Path, live: Creator, dead: Creator
) -> None:
    first = await run_job(make_tasks(tmp_path, "a"), "nop", config=fake_config(tmp_path))
    backend = FakeBackend(QUICK)
    built = await backend.ensure_image(load_task(write_task(tmp_path, "t")))
    jobs_dir = str(Path(first.job_dir).parent)
    for trial, creator in (("dead-run", dead), ("live-run", live)):
        spec = SandboxSpec(
            image=built.tag, trial_id=trial, job_id="another-job", owner="o", jobs_dir=jobs_dir,
            creator=creator,
        )  # fmt: skip
        await backend.create_sandbox(spec)

    await resume_job(first.job_dir, backend=backend)

    assert [item.trial for item in await backend.find_leftovers()] == ["live-run"]
