"""The relay: launch a subject, then decide once how it ended.

Two different things can stop a subject. A framework timeout (the agent's time ran out) stops
only the leader, TERM then KILL, and keeps the rest of the group and the sandbox: a server the
agent started must still answer the verifier. A host abort (cancel, shutdown, a trainer's
abort) quiesces the whole group and then removes the sandbox. Whatever cannot be confirmed
fails closed: the sandbox is destroyed and nothing is scoreable. Cleanup is shielded and
bounded, so a second cancel or an error during it still ends in destroy before it propagates.

`Relay.run` runs once; when no command can run inside (every pid taken), a `HostStoppable`
sandbox is stopped from the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping

from relay.commands import (
    GroupAlive,
    GroupState,
    Launch,
    ProbeLeader,
    RemoveFile,
    Signal,
    UserIds,
)
from relay.launcher import SCOPE_UNAVAILABLE_EXIT, STATE_DIR, LaunchPaths, env_file_text
from relay.outcome import TIMEOUT_EXIT_CODE, Ending, RelayOutcome, RelayPolicy
from relay.protocol import Command, ExecOutput, HostStoppable, RelaySandbox

log = logging.getLogger(__name__)


class Relay:
    """Supervises one subject in one sandbox. `run()` once; read `outcome` afterwards.

    `outcome` is set even when `run()` ends by cancellation, so the caller can tell an abort
    that quiesced from one that destroyed.
    """

    def __init__(
        self,
        sandbox: RelaySandbox,
        *,
        policy: RelayPolicy | None = None,
        state_dir: str = STATE_DIR,
        stdout: str = "/logs/agent/stdout.txt",
        stderr: str = "/logs/agent/stderr.txt",
    ) -> None:
        self.sandbox = sandbox
        self.policy = policy or RelayPolicy()
        self.paths = LaunchPaths(state_dir, secrets.token_hex(8), stdout, stderr)
        self.outcome: RelayOutcome | None = None
        self._subject: asyncio.Task[ExecOutput] | None = None
        self._pid: int | None = None
        self._destroy_task: asyncio.Task[None] | None = None

    # -- launch -------------------------------------------------------------------------------

    async def _stage_env(self, env: Mapping[str, str], user: str) -> None:
        """Upload the credentials as a 0600 file owned by whoever the subject will run as."""
        owner = (0, 0)
        if user not in ("root", "0"):  # "" is the image's own USER, which may not be root
            found = UserIds.read(await self._bounded_exec(UserIds(), user=user))
            if found is None:
                raise RuntimeError(f"cannot resolve the uid/gid of user {user or '(default)'!r}")
            owner = found
        await self.sandbox.upload_file(
            self.paths.env_file, env_file_text(env), mode=0o600, owner=owner
        )

    async def _bounded_exec(
        self, command: Command, *, user: str = "root", within: float | None = None
    ) -> ExecOutput:
        """A short exec whose host-side wait never outlasts `within` (the budget left)."""
        limit = self.policy.signal_timeout if within is None else max(0.1, within)
        return await asyncio.wait_for(
            self.sandbox.exec(command, timeout_sec=limit, user=user), limit + 1.0
        )

    async def _remove_env_file(self) -> None:
        with contextlib.suppress(Exception):
            await self._bounded_exec(RemoveFile(self.paths.env_file))

    async def _read_pid(self, within: float) -> None:
        """Learn the leader's pid, checked in the sandbox (see `leader_probe_script`).

        It is read only when a signal is needed, which saves an exec per trial; the check makes
        a rewritten pid file harmless.
        """
        deadline = time.monotonic() + within
        while self._pid is None and not (self._subject is not None and self._subject.done()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            with contextlib.suppress(Exception):
                got = await self._bounded_exec(
                    ProbeLeader(self.paths), within=min(self.policy.signal_timeout, remaining)
                )
                self._pid = ProbeLeader.read(got)
                if self._pid is not None:
                    return
            if time.monotonic() + self.policy.poll_interval >= deadline:
                return
            await asyncio.sleep(self.policy.poll_interval)

    # -- the run ------------------------------------------------------------------------------

    async def run(
        self,
        command: str,
        *,
        timeout_sec: float,
        env: Mapping[str, str] | None = None,
        user: str = "",
    ) -> RelayOutcome:
        """Run `command` as the subject under a framework timeout of `timeout_sec`."""
        if self._subject is not None:
            raise RuntimeError("a Relay launches once; make a new one")
        try:
            if env:
                await self._stage_env(env, user)
            launch = Launch(self.paths, command, has_env=bool(env))
            self._subject = asyncio.ensure_future(self.sandbox.exec(launch, user=user))
        except BaseException:
            if env:
                await asyncio.shield(self._remove_env_file())
            raise
        try:
            await asyncio.wait({self._subject}, timeout=timeout_sec)
        except asyncio.CancelledError:
            self.outcome = await self._cleanup(self._host_abort, cancelled=True)
            raise
        if self._subject.done():
            self.outcome = await self._cleanup(self._ended_by_itself, cancelled=False)
        else:
            self.outcome = await self._cleanup(
                lambda: self._stop_leader(timeout_sec), cancelled=False
            )
        return self.outcome

    async def _cleanup(
        self, step: Callable[[], Awaitable[RelayOutcome]], *, cancelled: bool
    ) -> RelayOutcome:
        """Run a cleanup step shielded; any error or a (second) cancel ends in destroy."""
        task = asyncio.ensure_future(step())
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.cancel()
            self.outcome = RelayOutcome(
                Ending.ABORTED, sandbox_destroyed=True, detail="cancelled during cleanup"
            )
            await self._destroy("a cancel arrived during cleanup")
            raise
        except Exception as exc:
            log.warning("relay cleanup failed, destroying the sandbox: %r", exc)
            await self._destroy(f"cleanup failed: {exc!r}")
            ending = Ending.ABORTED if cancelled else Ending.INFRA_FAILURE
            return RelayOutcome(ending, sandbox_destroyed=True, detail=f"cleanup failed: {exc!r}")

    async def _ended_by_itself(self) -> RelayOutcome:
        assert self._subject is not None
        try:
            result = self._subject.result()
        except Exception as exc:
            await self._destroy(f"the subject's exec failed: {exc!r}")
            return RelayOutcome(
                Ending.INFRA_FAILURE, sandbox_destroyed=True, detail=f"exec failed: {exc!r}"
            )
        if result.exit_code == SCOPE_UNAVAILABLE_EXIT and self.paths.scope_marker in (
            result.output or ""
        ):
            await self._destroy("scope unavailable")
            return RelayOutcome(
                Ending.INFRA_FAILURE,
                sandbox_destroyed=True,
                detail="scope unavailable: the launcher could not record the subject's pid "
                "or read its credentials file; the subject did not run",
            )
        if result.exit_code is None:
            await self._destroy("the subject's exit code could not be read")
            return RelayOutcome(
                Ending.INFRA_FAILURE, sandbox_destroyed=True, detail="exit code unreadable"
            )
        return RelayOutcome(Ending.EXITED, exit_code=result.exit_code)

    # -- framework timeout: stop only the leader ----------------------------------------------

    async def _signal(self, signal: Signal, *, within: float | None = None) -> bool:
        """Send one signal to the leader or its group; False when it could not be sent."""
        try:
            got = await self._bounded_exec(signal, within=within)
        except Exception as exc:
            log.warning("relay could not send %s: %r", signal.shell(), exc)
            return False
        return got.exit_code == 0

    def _subject_confirmed_gone(self) -> bool:
        """Only an exec that returned cleanly, with an exit code, confirms the leader's end."""
        subject = self._subject
        if subject is None or not subject.done() or subject.cancelled():
            return False
        if subject.exception() is not None:
            return False
        return subject.result().exit_code is not None

    async def _stop_leader(self, agent_timeout: float) -> RelayOutcome:
        started = time.monotonic()
        reserve = self.policy.destroy_reserve(agent_timeout)
        budget_end = started + self.policy.stop_budget(agent_timeout) - reserve
        assert self._subject is not None
        # Every pid taken: no probe or `kill` could start inside, and trying would only spend
        # the graces; the host's instant reading decides, and the host stops them at once.
        host_tried = await self._no_pid_left()
        if host_tried:
            stopped = await self._stop_from_host(started)
            if stopped is not None:
                return stopped
        await self._read_pid(within=max(0.0, min(budget_end - time.monotonic(), 10.0)))
        if self._subject_confirmed_gone():
            return self._timed_out(started, "the leader ended by itself during its stop")
        if self._pid is not None:
            for signal, grace in (
                ("TERM", self.policy.term_grace),
                ("KILL", self.policy.kill_grace),
            ):
                wait_until = min(time.monotonic() + grace, budget_end)
                if wait_until <= time.monotonic():
                    break
                await self._signal(Signal(signal, self._pid), within=wait_until - time.monotonic())
                # Only the exec's return confirms the leader is gone: a vanished pid is not proof.
                await asyncio.wait({self._subject}, timeout=max(0.0, wait_until - time.monotonic()))
                if self._subject.done():
                    if not self._subject_confirmed_gone():
                        break  # the exec failed: nothing is confirmed, fail closed below
                    return self._timed_out(started, f"leader stopped by {signal}")
        stopped = None if host_tried else await self._stop_from_host(started)
        if stopped is not None:
            return stopped
        await self._destroy("the leader's stop could not be confirmed", deadline=reserve)
        return RelayOutcome(
            Ending.INFRA_FAILURE,
            sandbox_destroyed=True,
            stop_sec=time.monotonic() - started,
            detail="the leader's stop could not be confirmed; the sandbox was destroyed",
        )

    def _timed_out(self, started: float, detail: str) -> RelayOutcome:
        return RelayOutcome(
            Ending.TIMEOUT,
            exit_code=TIMEOUT_EXIT_CODE,
            stop_sec=time.monotonic() - started,
            detail=detail,
        )

    async def _no_pid_left(self) -> bool:
        """The sandbox's host-side pid reading says every pid is taken; False when it has
        none, or it fails (then the stop goes the usual way)."""
        if not isinstance(self.sandbox, HostStoppable):
            return False
        try:
            return await asyncio.wait_for(self.sandbox.pids_exhausted(), self.policy.signal_timeout)
        except Exception as exc:
            log.warning("relay could not read the sandbox's pids from the host: %r", exc)
            return False

    async def _stop_from_host(self, started: float) -> RelayOutcome | None:
        """When no command runs inside (pids exhausted), stop every process from the host, if
        the sandbox can, within `policy.host_stop` of its own: the sandbox lives on for the
        verifier. None when not."""
        if not isinstance(self.sandbox, HostStoppable) or self._subject is None:
            return None
        end = time.monotonic() + self.policy.host_stop
        try:
            stopped = await asyncio.wait_for(
                self.sandbox.stop_all_from_host(), self.policy.host_stop
            )
        except Exception as exc:
            log.warning("relay could not stop the sandbox's processes from the host: %r", exc)
            return None
        if not stopped:
            return None
        await asyncio.wait({self._subject}, timeout=max(0.0, end - time.monotonic()))
        if not self._subject_confirmed_gone():
            return None
        return self._timed_out(
            started,
            "every pid the sandbox allows was taken, so no command could run in it: every "
            "process was killed from the host",
        )

    # -- host abort: quiesce the whole group, then settle -------------------------------------

    async def _group_state(self) -> GroupState:
        assert self._pid is not None
        try:
            return GroupAlive.read(await self._bounded_exec(GroupAlive(self._pid)))
        except Exception:
            return GroupState.UNKNOWN

    async def _quiet_within(self, seconds: float) -> GroupState:
        deadline = time.monotonic() + seconds
        while True:
            state = await self._group_state()
            if state is not GroupState.ALIVE or time.monotonic() >= deadline:
                return state
            await asyncio.sleep(self.policy.poll_interval)

    async def _host_abort(self) -> RelayOutcome:
        started = time.monotonic()
        assert self._subject is not None
        if self._subject.done():
            # It had already ended on its own when the cancel arrived: report that, tear nothing.
            with contextlib.suppress(Exception):
                exit_code = self._subject.result().exit_code
                if exit_code is not None and exit_code != SCOPE_UNAVAILABLE_EXIT:
                    return RelayOutcome(Ending.EXITED, exit_code=exit_code)
        state = GroupState.UNKNOWN
        await self._read_pid(within=self.policy.signal_timeout)
        if self._pid is not None:
            for signal, quiet in (
                ("TERM", self.policy.abort_term_quiet),
                ("KILL", self.policy.abort_kill_quiet),
            ):
                await self._signal(Signal(signal, self._pid, group=True))
                state = await self._quiet_within(quiet)
                if state is not GroupState.ALIVE:
                    break
        detail = {
            GroupState.GONE: "group quiesced",
            GroupState.ALIVE: "group still alive after KILL",
            GroupState.UNKNOWN: "group state unknown",
        }[state]
        await self._destroy(f"host abort ({detail})")
        return RelayOutcome(
            Ending.ABORTED,
            sandbox_destroyed=True,
            stop_sec=time.monotonic() - started,
            detail=detail,
        )

    # -- the last resort ----------------------------------------------------------------------

    async def _destroy(self, why: str, *, deadline: float | None = None) -> None:
        """Destroy the sandbox within a deadline; a cancel meanwhile waits for it first.

        Called again (a second cancel during cleanup), it waits for the same destroy.
        """
        if self._destroy_task is None:
            log.info("relay destroys the sandbox: %s", why)
            if self._subject is not None and not self._subject.done():
                self._subject.cancel()
            self._destroy_task = asyncio.ensure_future(self.sandbox.destroy())
        destroy = self._destroy_task
        limit = self.policy.destroy_deadline if deadline is None else max(deadline, 1.0)
        end = time.monotonic() + limit
        cancelled = False
        while not destroy.done() and time.monotonic() < end:
            try:
                await asyncio.wait({destroy}, timeout=end - time.monotonic())
            except asyncio.CancelledError:
                cancelled = True  # finish (or time out) the destroy first, then propagate
        if not destroy.done():
            log.error("relay: destroy did not finish within %.1f s", limit)
        elif not destroy.cancelled() and destroy.exception() is not None:
            log.error("relay: destroy failed: %r", destroy.exception())
        if cancelled:
            raise asyncio.CancelledError
