"""Many trials: every task times `attempts`, at most `n_concurrent` at once, then aggregates.

It runs on the same `TrialEngine` as the server, so the CLI and the server behave alike. A
long job survives its process: the job's folder gets its `config.json` before any trial and
a `job.json` after every trial (`jobs.store`), a trial that ends in `infra` is retried
(`retries`), and `resume_job` runs only what a dead job left undone (`jobs.results`).

`run_job` and `resume_job` are the two entry points (docs/jobs.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.common.atomic_write import write_atomic
from orchestrator.common.host_storage import host_storage_error
from orchestrator.common.ids import new_id
from orchestrator.common.offload import run_blocking
from orchestrator.executors.base import Executor, executor_for
from orchestrator.jobs.aggregates import counted, pass_at_k, summarize, task_unusable
from orchestrator.jobs.config import JobConfigFile, public_trial_config
from orchestrator.jobs.ids import fresh_job_id
from orchestrator.jobs.record import Chain, JobRecord, record_of
from orchestrator.jobs.results import chains_of, match_chains, needs_rerun, read_results
from orchestrator.jobs.store import (
    CONFIG_FILE,
    JobStore,
    claim_job_dir,
    lock_job_dir,
)
from orchestrator.sandbox import Backend, Reaper
from orchestrator.sandbox.reclaim import reclaim_dead
from orchestrator.service.base_image_check import check_base_image_map
from orchestrator.service.engine import TrialEngine
from orchestrator.service.retries import Backoff, with_retries
from orchestrator.service.rollouts import RolloutRequest
from orchestrator.tasks.task import Task, load_task
from orchestrator.trials.agents import Agent, parse_agent
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.result import TrialResult

if TYPE_CHECKING:
    from orchestrator.sandbox.backend_config import RayBackendConfig

__all__ = [
    "JobRecord",
    "ProgressCallback",
    "counted",
    "pass_at_k",
    "resume_job",
    "run_job",
    "summarize",
    "task_unusable",
]

log = logging.getLogger(__name__)

ProgressCallback = Callable[[TrialResult], None]


@dataclass
class _Slot:
    """One (task, attempt) pair of the job and the chain of trials run for it."""

    task: Task
    attempt: int
    chain: Chain


@dataclass
class _Hooks:
    on_trial_done: ProgressCallback | None = None
    on_retry: ProgressCallback | None = None
    on_start: Callable[[JobRecord], None] | None = None


class _Stopped(Exception):
    """The job is being cancelled: a trial not yet submitted is not started."""


def _check_counts(n_concurrent: int, attempts: int, max_retries: int) -> None:
    if n_concurrent < 1 or attempts < 1:
        raise ValueError("n_concurrent and attempts must be at least 1")
    if max_retries < 0:
        raise ValueError("max_retries must be 0 or more")


async def run_job(
    tasks: Sequence[Task | str | Path],
    agent: Agent | str = "oracle",
    *,
    n_concurrent: int = 4,
    attempts: int = 1,
    config: TrialConfig | None = None,
    job_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    task_metadata: Mapping[str, Mapping[str, Any]] | None = None,
    max_retries: int = 0,
    retry_backoff: Backoff | None = None,
    backend: Backend | None = None,
    on_trial_done: ProgressCallback | None = None,
    on_retry: ProgressCallback | None = None,
    on_start: Callable[[JobRecord], None] | None = None,
    options: Mapping[str, Any] | None = None,
    executor: Executor | None = None,
) -> JobRecord:
    """Run every task `attempts` times and aggregate, in `<jobs_dir>/<job_id>/`.

    Tasks are loaded (and so checked) before anything starts: a broken task fails the job at
    once instead of after the others have run. The job's folder must not exist yet (the
    default id is a readable UTC timestamp plus a random part). `task_metadata` adds to
    `metadata` per task name (a label per task). A trial that ends in infra is run again up
    to `max_retries` times, waiting `retry_backoff`; `on_retry` gets the result a retry
    replaces, `on_trial_done` every result, `on_start` the job before its first trial (a
    resumed one with what it keeps). `options` are the caller's own settings, kept
    in config.json (`trialbox run` keeps every option there). The trials run on `executor`,
    else here on `backend`, else where `config` says (`executors.base.executor_for`).
    """
    _check_counts(n_concurrent, attempts, max_retries)
    config = config or TrialConfig()
    backoff = retry_backoff or Backoff()
    loaded = [t if isinstance(t, Task) else await run_blocking(load_task, t) for t in tasks]
    # A `bundle:<project>` spec builds a wheel: host work, off the loop like the tasks'.
    the_agent = agent if isinstance(agent, Agent) else await run_blocking(parse_agent, agent)
    executor = _executor_of(config, backend, executor)
    # Another job may run other tasks with the same config: an unused mapping is a warning.
    await check_base_image_map(
        config.base_image_map, loaded, backend=executor.images, refuse_unused=False
    )
    jobs_dir = config.jobs_dir.resolve()
    if not job_id:
        job_id = await run_blocking(fresh_job_id, jobs_dir)
    job_dir = await run_blocking(claim_job_dir, jobs_dir, job_id, resume=False)
    saved = JobConfigFile(
        job_id=job_id, tasks=[str(t.path) for t in loaded], agent=the_agent.spec,
        n_concurrent=n_concurrent, attempts=attempts, max_retries=max_retries,
        retry_backoff_sec=(backoff.first_sec, backoff.max_sec), metadata=dict(metadata or {}),
        task_metadata={name: dict(m) for name, m in (task_metadata or {}).items()},
        trial_config=public_trial_config(config),
        options=None if options is None else dict(options),
    )  # fmt: skip
    slots = [
        _Slot(task, attempt, Chain(new_id(task.name)))
        for task in loaded
        for attempt in range(1, attempts + 1)
    ]
    lock = await run_blocking(lock_job_dir, job_dir)
    try:
        return await _run(
            job_dir, saved, config, the_agent, slots, [], executor=executor,
            hooks=_Hooks(on_trial_done, on_retry, on_start),
        )  # fmt: skip
    finally:
        os.close(lock)


async def resume_job(
    job_dir: str | Path,
    *,
    n_concurrent: int | None = None,
    max_retries: int | None = None,
    keep_containers: bool | None = None,
    credentials: Mapping[str, str] | None = None,
    retry_backoff: Backoff | None = None,
    backend: Backend | None = None,
    on_trial_done: ProgressCallback | None = None,
    on_retry: ProgressCallback | None = None,
    on_start: Callable[[JobRecord], None] | None = None,
    options: Mapping[str, Any] | None = None,
    cluster: RayBackendConfig | None = None,
    executor: Executor | None = None,
) -> JobRecord:
    """Finish a job that stopped (killed, crashed, interrupted), in its own folder and id.

    Its `config.json` says what to run. Every (task, attempt) whose last result is a sample
    (scored, or an agent, verifier or validation failure) is kept, its files untouched; those
    with no result, or whose last one ended in infra or was cancelled, run again, a rerun
    superseding the earlier result. Only what cannot change a sample may differ from the
    first run: concurrency, retries and their backoff, keeping containers, and
    `credentials`, which config.json names but never holds (they must be given again).
    The trials run on `executor`, else here on `backend`, else on `cluster` (a Ray cluster
    named anew: `trialbox run --resume --ray`), else where config.json says.
    """
    job_dir = await run_blocking(Path(job_dir).resolve)
    await run_blocking(claim_job_dir, job_dir.parent, job_dir.name, resume=True)
    lock = await run_blocking(lock_job_dir, job_dir)
    try:
        text = await run_blocking((job_dir / CONFIG_FILE).read_text, encoding="utf-8")
        saved = JobConfigFile.model_validate_json(text)
        if saved.job_id != job_dir.name:
            raise ValueError(f"{job_dir / CONFIG_FILE}: it is job {saved.job_id!r}'s")
        config = _resumed_config(saved, job_dir, keep_containers, credentials)
        executor = _executor_of(config, backend, executor, cluster=cluster)
        await _remove_leftovers(executor.leftovers, saved.job_id)
        await reclaim_dead(
            executor.leftovers, job_dir.parent
        )  # other jobs' runs, killed, on this folder
        backoff = retry_backoff or Backoff(*saved.retry_backoff_sec)
        saved = saved.model_copy(
            update={
                "n_concurrent": saved.n_concurrent if n_concurrent is None else n_concurrent,
                "max_retries": saved.max_retries if max_retries is None else max_retries,
                "retry_backoff_sec": (backoff.first_sec, backoff.max_sec),
                "resumed_at": [*saved.resumed_at, datetime.now(UTC)],
                "trial_config": public_trial_config(config),
                "options": saved.options if options is None else dict(options),
            }
        )
        _check_counts(saved.n_concurrent, saved.attempts, saved.max_retries)
        loaded = [await run_blocking(load_task, path) for path in saved.tasks]
        results, notes = await run_blocking(read_results, job_dir, saved.job_id)
        for note in notes:
            log.warning("%s", note)
        pairs = [(task, a) for task in loaded for a in range(1, saved.attempts + 1)]
        matched, extras = match_chains([(t.name, a) for t, a in pairs], chains_of(results))
        slots = [
            _Slot(task, attempt, chain or Chain(new_id(task.name)))
            for (task, attempt), chain in zip(pairs, matched, strict=True)
        ]
        the_agent = await run_blocking(parse_agent, saved.agent)
        return await _run(
            job_dir, saved, config, the_agent, slots, extras, executor=executor,
            hooks=_Hooks(on_trial_done, on_retry, on_start),
        )  # fmt: skip
    finally:
        os.close(lock)


def _executor_of(
    config: TrialConfig,
    backend: Backend | None,
    executor: Executor | None,
    *,
    cluster: RayBackendConfig | None = None,
) -> Executor:
    if executor is not None:
        if backend is not None:
            raise ValueError("give a job a backend or an executor, not both")
        return executor
    return executor_for(config, backend, cluster=cluster)


async def _remove_leftovers(backend: Reaper, job_id: str) -> None:
    """The sandboxes the stopped run left: the job's folder is locked, so no live run of this
    job owns any sandbox labelled with its id, and they would only hold memory and names."""
    leftovers = await backend.find_leftovers(job=job_id)
    if leftovers:
        removed = await backend.remove_leftovers(leftovers)
        log.warning("job %s: removed %d sandbox(es) the stopped run left", job_id, removed)


def _resumed_config(
    saved: JobConfigFile,
    job_dir: Path,
    keep_containers: bool | None,
    credentials: Mapping[str, str] | None,
) -> TrialConfig:
    """The first run's trial config, in this folder's parent, owned by this process."""
    data = dict(saved.trial_config)
    data.pop("owner", None)  # this process's: `trialbox reap --owner` must find its sandboxes
    names = data.pop("credentials", [])
    missing = sorted(set(names) - set(credentials or {}))
    if missing:
        raise ValueError(
            f"{job_dir}: the job gave its agent the credentials {missing}, which config.json "
            "names but never holds: give them again (resume_job(..., credentials=...))"
        )
    data["credentials"] = dict(credentials or {})
    data["jobs_dir"] = str(job_dir.parent)
    if keep_containers is not None:
        data["keep_containers"] = keep_containers
    return TrialConfig.model_validate(data)


async def _run(
    job_dir: Path,
    saved: JobConfigFile,
    config: TrialConfig,
    agent: Agent,
    slots: list[_Slot],
    extras: list[Chain],
    *,
    executor: Executor,
    hooks: _Hooks,
) -> JobRecord:
    """config.json first, job.json from the start and after each trial, the last at the end
    whatever happened."""
    try:
        await write_atomic(job_dir / CONFIG_FILE, saved.text(config))
    except OSError as exc:  # no config.json, nothing to resume: the job does not start
        where = job_dir / CONFIG_FILE
        raise host_storage_error(
            exc, f"{where} could not be written", job_dir, then="the job did not start"
        ) from exc
    chains = [slot.chain for slot in slots] + extras
    store = JobStore(job_dir, lambda: record_of(saved.job_id, job_dir, chains, len(slots)))
    await store.save()
    if hooks.on_start is not None:
        hooks.on_start(store.snapshot())
    engine = TrialEngine(
        n_concurrent=saved.n_concurrent, config=config, executor=executor, job_id=saved.job_id,
        agent=agent.spec, lock_job_folder=False,  # the job holds it (JobStore)
    )  # fmt: skip
    work = [s for s in slots if s.chain.last is None or needs_rerun(s.chain.last)]
    try:
        async with engine:
            await _run_slots(work, engine, agent, saved, store, hooks)
    finally:
        await store.save_final()
    return store.snapshot()


async def _run_slots(
    work: list[_Slot],
    engine: TrialEngine,
    agent: Agent,
    saved: JobConfigFile,
    store: JobStore,
    hooks: _Hooks,
) -> None:
    """Each slot's trial, retried while it ends in infra. On a cancel (or a bug), nothing new
    starts, the running trials are cancelled and their results still recorded."""
    stopping = asyncio.Event()
    backoff = Backoff(*saved.retry_backoff_sec)

    async def run_slot(slot: _Slot) -> None:
        chain = slot.chain
        metadata = saved.metadata | saved.task_metadata.get(slot.task.name, {})

        async def once() -> TrialResult:
            if stopping.is_set():
                raise _Stopped
            if chain.last is not None and hooks.on_retry is not None:
                hooks.on_retry(chain.last)
            rollout_id = chain.next_id()
            request = RolloutRequest(
                rollout_id=rollout_id, task=str(slot.task.path), agent=agent.spec,
                metadata=dict(metadata),
            )  # fmt: skip
            retry_of = chain.last.trial_id if chain.last is not None else None
            await engine.submit(
                request, attempt=slot.attempt, task=slot.task, agent=agent, retry_of=retry_of
            )
            result = await engine.wait(rollout_id)
            chain.results.append(result)
            await store.save()
            if hooks.on_trial_done is not None:
                hooks.on_trial_done(result)
            return result

        try:
            await with_retries(
                once, max_retries=saved.max_retries, backoff=backoff, stopping=stopping
            )
        except _Stopped:
            return

    runners = [asyncio.create_task(run_slot(slot)) for slot in work]
    if not runners:
        return
    try:
        done, _ = await asyncio.wait(runners, return_when=asyncio.FIRST_EXCEPTION)
        for runner in done:
            runner.result()  # a bug in a runner (or a callback) stops the job
    except BaseException:
        stopping.set()
        await engine.cancel(all=True)
        await asyncio.wait(runners)
        for runner in runners:
            if not runner.cancelled():
                runner.exception()  # retrieved: the first one is already on its way
        raise
