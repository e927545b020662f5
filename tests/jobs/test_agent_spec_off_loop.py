"""An agent given by its spec is parsed off the event loop: `bundle:<project>` builds a wheel,
which would freeze every trial of the loop while `uv build` runs (issue 20 item 7)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from orchestrator import run_trial
from orchestrator.executors import local as local_module
from orchestrator.service import job as job_module
from orchestrator.service.job import resume_job, run_job
from orchestrator.trials import agents
from orchestrator.trials.agents import Agent
from tests.jobs.helpers import fake_config, make_tasks


@pytest.fixture
def parsed_on(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread each spec was parsed on, through the names the callers use."""
    threads: list[int] = []

    def recording(spec: str) -> Agent:
        threads.append(threading.get_ident())
        return agents.parse_agent(spec)

    monkeypatch.setattr(job_module, "parse_agent", recording)
    monkeypatch.setattr(local_module, "parse_agent", recording)
    return threads


async def test_run_trial_parses_the_agent_spec_off_the_loop(
    tmp_path: Path, parsed_on: list[int]
) -> None:
    [task] = make_tasks(tmp_path, "a")
    result = await run_trial(task, "nop", config=fake_config(tmp_path))
    assert result.status == "success"
    assert parsed_on and threading.get_ident() not in parsed_on


async def test_run_job_and_resume_job_parse_the_agent_spec_off_the_loop(
    tmp_path: Path, parsed_on: list[int]
) -> None:
    tasks = make_tasks(tmp_path, "a")
    job = await run_job(tasks, "nop", config=fake_config(tmp_path))
    await resume_job(job.job_dir)
    assert len(parsed_on) == 2  # the job's spec, and the resumed job's saved one
    assert threading.get_ident() not in parsed_on
