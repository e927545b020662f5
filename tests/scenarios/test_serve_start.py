"""`trialbox serve` checks its dataset at start as `run` does (issue 19, item 3): a folder that
is not there, tasks that cannot be used, or a base-image mapping that cannot work are refused
with exit 1 and `run`'s words before the port is taken; a good dataset serves, and
`--prewarm` says what it did for each task."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.service.prewarm import PrewarmRow
from tests.conftest import BASE_IMAGE, OFFICIAL_IMAGE, REPO_ROOT, write_task
from tests.scenarios.helpers import DATASET_REWARDS, MAPPING, free_port, serve, write_dataset


def serve_refused(*args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """`trialbox serve ARGS` on a free 127.0.0.1 port, expected to exit by itself."""
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "serve", *args,
         "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "250"},
    )  # fmt: skip
    return done, port


def nothing_listens(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_serve_refuses_a_tasks_dir_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dataset"

    done, port = serve_refused("--tasks-dir", str(missing))

    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{missing}: no such folder" in done.stdout
    assert nothing_listens(port)


def test_serve_refuses_a_tasks_dir_whose_tasks_are_broken_listing_each(tmp_path: Path) -> None:
    dataset = tmp_path / "dataset"
    write_task(dataset, "late", task_toml='[agent]\ntimeout_sec = "soon"\n')
    write_task(dataset, "blind", files={"task.toml": "[verifier\n"})

    done, port = serve_refused("--tasks-dir", str(dataset))

    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 of 2 task folders cannot be used" in done.stdout
    assert "agent.timeout_sec" in done.stdout
    assert f"{dataset / 'blind' / 'task.toml'}: not valid TOML" in done.stdout
    assert f"move them out of {dataset}" in done.stdout
    assert nothing_listens(port)


def test_serve_refuses_one_broken_task_among_good_ones_as_run_does(tmp_path: Path) -> None:
    dataset = write_dataset(tmp_path / "dataset")
    write_task(dataset, "late", task_toml='[agent]\ntimeout_sec = "soon"\n')

    done, port = serve_refused("--tasks-dir", str(dataset))

    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{dataset / 'late' / 'task.toml'}: field agent.timeout_sec" in done.stdout
    assert nothing_listens(port)


def test_serve_refuses_a_template_task_that_cannot_be_used(tmp_path: Path) -> None:
    task = write_task(tmp_path, "no-tests", files={"tests/other.sh": "#!/bin/sh\n"})
    (task / "tests" / "test.sh").unlink()

    done, port = serve_refused("--task", str(task))

    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{task / 'tests' / 'test.sh'}: missing" in done.stdout
    assert nothing_listens(port)


@pytest.mark.docker
def test_serve_refuses_a_base_image_mapping_that_cannot_work(
    docker_ready: object, tmp_path: Path
) -> None:
    dataset = write_dataset(tmp_path / "dataset")
    typo = f"{OFFICIAL_IMAGE}={BASE_IMAGE}x"

    done, port = serve_refused("--tasks-dir", str(dataset), "--base-image", typo)

    assert done.returncode == 1, done.stdout + done.stderr
    assert typo in done.stdout and f"did you mean {BASE_IMAGE}?" in done.stdout
    assert nothing_listens(port)


@pytest.mark.docker
def test_serve_starts_on_a_good_dataset_and_prewarm_reports_each_task(
    docker_ready: object, tmp_path: Path
) -> None:
    dataset = write_dataset(tmp_path / "dataset")
    args = ["--tasks-dir", str(dataset), "--prewarm", "--jobs-dir", str(tmp_path / "jobs")]

    with serve(*args, *MAPPING, log_dir=tmp_path) as server:
        assert server.http.get("/healthz").status_code == 200
        assert server.stop(signal.SIGINT) == 0, server.output()
        log = server.output()

    for name in DATASET_REWARDS:  # one image for the three, and a line for each task
        assert any(
            f"prewarm: {name}: {status} (trialbox-env:" in log for status in ("built", "cached")
        ), log


def test_a_failed_prewarm_row_gives_each_task_its_reason() -> None:
    row = PrewarmRow(
        tag=None, tasks=["a", "b"], status="failed", seconds=0.0,
        error="a step of environment/Dockerfile failed\n--- last lines ---\nexit 5",
    )  # fmt: skip

    assert row.task_lines() == [
        "a: failed: a step of environment/Dockerfile failed",
        "b: failed: a step of environment/Dockerfile failed",
    ]
