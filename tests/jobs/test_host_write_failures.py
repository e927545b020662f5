"""Files the host cannot write (issue 18 item 5), on the fake backend: a job.json or a
result.json the disk refuses is reported, the trial it hit is infra, the job goes on, and
`trialbox run` exits 3. The real full disk is tests/faults/test_disk_full.py's."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.common.scrub import Scrubber
from orchestrator.jobs import store as job_store
from orchestrator.service.job import run_job
from orchestrator.trials import result_file
from orchestrator.trials.result import TrialResult
from tests.jobs.helpers import fake_config, make_tasks


def _full_disk() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def job_json_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write of a job.json fails as on a full disk; other files are written."""
    real = job_store.write_atomic

    async def refusing(path: Path, text: str) -> None:
        if path.name == job_store.JOB_FILE:
            raise _full_disk()
        await real(path, text)

    monkeypatch.setattr(job_store, "write_atomic", refusing)


@pytest.fixture
def result_json_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write of a result.json fails as on a full disk, even after making room."""

    async def refusing(result: TrialResult, scrubber: Scrubber, trial_dir: Path) -> None:
        raise _full_disk()

    monkeypatch.setattr(result_file, "write_whole", refusing)


@pytest.mark.usefixtures("job_json_refused")
async def test_a_job_json_the_disk_refuses_is_reported_and_the_job_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = make_tasks(tmp_path, "a", "b", "c")
    job = await run_job(tasks, "nop", n_concurrent=1, config=fake_config(tmp_path))

    # Every trial ran and kept its own result.json (what --resume reads), scored.
    assert [t.status for t in job.trials] == ["success"] * 3
    for trial in job.trials:
        assert json.loads((Path(trial.trial_dir) / "result.json").read_text())["reward"] == 1
    job_dir = Path(job.job_dir)
    assert job.write_errors, job
    first = job.write_errors[0]
    assert first.startswith(f"{job_dir / 'job.json'} could not be written: No space left")
    assert f"the disk of {job_dir} is full" in first and "the job goes on" in first
    assert first in caplog.text  # reported as it happened
    assert not (job_dir / "job.json").exists() and not list(job_dir.glob(".job.json.*"))


@pytest.mark.usefixtures("result_json_refused")
async def test_a_result_json_the_disk_refuses_makes_the_trial_infra_and_reaches_the_caller(
    tmp_path: Path,
) -> None:
    tasks = make_tasks(tmp_path, "a", "b")
    job = await run_job(tasks, "nop", n_concurrent=1, config=fake_config(tmp_path))

    assert len(job.trials) == 2  # the second trial ran after the first one's failure
    for trial in job.trials:
        assert trial.error is not None
        assert (trial.status, trial.error.category, trial.error.type) == (
            "failure", "infra", "HostStorageError",
        )  # fmt: skip
        assert (trial.reward, trial.rewards) == (None, {})
        where = Path(trial.trial_dir)
        message = trial.error.message
        assert message.startswith(f"{where / 'result.json'} could not be written"), message
        assert "written again, it failed too" in message and "job.json" in message
        assert "the reward the verifier wrote, not kept: {'reward': 1.0}" in trial.warnings
        assert f"{where / 'logs'}: removed to make room for result.json" in trial.warnings
        assert not (where / "result.json").exists() and not (where / "logs").exists()
    # The caller has them: job.json holds both results as the job returned them.
    written = json.loads((Path(job.job_dir) / "job.json").read_text())
    assert [t["error"]["type"] for t in written["trials"]] == ["HostStorageError"] * 2


def _run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    make_tasks(tmp_path, "a", "b")
    jobs = str(tmp_path / "jobs")
    code = main(["run", str(tmp_path / "tasks"), "--backend", "fake", "--agent", "nop",
                 "--jobs-dir", jobs, "-n", "1", "--json"])  # fmt: skip
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.usefixtures("job_json_refused")
def test_trialbox_run_exits_3_when_job_json_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, job = _run_cli(tmp_path, capsys)
    assert [t["status"] for t in job["trials"]] == ["success", "success"]
    assert job["write_errors"]
    assert code == 3


@pytest.mark.usefixtures("result_json_refused")
def test_trialbox_run_exits_3_when_no_result_json_can_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, job = _run_cli(tmp_path, capsys)
    assert [t["error"]["type"] for t in job["trials"]] == ["HostStorageError"] * 2
    assert code == 3


def test_a_jobs_folder_on_a_full_disk_stops_the_job_before_it_starts_with_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = job_store.write_atomic

    async def refusing(path: Path, text: str) -> None:
        if path.name == job_store.CONFIG_FILE:
            raise _full_disk()
        await real(path, text)

    monkeypatch.setattr(job_store, "write_atomic", refusing)
    monkeypatch.setattr("orchestrator.service.job.write_atomic", refusing)
    make_tasks(tmp_path, "a")
    code = main(["run", str(tmp_path / "tasks"), "--backend", "fake", "--agent", "nop",
                 "--jobs-dir", str(tmp_path / "jobs")])  # fmt: skip
    err = capsys.readouterr()
    assert code == 3
    assert "config.json could not be written" in err.err + err.out
    assert "the job did not start" in err.err + err.out
