"""Jobs for the report tests: made by real `run_job` calls on the fake backend (or by the
engine, as `trialbox serve` makes them), plus what a test writes into a trial's folder."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from container_runtime import atif
from orchestrator import Limits, TrialConfig
from orchestrator.jobs.store import lock_job_dir
from orchestrator.service.job import JobRecord, run_job
from tests.conftest import write_task

QUICK = Limits(stop_term_grace_sec=0.5, stop_kill_grace_sec=0.5)
NO_REWARD = "#!/bin/sh\necho checked, but wrote no reward\n"
SOLVE = "#!/bin/sh\necho solving\n"
PAYLOAD = (
    "<script>document.body.setAttribute('data-pwned','script')</script>"
    "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">"
)


def fake_config(tmp_path: Path, **changes: Any) -> TrialConfig:
    fields: dict[str, Any] = {"jobs_dir": tmp_path / "jobs", "backend": {"type": "fake"}}
    return TrialConfig(**(fields | {"limits": QUICK} | changes))


async def fake_job(
    tmp_path: Path, *, passing: int = 1, failing: int = 1, attempts: int = 1, **kwargs: Any
) -> JobRecord:
    """A finished job of the fake backend: `passing` tasks the oracle solves (reward 1) and
    `failing` tasks whose verifier writes no reward (failure, category validation)."""
    tasks = [write_task(tmp_path / "tasks", f"pass-{i}", solve_sh=SOLVE) for i in range(passing)]
    tasks += [
        write_task(tmp_path / "tasks", f"fail-{i}", solve_sh=SOLVE, test_sh=NO_REWARD)
        for i in range(failing)
    ]
    config = kwargs.pop("config", None) or fake_config(tmp_path)
    return await run_job(tasks, "oracle", attempts=attempts, config=config, **kwargs)


def trajectory_doc(session: str) -> dict[str, Any]:
    """A valid ATIF trajectory: a system and a user message, an agent step with a tool call
    (token ids and logprobs in its metrics) and its observation, and a final answer."""
    doc = {
        "schema_version": atif.SCHEMA_VERSION,
        "session_id": session,
        "agent": {"name": "shell", "version": "1.0", "model_name": "policy-7b"},
        "steps": [
            {"step_id": 1, "source": "system", "message": "You are a careful agent."},
            {"step_id": 2, "source": "user", "message": "Write hello.txt <b>now</b>."},
            {
                "step_id": 3,
                "source": "agent",
                "message": "",
                "tool_calls": [
                    {
                        "tool_call_id": "call_1",
                        "function_name": "bash",
                        "arguments": {"command": "printf 'Hello' > /app/hello.txt"},
                    }
                ],
                "observation": {
                    "results": [{"source_call_id": "call_1", "content": "exit code 0 " + PAYLOAD}]
                },
                "metrics": {
                    "prompt_tokens": 21,
                    "completion_tokens": 5,
                    "prompt_token_ids": [101, 102, 103],
                    "completion_token_ids": [7, 8, 9, 10, 11],
                    "logprobs": [-0.5, -0.25, -0.125, -1.0, -2.0],
                },
            },
            {
                "step_id": 4,
                "source": "agent",
                "message": "Done: hello.txt is written.",
                "metrics": {
                    "prompt_tokens": 30,
                    "completion_tokens": 6,
                    "completion_token_ids": [12, 13],
                    "logprobs": [-0.75, -0.0625],
                },
            },
        ],
        "final_metrics": {"total_prompt_tokens": 51, "total_completion_tokens": 11},
    }
    atif.validate_trajectory(doc)  # the test's input is what the format allows
    return doc


def write_trajectory(trial_dir: str | Path) -> dict[str, Any]:
    doc = trajectory_doc(Path(trial_dir).name)
    path = Path(trial_dir) / "logs" / "agent" / "trajectory.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return doc


def trial_of(job: JobRecord, prefix: str) -> Any:
    """The one trial of `job` whose task name starts with `prefix`."""
    found = [t for t in job.trials if t.task_name.startswith(prefix)]
    assert len(found) == 1, [t.trial_id for t in job.trials]
    return found[0]


@contextmanager
def run_holding(job_dir: str | Path) -> Iterator[None]:
    """The job folder's lock held, as a `trialbox run` of the job holds it while it runs."""
    fd = lock_job_dir(Path(job_dir))
    try:
        yield
    finally:
        os.close(fd)
