"""A session as it runs on a cluster node: the work a `Placement` carries there, and the
node's answers to the session's calls.

A session is placed as a trial is (`SessionWork` holds its sandbox's cpus and memory on its
node for as long as it lives), and opens there the very same `Session` a local engine opens
(`trials.session.open_session`), on the node's own backend and the node's copy of the task,
with the driver's config and the driver's values of the task's `${VAR}`s. Once its sandbox is
ready the work says so (`SessionReady`) and waits for the session's end: a `verify`, a
`close` or an `abort` asked by the driver, its idle TTL, a call that finds its sandbox broken,
or a cancel of the work (the driver's abort when the node cannot be asked, its shutdown),
which is the session's host abort. Then, as a trial's work does, it sends `SessionEnded` and
the folder back (`node_trial.Finished`) and removes its scratch folder.

While it lives, the session is found by its work's key in this process's `live_sessions`;
`answer` runs one `SessionCall` on it (the node's actor calls it for `Placement.ask`). An
exception a call raises is raised again on the driver as the same type: one that would not
survive the trip (it does not unpickle) travels as a `SandboxError` naming it. A session that
failed to open says why in its `SessionEnded` (with its folder and result.json, as a trial's).
"""

from __future__ import annotations

import asyncio
import os
import pickle
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from orchestrator.common.archive import tar_of_dir
from orchestrator.common.errors import SandboxError, SessionClosedError
from orchestrator.common.offload import run_blocking
from orchestrator.common.shielding import ride_out_cancels
from orchestrator.executors.node_trial import Finished, scratch_root
from orchestrator.executors.placement import Emit, Resources
from orchestrator.sandbox import Backend
from orchestrator.tasks.task import Task
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.session import Session, SessionStatus, open_session

CallName = Literal["exec", "write_file", "read_file", "verify", "close", "abort"]
CALLS: frozenset[str] = frozenset({"exec", "write_file", "read_file", "verify", "close", "abort"})

_live: dict[str, Session] = {}


def live_sessions() -> dict[str, Session]:
    """The sessions open in this process (a node's actor), by their work's key."""
    return _live


@dataclass(frozen=True)
class SessionReady:
    """The session's sandbox is ready: who and where its commands run by default, and what
    was left of its budget then (the driver counts down from it)."""

    user: str
    workdir: str | None
    remaining_sec: float


@dataclass(frozen=True)
class SessionEnded:
    """The session ended with `status` (closed or expired); `error`: why it could not open,
    raised on the driver as the local open raises it."""

    status: SessionStatus
    error: BaseException | None = None


@dataclass(frozen=True)
class SessionCall:
    """One call of a session's (`CALLS`), with its arguments, as it travels to the node."""

    name: CallName
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def portable(exc: BaseException) -> BaseException:
    """`exc` when it survives a pickle round trip (the way back to the driver), else a
    `SandboxError` that names it."""
    try:
        back = pickle.loads(pickle.dumps(exc))
    except Exception:
        return SandboxError(f"{type(exc).__name__}: {exc}")
    return exc if type(back) is type(exc) else SandboxError(f"{type(exc).__name__}: {exc}")


async def answer(key: str, call: SessionCall) -> Any:
    """Run `call` on the session of work `key` open here. A verify, close or abort answers
    None: the session's result comes back with its folder. Raises what the call raised
    (made `portable`), or `SessionClosedError` when no such session is open here."""
    if call.name not in CALLS:
        raise ValueError(f"{call.name!r} is not a session call")
    session = _live.get(key)
    if session is None:
        raise SessionClosedError(f"the session of {key} is not open on this node: it has ended")
    try:
        answered = await getattr(session, call.name)(*call.args, **call.kwargs)
    except Exception as exc:
        raise portable(exc) from None
    return None if call.name in ("verify", "close", "abort") else answered


@dataclass(frozen=True)
class SessionWork:
    """Everything a node needs to open one session, picklable. `host_env` holds the driver's
    values of the variables the task's `${VAR}` templates read."""

    key: str
    resources: Resources
    config: TrialConfig
    trial_id: str
    job_id: str
    session_id: str
    metadata: dict[str, Any]
    idle_ttl_sec: float | None
    use_channel: bool = True
    host_env: tuple[tuple[str, str], ...] = ()

    async def __call__(self, backend: Backend, task: Task, emit: Emit) -> None:
        scratch = Path(await run_blocking(tempfile.mkdtemp, prefix="session-", dir=scratch_root()))
        made: list[Session] = []  # the session, also when it failed to open (`on_end`)
        ended = asyncio.Event()
        error: BaseException | None = None
        cancelled = False

        def on_end(session: Session) -> None:
            made[:] = [session]
            ended.set()

        try:
            session = await open_session(
                task, config=self.config.model_copy(update={"jobs_dir": scratch / "jobs"}),
                backend=backend, job_id=self.job_id, session_id=self.session_id,
                trial_id=self.trial_id, metadata=self.metadata, idle_ttl_sec=self.idle_ttl_sec,
                on_end=on_end, environ=self.environ(), use_channel=self.use_channel,
            )  # fmt: skip
            made[:] = [session]
            _live[self.key] = session
            try:
                emit(SessionReady(session.user, session.workdir, session.remaining_sec))
                await ended.wait()
            except asyncio.CancelledError:  # the driver's abort: the session's host abort
                cancelled = True
                why = "the session was aborted: its placement was cancelled"
                ending = asyncio.ensure_future(session.abort(why))
                cancelled = await ride_out_cancels(ending) or cancelled
            finally:
                _live.pop(self.key, None)
        except asyncio.CancelledError:  # while it opened: ended as a trial ends
            cancelled = True
        except Exception as exc:  # it could not open: its result.json says so
            error = portable(exc)
        finally:
            sending = asyncio.ensure_future(self._send(made, error, scratch, emit))
            cancelled = await ride_out_cancels(sending) or cancelled
            sending.result()
        if cancelled:
            raise asyncio.CancelledError

    def environ(self) -> dict[str, str]:
        """What the task's `${VAR}` templates read here: the driver's values over the node's
        environment (which is never changed)."""
        return {**os.environ, **dict(self.host_env)}

    @staticmethod
    async def _send(
        made: list[Session], error: BaseException | None, scratch: Path, emit: Emit
    ) -> None:
        """How the session ended, its result and its folder to the driver; the scratch
        folder goes."""
        try:
            if made:
                session = made[0]
                trial_dir = session.trial_dir
                files = b""
                if await run_blocking(trial_dir.is_dir):
                    files = await run_blocking(tar_of_dir, trial_dir, ".")
                status = session.status if session.status in ("closed", "expired") else "closed"
                emit(SessionEnded(status, error))
                emit(Finished(session.result.model_copy(update={"trial_dir": ""}), files))
            elif error is not None:
                emit(SessionEnded("closed", error))
        finally:
            await run_blocking(shutil.rmtree, scratch, ignore_errors=True)
