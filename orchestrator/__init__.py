"""trialbox's host side: run agent trials in sandboxes and score them.

result = await run_trial("examples/hello-oracle", "oracle")
job = await run_job(["examples/hello-oracle"], "oracle", attempts=3)
async with TrialEngine(n_concurrent=8) as engine: await engine.submit(RolloutRequest(...))

Everything README.md and docs/python.md teach is importable from here; the subpackages are the
layout (`docs/architecture.md`), not the interface.

Each public name is imported from its module the first time it is used (PEP 562 `__getattr__`
over the `_LAZY` table of name → module, `common/lazy.py`), so `import orchestrator` loads no
Docker SDK, aiohttp, httpx, FastAPI or Ray until a name that needs them is touched. The names:
`run_trial`, `run_job` and their `*_sync` forms, `TrialEngine`, `abort`, `prewarm`, the models
(`TrialConfig`, `ModelConfig`, `ModelOverride`, `Sampling`, `ModelLimits`, `Usage`, ...), the
errors and the engine's refusals (`RolloutFinished`, `RolloutTombstoned`, `TooManyLongPolls`,
...), sessions (`Session`, `SessionExecResult`, their errors) and the HTTP client of sessions
(`TrialboxClient`, `RemoteSession` and their sync forms, `orchestrator/client.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.common.lazy import lazy_exports

if TYPE_CHECKING:  # the same names, eagerly, for type checkers and IDEs
    from orchestrator.bundles import build_bundle, inspect_bundle
    from orchestrator.client import (
        RemoteSession,
        SessionDocument,
        SyncRemoteSession,
        SyncTrialboxClient,
        TrialboxClient,
        TrialboxHTTPError,
    )
    from orchestrator.common.errors import (
        ImageBuildError,
        RewardFileError,
        SandboxError,
        SessionBudgetError,
        SessionClosedError,
        SessionPathError,
        TaskError,
        TrialboxError,
    )
    from orchestrator.common.limits import Limits
    from orchestrator.executors.local import run_trial
    from orchestrator.gateway.record import TokenDrift, Usage
    from orchestrator.gateway.settings import ModelConfig, ModelLimits, ModelOverride, Sampling
    from orchestrator.jobs.record import JobRecord
    from orchestrator.sandbox import Backend, Capabilities, ExecResult, Sandbox, SandboxSpec
    from orchestrator.sandbox.backend_config import (
        BackendConfig,
        DockerBackendConfig,
        FakeBackendConfig,
    )
    from orchestrator.service.abort import abort
    from orchestrator.service.engine import TrialEngine
    from orchestrator.service.job import resume_job, run_job
    from orchestrator.service.prewarm import PrewarmError, PrewarmRow, prewarm
    from orchestrator.service.retries import Backoff
    from orchestrator.service.rollouts import (
        DuplicateRollout,
        DuplicateSession,
        EngineClosed,
        NoFreeSlot,
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
    from orchestrator.trials.host_agent import HostAgent, HostCommandResult, HostModel, HostRun
    from orchestrator.trials.result import AgentOutcome, JobResult, Timings, TrialError, TrialResult
    from orchestrator.trials.session import Session, SessionExecResult


# Where each public name lives, imported on first use (PEP 562): `import orchestrator` loads no
# engine SDK, HTTP stack or web framework, so `trialbox --help` does not pay for them.
_LAZY: dict[str, str] = {
    "AgentOutcome": "orchestrator.trials.result",
    "Backend": "orchestrator.sandbox",
    "BackendConfig": "orchestrator.sandbox.backend_config",
    "Backoff": "orchestrator.service.retries",
    "BundleAgent": "orchestrator.trials.bundle_agent",
    "Capabilities": "orchestrator.sandbox",
    "DockerBackendConfig": "orchestrator.sandbox.backend_config",
    "DuplicateRollout": "orchestrator.service.rollouts",
    "DuplicateSession": "orchestrator.service.rollouts",
    "EngineClosed": "orchestrator.service.rollouts",
    "ExecResult": "orchestrator.sandbox",
    "FakeBackendConfig": "orchestrator.sandbox.backend_config",
    "ImageBuildError": "orchestrator.common.errors",
    "JobRecord": "orchestrator.jobs.record",
    "JobResult": "orchestrator.trials.result",
    "Limits": "orchestrator.common.limits",
    "ModelConfig": "orchestrator.gateway.settings",
    "ModelLimits": "orchestrator.gateway.settings",
    "ModelOverride": "orchestrator.gateway.settings",
    "NoFreeSlot": "orchestrator.service.rollouts",
    "PrewarmError": "orchestrator.service.prewarm",
    "PrewarmRow": "orchestrator.service.prewarm",
    "QueueFull": "orchestrator.service.rollouts",
    "RemoteSession": "orchestrator.client",
    "RewardFileError": "orchestrator.common.errors",
    "RolloutFinished": "orchestrator.service.rollouts",
    "RolloutRequest": "orchestrator.service.rollouts",
    "RolloutStatus": "orchestrator.service.rollouts",
    "RolloutTombstoned": "orchestrator.service.rollouts",
    "Sampling": "orchestrator.gateway.settings",
    "Sandbox": "orchestrator.sandbox",
    "SandboxError": "orchestrator.common.errors",
    "SandboxSpec": "orchestrator.sandbox",
    "Session": "orchestrator.trials.session",
    "SessionBudgetError": "orchestrator.common.errors",
    "SessionClosedError": "orchestrator.common.errors",
    "SessionDocument": "orchestrator.client",
    "SessionExecResult": "orchestrator.trials.session",
    "HostAgent": "orchestrator.trials.host_agent",
    "HostCommandResult": "orchestrator.trials.host_agent",
    "HostModel": "orchestrator.trials.host_agent",
    "HostRun": "orchestrator.trials.host_agent",
    "SessionPathError": "orchestrator.common.errors",
    "SyncRemoteSession": "orchestrator.client",
    "SyncTrialboxClient": "orchestrator.client",
    "Task": "orchestrator.tasks.task",
    "TaskError": "orchestrator.common.errors",
    "Timings": "orchestrator.trials.result",
    "TokenDrift": "orchestrator.gateway.record",
    "TooManyLongPolls": "orchestrator.service.rollouts",
    "TrialConfig": "orchestrator.trials.config",
    "TrialEngine": "orchestrator.service.engine",
    "TrialError": "orchestrator.trials.result",
    "TrialResult": "orchestrator.trials.result",
    "TrialboxClient": "orchestrator.client",
    "TrialboxError": "orchestrator.common.errors",
    "TrialboxHTTPError": "orchestrator.client",
    "Usage": "orchestrator.gateway.record",
    "abort": "orchestrator.service.abort",
    "build_bundle": "orchestrator.bundles",
    "inspect_bundle": "orchestrator.bundles",
    "load_task": "orchestrator.tasks.task",
    "prewarm": "orchestrator.service.prewarm",
    "resume_job": "orchestrator.service.job",
    "run_job": "orchestrator.service.job",
    "run_trial": "orchestrator.executors.local",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


def run_trial_sync(*args: Any, **kwargs: Any) -> TrialResult:
    """`run_trial` for scripts without an event loop."""
    import asyncio

    from orchestrator.executors.local import run_trial

    return asyncio.run(run_trial(*args, **kwargs))


def run_job_sync(*args: Any, **kwargs: Any) -> JobResult:
    """`run_job` for scripts without an event loop."""
    import asyncio

    from orchestrator.service.job import run_job

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
    "DuplicateSession",
    "EngineClosed",
    "ExecResult",
    "FakeBackendConfig",
    "HostAgent",
    "HostCommandResult",
    "HostModel",
    "HostRun",
    "ImageBuildError",
    "JobRecord",
    "JobResult",
    "Limits",
    "ModelConfig",
    "ModelLimits",
    "ModelOverride",
    "NoFreeSlot",
    "PrewarmError",
    "PrewarmRow",
    "QueueFull",
    "RemoteSession",
    "RewardFileError",
    "RolloutFinished",
    "RolloutRequest",
    "RolloutStatus",
    "RolloutTombstoned",
    "Sampling",
    "Sandbox",
    "SandboxError",
    "SandboxSpec",
    "Session",
    "SessionBudgetError",
    "SessionClosedError",
    "SessionDocument",
    "SessionExecResult",
    "SessionPathError",
    "SyncRemoteSession",
    "SyncTrialboxClient",
    "Task",
    "TaskError",
    "Timings",
    "TokenDrift",
    "TooManyLongPolls",
    "TrialConfig",
    "TrialEngine",
    "TrialError",
    "TrialResult",
    "TrialboxClient",
    "TrialboxError",
    "TrialboxHTTPError",
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
