"""The job folder as a crash finds it: config.json from the start, a current job.json after
every trial, secrets nowhere, and readable default job ids."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator import JobResult, ModelConfig, TrialResult
from orchestrator.common.ids import TRIAL_ID_PATTERN
from orchestrator.jobs.ids import default_job_id
from orchestrator.service.job import JobRecord, run_job
from tests.jobs.helpers import fake_config, make_tasks

SECRET = "sk-job-secret-4242"
MODEL_KEY = "sk-model-key-9999"


async def test_job_json_is_rewritten_after_every_trial(tmp_path: Path) -> None:
    tasks = make_tasks(tmp_path, "a", "b", "c")
    config = fake_config(tmp_path)
    seen: list[tuple[str, int, list[str]]] = []
    at_start: list[JobRecord] = []

    def done(result: TrialResult) -> None:
        job_dir = Path(result.trial_dir).parent
        written = JobRecord.model_validate_json((job_dir / "job.json").read_text())
        seen.append((result.trial_id, written.n_trials, [t.trial_id for t in written.trials]))

    def started(record: JobRecord) -> None:
        job_dir = Path(record.job_dir)
        assert json.loads((job_dir / "config.json").read_text())["job_id"] == record.job_id
        at_start.append(JobRecord.model_validate_json((job_dir / "job.json").read_text()))

    job = await run_job(
        tasks, "nop", n_concurrent=1, config=config, on_trial_done=done, on_start=started
    )

    assert [(s.n_trials, s.n_expected) for s in at_start] == [(0, 3)]
    # Each trial is in job.json by the time it is reported, with all those before it (and
    # maybe one that finished meanwhile: saves that pile up are written together).
    assert len(seen) == 3
    for i, (_, n_trials, ids) in enumerate(seen):
        assert {s[0] for s in seen[: i + 1]} <= set(ids)
        assert n_trials == len(ids) >= i + 1
    job_dir = Path(job.job_dir)
    final = (job_dir / "job.json").read_text()
    assert JobRecord.model_validate_json(final) == job
    assert JobResult.model_validate_json(final).n_trials == 3  # today's readers read it
    assert sorted(p.name for p in job_dir.iterdir() if p.name.startswith(".")) == [".lock"]


async def test_config_json_holds_every_setting_and_no_secret(tmp_path: Path) -> None:
    [task] = make_tasks(tmp_path, "a")
    model = ModelConfig(name="m", base_url="http://127.0.0.1:9/v1", api_key=MODEL_KEY)
    config = fake_config(tmp_path, credentials={"MY_API_KEY": SECRET}, model=model)

    job = await run_job(
        [task], "nop", attempts=2, config=config, max_retries=1, metadata={"label": 7},
        options={"note": f"a secret hid here: {SECRET}"},
    )  # fmt: skip

    text = (Path(job.job_dir) / "config.json").read_text()
    assert SECRET not in text and MODEL_KEY not in text
    saved = json.loads(text)
    assert saved["trial_config"]["credentials"] == ["MY_API_KEY"]  # the name only
    assert "api_key" not in saved["trial_config"]["model"]
    assert saved["trial_config"]["model"]["api_key_env"] == "OPENAI_API_KEY"
    assert (saved["attempts"], saved["max_retries"], saved["metadata"]) == (2, 1, {"label": 7})
    assert saved["tasks"] == [str(task.resolve())]
    assert saved["trial_config"]["backend"] == {"type": "fake"}


async def test_a_job_folder_that_exists_is_refused(tmp_path: Path) -> None:
    [task] = make_tasks(tmp_path, "a")
    config = fake_config(tmp_path)
    await run_job([task], "nop", config=config, job_id="mine")
    before = (config.jobs_dir / "mine" / "job.json").read_bytes()

    with pytest.raises(ValueError, match="exists already"):
        await run_job([task], "nop", config=config, job_id="mine")
    assert (config.jobs_dir / "mine" / "job.json").read_bytes() == before


def test_default_job_ids_read_as_the_utc_time_and_never_repeat() -> None:
    now = datetime(2026, 12, 1, 14, 3, 7, tzinfo=UTC)
    ids = {default_job_id(now) for _ in range(200)}

    assert len(ids) == 200  # the same second, still 200 folders
    for job_id in ids:
        assert re.fullmatch(r"2026-12-01__14-03-07__[0-9a-f]{8}", job_id)
        assert re.fullmatch(TRIAL_ID_PATTERN, job_id)


async def test_a_job_holds_its_folder_once_and_warns_of_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The job's store holds the folder's lock; its engine does not try to take it again
    (which failed, and printed a warning on every `trialbox run`)."""
    tasks = make_tasks(tmp_path, "a", "b")
    job = await run_job(tasks, "nop", config=fake_config(tmp_path))
    assert job.n_trials == 2
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []


async def test_each_trial_says_what_it_is_in_its_trial_json(tmp_path: Path) -> None:
    """trial.json: the task, attempt and chain of a trial as fields (never read from its
    id), the label left out; a rerun names the trial it reruns."""
    from orchestrator.service.retries import Backoff
    from orchestrator.trials.spec import read_spec
    from tests.jobs.helpers import FlakyBackend

    tasks = make_tasks(tmp_path, "a")
    backend = FlakyBackend(lambda trial_id: ".retry" not in trial_id)
    job = await run_job(
        tasks, "nop", config=fake_config(tmp_path), backend=backend, attempts=2,
        max_retries=1, retry_backoff=Backoff(0, 0),
        metadata={"label": "the-answer-4f2c", "seed": 1},
    )  # fmt: skip
    record = JobRecord.model_validate_json((Path(job.job_dir) / "job.json").read_text())
    for result in record.trials:
        spec = read_spec(Path(result.trial_dir))
        assert spec is not None
        assert (spec.task_name, spec.attempt, spec.job_id) == ("a", result.attempt, job.job_id)
        assert spec.metadata == {"seed": 1} and spec.has_label
        assert "the-answer-4f2c" not in (Path(result.trial_dir) / "trial.json").read_text()
        first = next(r for r in record.superseded if r.attempt == result.attempt)
        assert spec.retry_of == result.retry_of == first.trial_id
        assert record.superseded_by[first.trial_id] == result.trial_id
        first_spec = read_spec(Path(first.trial_dir))
        assert first_spec is not None and first_spec.retry_of is None
