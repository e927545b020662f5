"""trialbox's host side: run agent trials in Docker sandboxes and score them.

result = await run_trial("examples/hello-oracle", "oracle")
job = await run_job(["examples/hello-oracle"], "oracle", attempts=3)
"""

from __future__ import annotations

import asyncio
from typing import Any

from orchestrator.common.errors import (
    ImageBuildError,
    RewardFileError,
    SandboxError,
    TaskError,
    TrialboxError,
)
from orchestrator.service.job import run_job
from orchestrator.tasks.task import Task, load_task
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.result import JobResult, TrialResult
from orchestrator.trials.trial import run_trial


def run_trial_sync(*args: Any, **kwargs: Any) -> TrialResult:
    """`run_trial` for scripts without an event loop."""
    return asyncio.run(run_trial(*args, **kwargs))


def run_job_sync(*args: Any, **kwargs: Any) -> JobResult:
    """`run_job` for scripts without an event loop."""
    return asyncio.run(run_job(*args, **kwargs))


__all__ = [
    "ImageBuildError",
    "JobResult",
    "RewardFileError",
    "SandboxError",
    "Task",
    "TaskError",
    "TrialConfig",
    "TrialResult",
    "TrialboxError",
    "load_task",
    "run_job",
    "run_job_sync",
    "run_trial",
    "run_trial_sync",
]
