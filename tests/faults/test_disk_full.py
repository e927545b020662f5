"""A full host disk during collection (issue 18 item 5), on the real engine and a small
filesystem each test mounts itself: the trial is `infra` and says where and what to do, its
result.json is written, no temporary is left, its container goes at once (an engine stream
left open kept it busy for minutes), and the job, or the server's engine, goes on."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from orchestrator import TrialConfig, TrialResult
from orchestrator.service.engine import TrialEngine
from orchestrator.service.job import run_job
from orchestrator.service.rollouts import RolloutRequest
from tests.conftest import ContainerWatch, MakeTask
from tests.faults.helpers import MAPPING, trialbox

pytestmark = pytest.mark.docker

TASK_TOML = "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n"
# 40 MB in one file, more than the 16 MB filesystem holds: the extraction fails part-way.
FILLS_BY_SIZE = "#!/bin/sh\nhead -c 40000000 /dev/zero > /logs/agent/big.bin\n"
# 1000 empty files, more than a filesystem of 400 inodes holds: the extraction fails, and
# nothing is left for result.json until the trial makes room.
FILLS_BY_COUNT = "#!/bin/sh\ni=0\nwhile [ $i -lt 1000 ]; do : > /logs/agent/f$i; i=$((i+1)); done\n"
SMALL = "#!/bin/sh\necho done > /logs/agent/note.txt\n"


def _mount_small(where: Path, options: str) -> Iterator[Path]:
    where.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MB filesystem of the test's own, unmounted at its end."""
    yield from _mount_small(tmp_path / "small", "size=16m")


@pytest.fixture
def few_inodes(tmp_path: Path) -> Iterator[Path]:
    """A filesystem of 400 inodes, unmounted at the test's end."""
    yield from _mount_small(tmp_path / "few", "size=16m,nr_inodes=400")


def _leftovers(jobs_dir: Path) -> list[str]:
    """Temporaries a failed write could leave (of result.json, job.json): none may stay."""
    found = [*jobs_dir.glob("*/*/.result.json.*"), *jobs_dir.glob("*/.*.tmp")]
    return [str(p) for p in found]


def _containers_of(client: docker.DockerClient, job_id: str) -> list[str]:
    found = client.containers.list(all=True, filters={"label": f"trialbox.job={job_id}"})
    return [c.name for c in found]


def _on_disk(result: TrialResult) -> dict:
    return json.loads((Path(result.trial_dir) / "result.json").read_text())


def _says_disk_full(message: str, jobs_dir: Path) -> None:
    assert "No space left on device" in message, message
    assert f"the disk of {jobs_dir}" in message and "is full" in message, message
    assert "--jobs-dir" in message and "run it again" in message, message


async def test_a_full_jobs_disk_during_collection_is_infra_and_the_job_goes_on(
    config: TrialConfig,
    make_task: MakeTask,
    small_disk: Path,
    container_watch: ContainerWatch,
    docker_client: docker.DockerClient,
) -> None:
    fill = make_task("fill", task_toml=TASK_TOML, solve_sh=FILLS_BY_SIZE)
    small = make_task("small", task_toml=TASK_TOML, solve_sh=SMALL)
    on_small = config.model_copy(update={"jobs_dir": small_disk})
    job_id = container_watch.job_id

    job = await run_job([fill, small], "oracle", n_concurrent=1, config=on_small, job_id=job_id)

    # The containers existed, and none is left the moment the job returns: the teardown
    # was not held up by an open engine stream (it waited out teardown_sec and leaked).
    assert len(container_watch.created()) == 2
    assert _containers_of(docker_client, job_id) == []
    by_task = {t.task_name: t for t in job.trials}
    full = by_task["fill"]
    assert full.error is not None, full
    assert (full.status, full.error.category, full.error.phase, full.error.type) == (
        "failure", "infra", "collect", "HostStorageError",
    )  # fmt: skip
    _says_disk_full(full.error.message, Path(full.trial_dir))
    assert not any("teardown" in w for w in full.warnings), full.warnings
    assert _on_disk(full)["error"]["type"] == "HostStorageError"
    assert not (Path(full.trial_dir) / "logs/agent/big.bin").exists()  # the cut file is freed
    # The job went on: the other trial is scored, and the job's files are whole.
    assert (by_task["small"].status, by_task["small"].reward) == ("success", 1.0)
    assert _on_disk(by_task["small"])["status"] == "success"
    written = json.loads((small_disk / job_id / "job.json").read_text())
    assert (written["n_trials"], written["write_errors"]) == (2, [])
    assert _leftovers(small_disk) == []


def test_trialbox_run_exits_3_when_result_json_cannot_be_written_and_goes_on(
    docker_ready: docker.DockerClient, make_task: MakeTask, few_inodes: Path
) -> None:
    """No inode left for result.json: the trial is infra, its collected logs are removed to
    make room and the result written; the job's next trial runs; the exit code is 3."""
    make_task("fill", task_toml=TASK_TOML, solve_sh=FILLS_BY_COUNT)
    tasks = make_task("small", task_toml=TASK_TOML, solve_sh=SMALL).parent
    done = trialbox(
        "run", str(tasks), "--agent", "oracle", "-n", "1", "--json", "--jobs-dir",
        str(few_inodes), *MAPPING, timeout=600,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr[-3000:]
    job = json.loads(done.stdout)
    by_task = {t["task_name"]: t for t in job["trials"]}
    full = by_task["fill"]
    assert (full["error"]["category"], full["error"]["type"]) == ("infra", "HostStorageError")
    assert full["error"]["message"].startswith(f"{full['trial_dir']}/result.json could not be")
    _says_disk_full(full["error"]["message"], Path(full["trial_dir"]))
    assert f"{full['trial_dir']}/logs: removed to make room for result.json" in full["warnings"]
    assert any(w.startswith("before: infra: the collect step") for w in full["warnings"])
    assert json.loads((Path(full["trial_dir"]) / "result.json").read_text()) == full
    assert (by_task["small"]["status"], by_task["small"]["reward"]) == ("success", 1.0)
    assert _leftovers(few_inodes) == []
    assert (
        docker_ready.containers.list(all=True, filters={"label": f"trialbox.job={job['job_id']}"})
        == []
    )


async def test_under_the_engine_a_full_disk_removes_the_container_at_once(
    config: TrialConfig,
    make_task: MakeTask,
    small_disk: Path,
    container_watch: ContainerWatch,
    docker_client: docker.DockerClient,
) -> None:
    """What `serve` runs on: the rollout settles infra and its container is gone while the
    engine still serves (it leaked until the server exited)."""
    fill = make_task("fill", task_toml=TASK_TOML, solve_sh=FILLS_BY_SIZE)
    on_small = config.model_copy(update={"jobs_dir": small_disk})
    job_id = container_watch.job_id
    async with TrialEngine(config=on_small, job_id=job_id) as engine:
        await engine.submit(RolloutRequest(rollout_id="full-1", task=str(fill), agent="oracle"))
        result = await engine.wait("full-1")
        assert len(container_watch.created()) == 1
        assert _containers_of(docker_client, job_id) == []
        assert engine.status("full-1").status == "failure"
        assert not engine.closed
    assert result.error is not None, result
    assert (result.error.category, result.error.type) == ("infra", "HostStorageError")
    _says_disk_full(result.error.message, Path(result.trial_dir))
    assert _on_disk(result)["error"]["category"] == "infra"
    assert _leftovers(small_disk) == []
