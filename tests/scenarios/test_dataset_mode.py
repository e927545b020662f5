"""Dataset mode: a folder of tasks, one of which is named by its id, on the CLI and over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scenarios.helpers import DATASET_REWARDS, MAPPING, serve, trialbox, write_dataset

pytestmark = pytest.mark.docker


def test_run_with_task_id_runs_exactly_that_task_of_the_folder(
    docker_ready: object, tmp_path: Path
) -> None:
    dataset = write_dataset(tmp_path / "dataset")
    jobs = tmp_path / "jobs"

    done = trialbox(
        "run", str(dataset), "--task-id", "beta", "--agent", "nop", "--jobs-dir", str(jobs),
        "--json", *MAPPING,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    job = json.loads(done.stdout)
    assert job["n_trials"] == 1
    [trial] = job["trials"]
    assert (trial["task_name"], trial["status"]) == ("beta", "success")
    assert trial["reward"] == DATASET_REWARDS["beta"]
    trial_dirs = [p for p in (jobs / job["job_id"]).iterdir() if p.is_dir()]
    assert [p.name for p in trial_dirs] == [trial["trial_id"]]
    on_disk = json.loads((trial_dirs[0] / "result.json").read_text())
    assert (on_disk["task_name"], on_disk["reward"]) == ("beta", DATASET_REWARDS["beta"])


def test_server_in_dataset_mode_runs_and_scores_the_task_each_request_names(
    docker_ready: object, tmp_path: Path
) -> None:
    dataset = write_dataset(tmp_path / "dataset")
    args = ["--tasks-dir", str(dataset), "--agent", "nop", "--jobs-dir", str(tmp_path / "jobs")]

    with serve(*args, *MAPPING, log_dir=tmp_path) as server:
        server.submit("ds::gamma", task_id="gamma")
        server.submit("ds::alpha", task_id="alpha")
        gamma = server.until_final("ds::gamma")
        alpha = server.until_final("ds::alpha")

    for doc, name in ((gamma, "gamma"), (alpha, "alpha")):
        assert doc["status"] == "success", doc
        assert doc["reward"] == DATASET_REWARDS[name]
        assert json.loads(Path(doc["trial_dir"], "result.json").read_text())["task_name"] == name
