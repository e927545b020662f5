"""Sessions placed on a cluster's nodes, as their caller sees them: the same calls, answers
and exceptions as a local `Session` (`trials.session.SessionHandle`), each call carried to
the node that holds the session's sandbox.

A session is placed as a trial is: `PlacedExecutor.open_session` runs a `SessionWork`
(`node_session.py`) through the executor's `Placement`, which holds the sandbox's cpus and
memory on a node with room for them (Ray: a placement group) for the whole session. The
node opens the very same `Session` there; once it says `SessionReady` the caller gets a
`PlacedSession`, whose every call is `Placement.ask` to that node. This host keeps what a
placed trial keeps: its folder (claimed, trial.json written before the node starts), and at
the end the node's folder and result.json brought back into it, with `trial_dir` this
host's and `node` where it ran (`PlacedRun`). A call the node refuses raises here as the
node raised it (`SessionClosedError`, `SessionBudgetError`, `SessionPathError`,
`SessionLimitError`, `FileNotFoundError`, a `SandboxError`); a node that dies is a
`SandboxLostError` (infra), and the session ends with it.

`PlacedSession` is the caller's handle; `open_placed_session` makes one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from orchestrator.common.errors import SandboxError, SessionClosedError, SessionError
from orchestrator.common.ids import trial_id_for
from orchestrator.executors.base import TrialEvents, TrialRun
from orchestrator.executors.node_session import (
    CallName,
    SessionCall,
    SessionEnded,
    SessionReady,
    SessionWork,
)
from orchestrator.executors.placed import PlacedRun
from orchestrator.executors.placement import Placement
from orchestrator.tasks.task import Task
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.result import TrialResult
from orchestrator.trials.session import (
    DEFAULT_IDLE_TTL_SEC,
    SESSION_AGENT,
    SessionAgent,
    SessionExecResult,
    SessionHandle,
    SessionStatus,
)
from orchestrator.trials.session_log import SessionLog

END_WAIT_SEC = 30.0  # after a call the sandbox failed, how long the node's end is awaited


class _SessionRun(PlacedRun):
    """The placed trial a session is: its work a `SessionWork`, its events the session's."""

    def __init__(
        self,
        placement: Placement,
        run: TrialRun,
        config: TrialConfig,
        *,
        idle_ttl_sec: float | None,
        use_channel: bool,
    ) -> None:
        super().__init__(placement, run, config, TrialEvents())
        self.idle_ttl_sec, self.use_channel = idle_ttl_sec, use_channel
        self.session_id = run.session_id or ""
        self.ready: asyncio.Future[SessionReady] = asyncio.get_running_loop().create_future()
        self.ended: SessionEnded | None = None

    def _on_event(self, event: object) -> None:
        if isinstance(event, SessionReady):
            if not self.ready.done():
                self.ready.set_result(event)
        elif isinstance(event, SessionEnded):
            self.ended = event
        else:
            super()._on_event(event)

    def _placed_work(self) -> SessionWork:
        return SessionWork(
            key=self.key, resources=self._resources(), config=self.config,
            trial_id=self.trial_id, job_id=self.job_id, session_id=self.session_id,
            metadata=dict(self.run_of.metadata), idle_ttl_sec=self.idle_ttl_sec,
            use_channel=self.use_channel, host_env=self._host_env(),
        )  # fmt: skip


class PlacedSession:
    """A session whose sandbox is on a cluster's node (`SessionHandle`): each call goes to
    that node; see `trials.session.Session` for what each does. `trial_dir` is this host's
    folder of the session, where the node's folder lands when it ends (`result.node` says
    which node holds it meanwhile)."""

    def __init__(
        self,
        placement: Placement,
        run: TrialRun,
        config: TrialConfig,
        *,
        idle_ttl_sec: float | None = DEFAULT_IDLE_TTL_SEC,
        on_end: Callable[[SessionHandle], None] | None = None,
        use_channel: bool = True,
    ) -> None:
        if idle_ttl_sec is not None and idle_ttl_sec <= 0:
            raise ValueError("idle_ttl_sec must be positive, or None for no expiry")
        self.placement = placement
        self.task = run.task
        self._idle_ttl_sec = idle_ttl_sec
        self._run = _SessionRun(
            placement, run, config, idle_ttl_sec=idle_ttl_sec, use_channel=use_channel
        )
        self._on_end = on_end
        self._status: SessionStatus = "opening"
        self._closing = False
        self._ready: SessionReady | None = None
        self._deadline = 0.0
        self._life: asyncio.Task[TrialResult] | None = None

    # -- what the caller reads ----------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._run.session_id

    @property
    def status(self) -> SessionStatus:
        """opening, ready, verifying, then closed (verified, closed, failed) or expired."""
        return self._status

    @property
    def result(self) -> TrialResult:
        """The session's trial result: this host's while it runs, the node's once ended."""
        return self._run.result

    @property
    def trial_dir(self) -> Path:
        """This host's folder of the session (the node's folder comes back into it)."""
        return self._run.trial_dir

    @property
    def instruction(self) -> str:
        return self.task.instruction

    @property
    def user(self) -> str:
        return self._ready.user if self._ready is not None else ""

    @property
    def workdir(self) -> str | None:
        return self._ready.workdir if self._ready is not None else None

    @property
    def remaining_sec(self) -> float:
        if self._status == "opening":
            return self.task.config.agent.timeout_sec
        return max(0.0, self._deadline - time.monotonic())

    @property
    def idle_ttl_sec(self) -> float | None:
        return self._idle_ttl_sec

    # -- opening and ending -------------------------------------------------------------------

    async def _open(self) -> None:
        """Placed, and its sandbox ready on the node; a failure to open ends it as a placed
        trial ends (this host's result.json) and raises what the node raised."""
        life = self._life = asyncio.ensure_future(self._run.run())
        ready = self._run.ready
        both: list[asyncio.Future[Any]] = [ready, life]
        try:
            await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            life.cancel()
            await asyncio.wait({life})
            self._ended_now()
            raise
        if not ready.done():  # it ended without opening
            self._ended_now()
            if self._run.ended is not None and self._run.ended.error is not None:
                raise self._run.ended.error
            error = self.result.error
            raise SandboxError(
                f"session {self.session_id} did not open"
                + (f": {error.type}: {error.message}" if error else "")
            )
        self._ready = ready.result()
        self._deadline = time.monotonic() + self._ready.remaining_sec
        self._status = "ready"
        life.add_done_callback(lambda _life: self._ended_now())

    def _ended_now(self) -> None:
        """Its result.json is written here: the status the node gave it, the caller told."""
        ended = self._run.ended
        self._status = ended.status if ended is not None else "closed"
        if self._on_end is not None:
            on_end, self._on_end = self._on_end, None
            on_end(self)

    @property
    def _over(self) -> bool:
        return self._life is None or self._life.done()

    async def _outcome(self, limit: float | None = None) -> TrialResult:
        """The session's result once it ended here (its folder back, result.json written);
        a cancel of the caller leaves the ending to go on."""
        if self._life is not None and not self._life.done():
            await asyncio.wait({self._life}, timeout=limit)
        return self.result

    # -- calls --------------------------------------------------------------------------------

    def _refuse_if_ended(self, what: str) -> None:
        if self._status != "ready" or self._closing or self._over:
            status = "closing" if self._status == "ready" else self._status
            raise SessionClosedError(
                f"session {self.session_id} is {status}: {what} is refused"
                + ("" if status == "verifying" else f" (its result: {self.result.status})")
            )

    async def _ask(self, name: CallName, *args: Any, **kwargs: Any) -> Any:
        """One call on the node; a call the sandbox (or the node) failed has ended the
        session there, whose end is awaited here before the error is raised."""
        try:
            return await self.placement.ask(self._run.key, SessionCall(name, args, kwargs))
        except SessionError:
            raise
        except Exception as exc:
            if not isinstance(exc, (ValueError, FileNotFoundError)):
                await self._outcome(END_WAIT_SEC)
            raise

    async def exec(
        self,
        command: str | None = None,
        *,
        argv: list[str] | None = None,
        timeout_sec: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
    ) -> SessionExecResult:
        self._refuse_if_ended("exec")
        done = await self._ask(
            "exec", command, argv=argv, timeout_sec=timeout_sec,
            env=None if env is None else dict(env), cwd=cwd, user=user,
        )  # fmt: skip
        assert isinstance(done, SessionExecResult)
        return done

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._refuse_if_ended("write_file")
        await self._ask("write_file", path, bytes(data), mode)

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        self._refuse_if_ended("read_file")
        data = await self._ask("read_file", path, max_bytes)
        assert isinstance(data, bytes)
        return data

    async def verify(self) -> TrialResult:
        """The task's verifier on the node, then the session's end: its result, read back
        here (reward, rewards, `trial_dir` this host's, `node`)."""
        self._refuse_if_ended("verify")
        self._status = "verifying"
        try:
            await self._ask("verify")
        except SessionError:
            if not self._over:
                self._status = "ready"
            raise
        except BaseException:  # a cancel too: a verify that never ran leaves it usable
            if not self._over:
                self._status = "ready"
                raise
        return await self._outcome()

    async def close(self) -> TrialResult:
        """End it without verifying (`cancelled`); an ended session's result again."""
        if self._over and self._life is not None:
            return await self._outcome()
        if self._status != "ready" or self._closing:
            status = "closing" if self._status == "ready" else self._status
            raise SessionClosedError(f"session {self.session_id} is {status}")
        self._closing = True
        await self._end("close")
        return await self._outcome()

    async def abort(self, reason: str = "") -> TrialResult:
        """The host's abort, on the node: the sandbox goes now, nothing is collected."""
        if self._over:
            return await self._outcome()
        self._closing = True
        await self._end("abort", reason)
        return await self._outcome()

    async def _end(self, name: CallName, *args: Any) -> None:
        """Ask the node to end the session; when it cannot be asked, the placement's cancel
        reaches it instead (the node's host abort)."""
        try:
            await self.placement.ask(self._run.key, SessionCall(name, args))
        except SessionClosedError:
            pass  # it ended meanwhile (verified, expired): its result comes back
        except Exception:
            if self._life is not None:
                self._life.cancel()

    async def __aenter__(self) -> PlacedSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._over:
            return
        if exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            await self.abort("the session's caller was cancelled")
        else:
            await self.close()


async def open_placed_session(
    placement: Placement,
    task: Task,
    *,
    config: TrialConfig,
    job_id: str,
    session_id: str,
    metadata: Mapping[str, Any] | None = None,
    idle_ttl_sec: float | None = DEFAULT_IDLE_TTL_SEC,
    on_end: Callable[[SessionHandle], None] | None = None,
    use_channel: bool = True,
) -> PlacedSession:
    """A session on `task` placed through `placement`, once its sandbox is ready on a node;
    its folder here is `<jobs_dir>/<job_id>/<trial id of session_id>`."""
    log = SessionLog(output_cap=config.limits.session_trajectory_output_cap_bytes)
    run = TrialRun(
        task=task, agent=SessionAgent(SESSION_AGENT, log), trial_id=trial_id_for(session_id),
        job_id=job_id, metadata=dict(metadata or {}), session_id=session_id,
    )  # fmt: skip
    session = PlacedSession(
        placement, run, config, idle_ttl_sec=idle_ttl_sec, on_end=on_end, use_channel=use_channel
    )
    await session._open()
    return session


__all__ = ["PlacedSession", "open_placed_session"]
