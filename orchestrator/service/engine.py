"""The trial engine that the CLI, the Python API and the server share.

It holds `n_concurrent` slots and a bounded waiting line. Submitting returns at once, or
raises `QueueFull` with a retry-after hint, so a trainer is told to back off instead of work
silently piling up. Finished rollouts stay queryable for a retention window; cancelling a
running rollout is a host abort through the relay, so nothing is left behind.

A rollout id runs at most once while the engine remembers it. Submitting an id that is live
raises `DuplicateRollout`; one that finished within retention raises `RolloutFinished`
carrying its outcome (it does not run again). A cancel by ids that names an id the engine
does not know leaves a tombstone (bounded in count, kept for the retention window), and
`abort(scope)` tombstones its scope for `abort_tombstone_sec`: a submit that arrives after
either raises `RolloutTombstoned`, and its id reads `cancelled`. `watch` is the long poll:
it returns once a rollout's status changes, woken by the engine's own transitions.

This module is the lifecycle: admit, load, hold a slot, run, settle, cancel, shut down. The
parts with rules of their own live beside it: `admission` (which submits are refused, and
the retry-after a full line answers), `loading` (a request's task and agent, each
loaded once), `trial_maker` (a rollout's trial, run through the engine's one executor:
here, or placed on a cluster's node; `executors/`), `tombstones` (what must not start),
`watchers` (long polls), `status` (the documents a rollout reads as), `selection` (what a
cancel names), `callbacks` (the `Outbox` of POSTs on their way) and `orphans` (the
`orphan_timeout_sec` timer that cancels a rollout nobody asks about).

`open_session` opens a session (`trials/session.py`; docs/sessions.md): a task's sandbox that
its caller drives a call at a time, where the engine's trials run (its executor's
`open_session`: this host's backend, or a cluster's node), in its job folder. A session
holds one of the `n_concurrent` slots rollouts run in, from its open until it ends, and never
waits for one (`NoFreeSlot` when none is free). The engine's shutdown, `abort(scope)` and a
cancel by ids, prefix or all end live sessions as host aborts; an ended session stays
readable (`session`) for the retention window. `service/session_routes.py` serves them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import re
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Never

from orchestrator.common.defaults import DEFAULT_RETENTION_SEC
from orchestrator.common.ids import ROLLOUT_ID_PATTERN, check_id, new_id, trial_id_for
from orchestrator.common.suggest import did_you_mean
from orchestrator.executors.base import Executor, TrialEvents, executor_for
from orchestrator.gateway.server import Gateway
from orchestrator.jobs.store import lock_job_dir, mark_superseded, record_unrun
from orchestrator.sandbox import Backend
from orchestrator.service.admission import Admission
from orchestrator.service.callbacks import CallbackEvent, Outbox, callback_of
from orchestrator.service.cancelling import cancel_selected
from orchestrator.service.inflight import InFlight
from orchestrator.service.loading import Loader
from orchestrator.service.orphans import OrphanWatch
from orchestrator.service.retries import Backoff, with_retries
from orchestrator.service.rollout_book import RolloutBook
from orchestrator.service.rollouts import (
    Disposition,
    DuplicateRollout,
    DuplicateSession,
    EngineClosed,
    NoFreeSlot,
    RolloutRequest,
    RolloutStatus,
    ScopeAborted,
)
from orchestrator.service.status import settled_status
from orchestrator.service.tombstones import (
    DEFAULT_ABORT_TOMBSTONE_SEC,
    DEFAULT_MAX_TOMBSTONES,
    Tombstones,
)
from orchestrator.service.trial_maker import TrialMaker
from orchestrator.service.ttl_cache import TtlCache
from orchestrator.service.watchers import DEFAULT_MAX_LONG_POLLS, Watchers
from orchestrator.tasks.task import Task
from orchestrator.trials.agents import Agent
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.result import TrialResult
from orchestrator.trials.session import DEFAULT_IDLE_TTL_SEC, SessionHandle

log = logging.getLogger(__name__)

CALLBACK_DRAIN_SEC = 30.0
_engines: weakref.WeakSet[TrialEngine] = weakref.WeakSet()


def misplaced_options(given: Iterable[str]) -> str:
    """What to say of keywords TrialEngine does not take: a trial's option (`jobs_dir`,
    `limits`, ...) is named as TrialConfig's, a near miss of an engine option as that."""
    engine_options = [n for n in inspect.signature(TrialEngine).parameters if n != "misplaced"]
    said = []
    for name in given:
        if name in TrialConfig.model_fields:
            said.append(f"{name} is a TrialConfig option: pass config=TrialConfig({name}=...)")
        else:
            said.append(f"TrialEngine has no option {name}{did_you_mean(name, engine_options)}")
    return "; ".join(said)


class TrialEngine:
    """Runs rollouts with bounded concurrency and a bounded queue. Use as an async context."""

    def __init__(
        self,
        *,
        n_concurrent: int = 4,
        max_queue_depth: int | None = None,
        config: TrialConfig | None = None,
        agent: str = "oracle",
        task: str | Path | None = None,
        tasks_dir: str | Path | None = None,
        retention_sec: float = DEFAULT_RETENTION_SEC,
        backend: Backend | None = None,
        job_id: str | None = None,
        abort_tombstone_sec: float = DEFAULT_ABORT_TOMBSTONE_SEC,
        max_tombstones: int = DEFAULT_MAX_TOMBSTONES,
        max_long_polls: int = DEFAULT_MAX_LONG_POLLS,
        clock: Callable[[], float] | None = None,
        orphan_timeout_sec: float | None = None,
        max_retries: int = 0,
        retry_backoff: Backoff | None = None,
        lock_job_folder: bool = True,
        executor: Executor | None = None,
        **misplaced: Never,
    ) -> None:
        """`abort_tombstone_sec`: how long `abort(scope)` keeps later submits of its scope
        from starting (0: not at all). `max_tombstones`: how many ids cancelled before their
        submit (or refused by an abort) are remembered, each for `retention_sec`.
        `max_long_polls`: long polls (`watch`) held at once. `clock`: the monotonic clock of
        retention, tombstones and the orphan timer (tests step it). `orphan_timeout_sec`: a
        live rollout whose id nobody submitted, polled (`status`) or long-polled (`watch`,
        `wait`: held for their whole duration) for that long is cancelled, its status saying
        why (None, the default: never; see `orphans`). `max_retries`: a rollout whose trial
        ends in infra is run again under the same rollout id, up to this many more times,
        waiting `retry_backoff` between (each try its own trial folder, the earlier ones'
        result.json saying `superseded_by`); the status says which try it is.
        `lock_job_folder=False`: the caller holds the job folder's lock itself (`run_job`).
        `executor`: where the trials run (`executors.base`); by default the one `config`
        names (`executor_for`), on `backend` when one is given (not both)."""
        if misplaced:
            raise TypeError(misplaced_options(misplaced))
        if n_concurrent < 1:
            raise ValueError("n_concurrent must be at least 1")
        if max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        if max_queue_depth is not None and max_queue_depth < 1:
            raise ValueError("max_queue_depth must be at least 1, or None for no bound")
        self.n_concurrent = n_concurrent
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff or Backoff()
        self.max_queue_depth = max_queue_depth
        self.config = config or TrialConfig()
        self.default_agent = agent
        self.default_task = None if task is None else Path(task)
        self.tasks_dir = None if tasks_dir is None else Path(tasks_dir)
        if backend is not None and executor is not None:
            raise ValueError("give TrialEngine a backend or an executor, not both")
        self.executor = executor or executor_for(self.config, backend)
        self.job_id = check_id(job_id or new_id("serve"), "job id")
        self._slots = asyncio.Semaphore(n_concurrent)
        settled: TtlCache[RolloutStatus] = (
            TtlCache(retention_sec) if clock is None else TtlCache(retention_sec, clock=clock)
        )
        if abort_tombstone_sec < 0 or max_tombstones < 0 or max_long_polls < 0:
            raise ValueError("abort_tombstone_sec, max_tombstones and max_long_polls must be >= 0")
        self.retention_sec = retention_sec
        self.abort_tombstone_sec = abort_tombstone_sec
        self.max_long_polls = max_long_polls
        self._watchers = Watchers(
            max_long_polls, read=self.status, closed=lambda: self._book.closed
        )
        tombstones = Tombstones(
            id_ttl_sec=retention_sec, max_ids=max_tombstones, scope_ttl_sec=abort_tombstone_sec,
            clock=clock or time.monotonic, on_bury=self._watchers.notify,
        )  # fmt: skip
        self._book = RolloutBook(settled, tombstones)
        self._loader = Loader(
            default_agent=agent, default_task=self.default_task, tasks_dir=self.tasks_dir
        )
        # The job folder's lock, from the first rollout on (-1: not this engine's to hold).
        self._folder_lock: int | None = None if lock_job_folder else -1
        self._outbox = Outbox()
        self._admission = Admission(n_concurrent, max_queue_depth)
        self._trials = TrialMaker(self.config, self.executor, self.job_id)
        self._orphans = OrphanWatch(orphan_timeout_sec, clock or time.monotonic, self._orphaned)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._sessions: dict[str, SessionHandle | None] = {}  # live sessions; None while opening
        self._doomed_sessions: dict[str, str] = {}  # opening ones an abort reached: why
        self._session_aborts: dict[SessionHandle, asyncio.Future[TrialResult]] = {}
        self._ended_sessions: TtlCache[SessionHandle] = (
            TtlCache(retention_sec) if clock is None else TtlCache(retention_sec, clock=clock)
        )
        _engines.add(self)

    # -- submit -------------------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        """Rollouts accepted but not yet holding a slot."""
        return self._book.waiting

    def _admit(self, request: RolloutRequest) -> None:
        if request.rollout_id in self._sessions:  # the two would share a trial folder
            raise DuplicateRollout(
                f"{request.rollout_id!r} is a live session's id; a rollout needs another"
            )
        self._admission.check(request, self._book, len(self._sessions))

    def tombstone_scope(self, scope: str) -> None:
        """For `abort_tombstone_sec`, refuse rollouts whose id starts with `scope` or whose
        session_id equals it (`abort` calls this; safe from any thread)."""
        if not scope:
            raise ValueError("a tombstone needs a non-empty scope")
        self._book.tombstones.bury_scope(scope)

    @property
    def gateway(self) -> Gateway | None:
        """The model gateway of this engine's rollouts, once one was needed."""
        return self._trials.gateway

    async def submit(
        self,
        request: RolloutRequest,
        *,
        attempt: int = 1,
        task: Task | None = None,
        agent: Agent | None = None,
        retry_of: str | None = None,
    ) -> str:
        """Accept a rollout (it runs when a slot frees) and return its id, or refuse it.

        Refusals, all before anything runs: `DuplicateRollout` (the id is live; `.status` is
        its live status); `RolloutFinished` (a `DuplicateRollout`: the id finished within
        retention; `.status` is its outcome, and it is not run again); `RolloutTombstoned`
        (a cancel by its id, or an `abort` of its scope, came first; `.status` reads
        cancelled); `EngineClosed`; `QueueFull` (retry after `.retry_after` s); `ValueError`
        / `TaskError` for a request it cannot run.

        `task` and `agent` skip loading when the caller has them already (run_job does);
        `retry_of`, the trial this one reruns (run_job's retries and resumes), is written in
        its trial.json and result.json. The rollout's trial id is derived from its rollout id
        (`ids.trial_id_for`).
        """
        self._orphans.touch(request.rollout_id)  # a repeated submit: its caller is there
        self._admit(request)
        self._trials.check_model(request)
        if task is None or agent is None:
            loaded_task, loaded_agent = await self._loader.load(request)
            task, agent = task or loaded_task, agent or loaded_agent
            # Loading awaited: the engine may have closed, or the same id come in, meanwhile.
            self._admit(request)
        self._hold_job_folder()
        loop = self.loop = asyncio.get_running_loop()
        rollout = InFlight(
            request, task, agent, attempt, loop.create_future(),
            trial_id=trial_id_for(request.rollout_id), retry_of=retry_of,
        )  # fmt: skip
        self._book.live[request.rollout_id] = rollout
        self._orphans.track(request.rollout_id)
        rollout.runner = asyncio.create_task(self._drive(rollout), name=request.rollout_id)
        # A runner cancelled before its first step never enters _drive: settle it here.
        rollout.runner.add_done_callback(lambda _task: self._settle_if_live(rollout))
        self._watchers.notify(request.rollout_id)
        return request.rollout_id

    async def wait(self, rollout_id: str) -> TrialResult:
        """The result of an in-flight rollout, once it ends."""
        rollout = self._book.live.get(rollout_id)
        if rollout is None:
            raise KeyError(f"rollout {rollout_id!r} is not in flight")
        with self._orphans.held(rollout_id):
            return await asyncio.shield(rollout.done)

    # -- the run ------------------------------------------------------------------------------

    def _grading(self, rollout: InFlight) -> None:
        self._watchers.notify(rollout.request.rollout_id)
        self._callback(rollout, "workflow_complete", "grading")

    def _callback(self, rollout: InFlight, event: CallbackEvent, status: str,
                  result: TrialResult | None = None) -> None:  # fmt: skip
        found = callback_of(rollout.request, event, status, result)
        if found is not None:
            self._outbox.post(*found)

    async def _drive(self, rollout: InFlight) -> None:
        request = rollout.request
        result: TrialResult | None = None
        try:
            async with self._slots:  # held across a rollout's tries and the waits between
                result = await with_retries(
                    lambda: self._try(rollout), max_retries=self.max_retries,
                    backoff=self.retry_backoff, stopping=rollout.no_retry,
                )  # fmt: skip
        except asyncio.CancelledError:
            result = rollout.live
            if result is None or result.status not in ("success", "failure", "cancelled"):
                result = rollout.result_without_trial(self.job_id)
        except Exception as exc:  # a bug, not a trial outcome: keep the engine serving
            log.exception("rollout %s crashed", request.rollout_id)
            result = rollout.result_without_trial(self.job_id, status="failure", message=repr(exc))
        finally:
            if result is None:
                result = rollout.result_without_trial(self.job_id)
            self._settle(rollout, result)

    async def _try(self, rollout: InFlight) -> TrialResult:
        """One try of the rollout in a trial of its own; a try after an infra one gets the
        next retry id, and the earlier result.json says `superseded_by` it."""
        if rollout.live is not None:
            earlier = rollout.live
            rollout.retried.append(earlier)
            # A valid id however long the rollout's (a 128-character one has no room left).
            rollout.trial_id = trial_id_for(
                f"{rollout.request.rollout_id}.retry{len(rollout.retried)}"
            )
            rollout.retry_of = earlier.trial_id
            await mark_superseded(earlier, rollout.trial_id)

        announced = False

        def live(result: TrialResult) -> None:
            """The try's result as it goes. Its start is a change long polls see (queued to
            running, or a retry); a result replaced later is not (its settling is)."""
            nonlocal announced
            rollout.live = result
            if not announced:
                announced = True
                self._watchers.notify(rollout.request.rollout_id)

        events = TrialEvents(result=live, grading=lambda: self._grading(rollout))
        return await self._trials.run(rollout, events)

    def _settle_if_live(self, rollout: InFlight) -> None:
        if self._book.live.get(rollout.request.rollout_id) is rollout:
            self._settle(rollout, rollout.result_without_trial(self.job_id))

    def _settle(self, rollout: InFlight, result: TrialResult) -> None:
        rollout_id = rollout.request.rollout_id
        if result.status == "cancelled" and not result.trial_dir:  # cancelled while queued
            result = record_unrun(self.config.jobs_dir, result)
        self._admission.observe(result)
        status = settled_status(rollout_id, result, rollout.retried)
        self._book.settle(rollout, self._orphans.settled(rollout_id, status))
        if not rollout.done.done():
            rollout.done.set_result(result)
        self._watchers.notify(rollout_id)
        self._callback(rollout, "grader_complete", result.status, result)

    # -- status and cancel --------------------------------------------------------------------

    def status(self, rollout_id: str) -> RolloutStatus:
        """queued / running / grading while live; the outcome while retained; cancelled while
        tombstoned; else unknown."""
        self._orphans.touch(rollout_id)
        return self._book.status(rollout_id)

    # -- long poll ----------------------------------------------------------------------------

    async def watch(self, rollout_id: str, wait_sec: float) -> RolloutStatus:
        """The long poll: the status once it differs from the status now, or after `wait_sec`
        seconds, whichever comes first. A settled outcome (success, failure, cancelled) is
        returned at once: only its expiry could change it. Woken by the engine's transitions
        (submitted, slot taken, grading, settled, tombstoned), never by polling. Raises
        `TooManyLongPolls` past `max_long_polls` long polls at once.
        """
        with self._orphans.held(rollout_id):
            return await self._watchers.watch(rollout_id, wait_sec)

    @property
    def long_polls(self) -> int:
        """Long polls (`watch`) waiting now."""
        return self._watchers.count

    # -- cancel -------------------------------------------------------------------------------

    def cancel_nowait(
        self,
        *,
        ids: Iterable[str] | None = None,
        prefix: str | None = None,
        all: bool = False,
        session_id: str | None = None,
        within: str | None = None,
    ) -> dict[str, Disposition]:
        """Cancel by exactly one selector; returns at once with a disposition per rollout.

        The disposition says how the rollout will end: `cancelled_queued` (it never ran) and
        `cancelled_running` (its trial is aborted and torn down) end `cancelled`; `finishing`
        means too late: its trial's phases were over (verification done, or a phase failed)
        and its shielded finishing steps end it with its own outcome, `success` or `failure`
        (it is not cancelled). A cancel repeated while the rollout is live answers as the
        first did.

        `within`, when given, narrows any selector to ids that start with it (a tenant's
        prefix): others are left alone, and named ids outside it read `not_found`. An id that
        is neither live nor finished reads `not_found` and is tombstoned: a later submit of
        it is refused (`RolloutTombstoned`) for the retention window.
        """
        ending = self._sessions_named(ids=ids, prefix=prefix, everything=all, within=within)
        if ids is not None and ending:  # a live session's id is not a rollout's to tombstone
            ids = [i for i in ids if i not in ending]
        dispositions = cancel_selected(
            self._book, ids=ids, prefix=prefix, everything=all, session_id=session_id,
            within=within,
        )  # fmt: skip
        selector = "ids" if ids is not None else "prefix" if prefix is not None else "all"
        for session in ending.values():
            self._abort_session(session, f"cancelled: a cancel by {selector}")
        dispositions.update(dict.fromkeys(ending, "cancelled_running"))
        return dispositions

    def _sessions_named(
        self,
        *,
        ids: Iterable[str] | None,
        prefix: str | None,
        everything: bool,
        within: str | None,
    ) -> dict[str, SessionHandle]:
        """The live sessions a cancel's selector names (a `session_id` selector names a
        rollouts' scope, never a session), narrowed to `within`."""
        live = {i: s for i, s in self.sessions.items() if within is None or i.startswith(within)}
        if ids is not None:
            named = set(ids)
            return {i: s for i, s in live.items() if i in named}
        if prefix is not None:
            return {i: s for i, s in live.items() if i.startswith(prefix)}
        return live if everything else {}

    async def cancel(
        self,
        *,
        ids: Iterable[str] | None = None,
        prefix: str | None = None,
        all: bool = False,
        session_id: str | None = None,
        within: str | None = None,
        wait: bool = True,
    ) -> dict[str, Disposition]:
        """`cancel_nowait`, then (by default) wait until those rollouts have torn down (a
        `finishing` one, until it has finished)."""
        runners = {i: r.runner for i, r in self._book.live.items() if r.runner is not None}
        dispositions = self.cancel_nowait(
            ids=ids, prefix=prefix, all=all, session_id=session_id, within=within
        )
        if wait:
            chosen = [runners[i] for i in dispositions if i in runners]
            if chosen:
                await asyncio.wait(chosen)
        return dispositions

    def _orphaned(self, rollout_id: str, reason: str) -> None:
        """The orphan timer's cancel: the ordinary one, the reason in the trial's result."""
        rollout = self._book.live.get(rollout_id)
        if rollout is None:
            return
        disposition = self.cancel_nowait(ids=[rollout_id])[rollout_id]
        if disposition in ("cancelled_queued", "cancelled_running"):
            if rollout.live is not None:  # written to its result.json as it finishes
                rollout.live.warnings.append(reason)
            log.warning("rollout %s: %s", rollout_id, reason)

    # -- shutdown -----------------------------------------------------------------------------

    async def shutdown(self, drain_sec: float = 30.0) -> None:
        """Stop accepting, let live rollouts finish for up to `drain_sec`, then abort the rest."""
        live = self._book.live
        self._book.closed = True
        await self._abort_sessions("", "the engine shut down")
        for rollout in live.values():
            rollout.no_retry.set()
        await self._orphans.aclose()
        runners = [r.runner for r in live.values() if r.runner is not None]
        if runners:
            await asyncio.wait(runners, timeout=drain_sec)
        if live:
            log.warning("shutdown: aborting %d rollout(s) still in flight", len(live))
            await self.cancel(all=True)
        # Callbacks of the last rollouts still go out, within a bound.
        await self._outbox.drain(CALLBACK_DRAIN_SEC)
        await self._trials.aclose()
        if self._folder_lock is not None and self._folder_lock >= 0:
            os.close(self._folder_lock)
        self._folder_lock = None
        self._watchers.notify_all()  # long polls answer now: nothing more changes

    # -- sessions -----------------------------------------------------------------------------

    async def open_session(
        self,
        *,
        task_id: str | None = None,
        task: str | Path | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idle_ttl_sec: float | None = DEFAULT_IDLE_TTL_SEC,
        fast_path: bool = True,
    ) -> SessionHandle:
        """A session on a task (`task_id` under `tasks_dir`, a `task` folder, or the engine's
        default task), returned once its sandbox is ready (docs/sessions.md). `session_id`
        (the rollout id grammar; default: a new one) names its trial folder in this engine's
        job folder; `metadata["label"]` reaches only its verifier; `idle_ttl_sec` without a
        call expires it (None: never). The session holds one of the engine's slots until it
        ends. Raises `DuplicateSession` (a `ValueError`) for the id of a live session or
        rollout (`ScopeAborted` for one in a scope `abort(scope)` ended lately), `ValueError`
        for a bad request, `NoFreeSlot` (a `QueueFull`) when every slot is held (a session
        does not wait for one), `EngineClosed` once shut down, and what
        failed its opening (its result.json says so). `fast_path`: commands through a
        command channel where the sandbox has one (False: each a plain exec). Sessions run
        where the engine's trials run: on this host's backend, or placed on a cluster's node
        as a trial is, each call going to that node (`executors/placed_session.py`)."""
        if self.closed:
            raise EngineClosed("the engine is shutting down: no new sessions")
        session_id = session_id or new_id("session")
        if not re.fullmatch(ROLLOUT_ID_PATTERN, session_id):
            raise ValueError(
                f"session id {session_id!r}: use 1-128 letters, digits, '_', '.', ':', '@', '-'"
            )
        if session_id in self._sessions:
            raise DuplicateSession(f"session {session_id!r} is live: close it or use another id")
        aborted = self._book.tombstones.aborted_scope(session_id)
        if aborted is not None:
            raise ScopeAborted(
                f"session {session_id!r}: its scope {aborted!r} was aborted; sessions of an "
                f"aborted scope opened within {self.abort_tombstone_sec:g} s of the abort do "
                "not start"
            )
        if session_id in self._book.live:  # the two would share a trial folder
            raise DuplicateSession(f"{session_id!r} is a live rollout's id; use another")
        request = RolloutRequest(
            rollout_id=session_id, task_id=task_id, task=None if task is None else str(task)
        )
        if self._slots.locked():  # taken by rollouts or sessions, or promised to a waiter
            retry_after = self._admission.retry_after(self.waiting)
            raise NoFreeSlot(
                retry_after,
                f"no free slot: all {self.n_concurrent} of the engine's slots are held by "
                f"rollouts or sessions; retry in {retry_after} s",
            )
        await self._slots.acquire()  # free: taken at once, without a wait
        release = self._slot_releaser()

        def ended(session: SessionHandle) -> None:
            release()
            self._session_ended(session)

        self._sessions[session_id] = None  # taken while it opens
        try:
            loaded = await self._loader.load_task(request)
            if self.closed:
                raise EngineClosed("the engine shut down while the session opened")
            self._hold_job_folder()
            self.loop = asyncio.get_running_loop()
            session = await self.executor.open_session(
                loaded, job_id=self.job_id, session_id=session_id, metadata=metadata,
                idle_ttl_sec=idle_ttl_sec, on_end=ended, use_channel=fast_path,
            )  # fmt: skip
        except BaseException:
            release()
            self._doomed_sessions.pop(session_id, None)
            if self._sessions.get(session_id) is None:
                self._sessions.pop(session_id, None)
            raise
        doomed = self._doomed_sessions.pop(session_id, None)
        if self.closed or doomed is not None:  # shut down or aborted while it opened
            self._sessions.pop(session_id, None)
            await session.abort(doomed or "the engine shut down while the session opened")
            if self.closed:
                raise EngineClosed("the engine shut down while the session opened")
            raise ScopeAborted(f"session {session_id!r} was aborted while it opened: {doomed}")
        if session.status == "ready":
            self._sessions[session_id] = session
        return session

    def _slot_releaser(self) -> Callable[[], None]:
        """Gives back one slot a session took, once however often it is called."""
        held = [True]

        def release() -> None:
            if held[0]:
                held[0] = False
                self._slots.release()

        return release

    def _session_ended(self, session: SessionHandle) -> None:
        if self._sessions.get(session.session_id) in (session, None):
            self._sessions.pop(session.session_id, None)
        self._ended_sessions.set(session.session_id, session)

    @property
    def sessions(self) -> dict[str, SessionHandle]:
        """The live sessions, by id."""
        return {i: s for i, s in self._sessions.items() if s is not None}

    def session(self, session_id: str) -> SessionHandle | None:
        """The session of this id: live, or ended within the retention window (its status
        and result stay readable); None when unknown or still opening."""
        return self._sessions.get(session_id) or self._ended_sessions.get(session_id)

    def session_opening(self, session_id: str) -> bool:
        """Whether a session of this id is opening now (its sandbox not yet ready)."""
        return session_id in self._sessions and self._sessions[session_id] is None

    def abort_sessions_nowait(self, scope: str, reason: str) -> dict[str, Disposition]:
        """End the live sessions whose id starts with `scope` ('' : every one) as host
        aborts, in tasks of their own; returns at once (`abort(scope)` calls this)."""
        chosen = {i: s for i, s in self.sessions.items() if i.startswith(scope)}
        for session in chosen.values():
            self._abort_session(session, reason)
        opening = [i for i, s in self._sessions.items() if s is None and i.startswith(scope)]
        self._doomed_sessions.update(dict.fromkeys(opening, reason))  # ended once ready
        return dict.fromkeys([*chosen, *opening], "cancelled_running")

    def _abort_session(self, session: SessionHandle, reason: str) -> None:
        """A host abort of one live session in a task of its own; once per session (a second
        abort, from a cancel and an abort of the same scope, leaves the first to finish)."""
        if session in self._session_aborts:
            return
        ending = asyncio.ensure_future(session.abort(reason))
        self._session_aborts[session] = ending
        ending.add_done_callback(lambda _done: self._session_aborts.pop(session, None))

    async def _abort_sessions(self, scope: str, reason: str) -> None:
        self.abort_sessions_nowait(scope, reason)
        if self._session_aborts:
            await asyncio.wait(set(self._session_aborts.values()))

    def _hold_job_folder(self) -> None:
        """Hold the job folder's lock while this engine runs, as `trialbox run` holds its own:
        the report then reads a live server's folder as running and a stopped one's as
        finished (a process that dies lets go of it too). A folder the host cannot make is
        left to the trial, which fails saying so."""
        if self._folder_lock is not None:
            return
        job_dir = self.config.jobs_dir / self.job_id
        try:
            job_dir.mkdir(parents=True, exist_ok=True)
            self._folder_lock = lock_job_dir(job_dir)
        except (OSError, ValueError) as exc:
            log.warning("%s: could not hold the job folder's lock (%s)", job_dir, exc)
            self._folder_lock = -1  # not asked again

    async def __aenter__(self) -> TrialEngine:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown(drain_sec=0 if exc_info[0] is not None else 30.0)

    @property
    def closed(self) -> bool:
        return self._book.closed

    @property
    def live_count(self) -> int:
        return len(self._book.live)


def engines() -> list[TrialEngine]:
    """Every engine alive in this process (the abort hook reaches them all)."""
    return list(_engines)
