"""trialbox's host side: run agent trials in sandboxes and score them.

result = await run_trial("examples/hello-oracle", "oracle")
job = await run_job(["examples/hello-oracle"], "oracle", attempts=3)
async with TrialEngine(n_concurrent=8) as engine: await engine.submit(RolloutRequest(...))

Everything README.md and docs/python.md teach is importable from here; the subpackages are the
layout (`docs/architecture.md`), not the interface.
"""

from __future__ import annotations

import asyncio
from typing import Any

from orchestrator.backends import BackendConfig, DockerBackendConfig, FakeBackendConfig
from orchestrator.bundles import build_bundle, inspect_bundle
from orchestrator.common.errors import (
    ImageBuildError,
    RewardFileError,
    SandboxError,
    TaskError,
    TrialboxError,
)
from orchestrator.common.limits import Limits
from orchestrator.gateway.record import Usage
from orchestrator.gateway.settings import ModelConfig, ModelLimits, ModelOverride, Sampling
from orchestrator.sandbox import Backend, Capabilities, ExecResult, Sandbox, SandboxSpec
from orchestrator.service.abort import abort
from orchestrator.service.engine import TrialEngine
from orchestrator.service.job import resume_job, run_job
from orchestrator.service.job_record import JobRecord
from orchestrator.service.prewarm import PrewarmError, PrewarmRow, prewarm
from orchestrator.service.retries import Backoff
from orchestrator.service.rollouts import (
    DuplicateRollout,
    EngineClosed,
    QueueFull,
    RolloutFinished,
    RolloutRequest,
    RolloutStatus,
    RolloutTombstoned,
    TooManyLongPolls,
)
from orchestrator.tasks.task import Task, load_task
from orchestrator.trials.bundle_agent import BundleAgent
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.result import AgentOutcome, JobResult, Timings, TrialError, TrialResult
from orchestrator.trials.trial import run_trial


def run_trial_sync(*args: Any, **kwargs: Any) -> TrialResult:
    """`run_trial` for scripts without an event loop."""
    return asyncio.run(run_trial(*args, **kwargs))


def run_job_sync(*args: Any, **kwargs: Any) -> JobResult:
    """`run_job` for scripts without an event loop."""
    return asyncio.run(run_job(*args, **kwargs))


__all__ = [
    "AgentOutcome",
    "Backend",
    "BackendConfig",
    "Backoff",
    "BundleAgent",
    "Capabilities",
    "DockerBackendConfig",
    "DuplicateRollout",
    "EngineClosed",
    "ExecResult",
    "FakeBackendConfig",
    "ImageBuildError",
    "JobRecord",
    "JobResult",
    "Limits",
    "ModelConfig",
    "ModelLimits",
    "ModelOverride",
    "PrewarmError",
    "PrewarmRow",
    "QueueFull",
    "RewardFileError",
    "RolloutFinished",
    "RolloutRequest",
    "RolloutStatus",
    "RolloutTombstoned",
    "Sampling",
    "Sandbox",
    "SandboxError",
    "SandboxSpec",
    "Task",
    "TaskError",
    "Timings",
    "TooManyLongPolls",
    "TrialConfig",
    "TrialEngine",
    "TrialError",
    "TrialResult",
    "TrialboxError",
    "Usage",
    "abort",
    "build_bundle",
    "inspect_bundle",
    "load_task",
    "prewarm",
    "resume_job",
    "run_job",
    "run_job_sync",
    "run_trial",
    "run_trial_sync",
]
