"""A scripted `RelaySandbox` for the relay's tests, and what the real sandbox answers.

The fake answers each command the relay sends (`relay.commands`: the leader probe, signals,
the group check, the user's ids, the launcher, the env file's removal) by its kind and fields,
never by its shell text, with the outputs, exit codes and errors the Docker sandbox gives for
the same situation. Where a command says what its shell prints (`answer`), the fake prints
that; the rest is written down once here, and test_relay_contract.py runs the same scenarios
against the fake and the real engine, so the fake cannot drift.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from orchestrator.common.errors import SandboxError, SandboxNotFoundError
from relay.commands import (
    KILL_NO_SUCH_PROCESS,
    GroupAlive,
    Launch,
    ProbeLeader,
    RemoveFile,
    Signal,
    UserIds,
)
from relay.launcher import SCOPE_UNAVAILABLE_EXIT
from relay.protocol import Command

PID = 4242

# What the real sandbox (Debian's dash in the container) answers; test_relay_contract.py
# checks each against the engine, so the fake cannot drift from it.
SIGNAL_EXIT = {"TERM": 143, "KILL": 137}  # a leader ended by the signal ends its exec so
NO_SUCH_PROCESS = KILL_NO_SUCH_PROCESS  # `kill` of a pid or group that is gone
NOT_PERMITTED = "sh: 1: kill: Operation not permitted\n\n"  # of a group another user owns
GROUP_ALIVE = GroupAlive.answer(alive=True)  # the group check's output while the group lives
GROUP_GONE = GroupAlive.answer(alive=False)
GROUP_NOT_PERMITTED = f"{NOT_PERMITTED}rc=1\n"
USERS = {"": (1000, 1000), "root": (0, 0), "nobody": (65534, 65534)}  # "": the image's USER


def unknown_user_output(user: str) -> str:
    """What an exec as a user the image does not have prints (with exit code 126)."""
    return f"unable to find user {user}: no matching entries in passwd file\r\n"


def engine_gone() -> SandboxError:
    """What the real sandbox raises when the engine stops answering."""
    return SandboxError("exec in fake: the Docker engine did not answer (connection refused)")


def container_gone() -> SandboxNotFoundError:
    """What the real sandbox raises for an exec in a container that was removed."""
    return SandboxNotFoundError("exec in fake: not found (No such container: fake)")


@dataclass
class Out:
    """What the relay reads of an exec's result."""

    exit_code: int | None
    output: str = ""


@dataclass
class Exec:
    """One exec the relay asked for: the command as it was given (a value or plain sh)."""

    command: str | Command
    env: Mapping[str, str] | None
    user: str
    timeout_sec: float | None

    @property
    def shell(self) -> str:
        """The sh a shell backend would run for it."""
        return self.command if isinstance(self.command, str) else self.command.shell()


@dataclass
class FakeSandbox:
    """A scripted `RelaySandbox`. Every exec and upload is recorded.

    The subject (the `Launch`) returns `subject_exit` after `subject_after` seconds (never,
    when None) or when the leader is sent a signal in `leader_dies_on`; with
    `scope_unavailable` the launcher cannot record its pid and exits 125 with its launch's
    marker. While the subject runs the leader probe finds `leader`: a pid, printed as the
    probe prints one (`ProbeLeader.answer`), or a text the real probe never prints, printed as
    it is, to show the relay reads no pid from it; nothing when None or when no subject runs.
    The process group stays alive until it is sent a signal in `group_dies_on`. Once
    destroyed, every exec and upload raises as in a removed container. A command that is no
    `relay.commands` value is one the fake does not know.
    """

    leader: int | str | None = PID
    subject_after: float | None = None
    subject_exit: int | None = 0
    subject_output: str = ""
    subject_error: BaseException | None = None
    leader_dies_on: frozenset[str] = frozenset({"TERM", "KILL"})
    leader_death: Callable[[str], Out | BaseException] = lambda sig: Out(SIGNAL_EXIT[sig])
    scope_unavailable: bool = False
    signal_mode: str = "ok"  # ok | fail (exit 1) | raise | hang
    group_dies_on: frozenset[str] = frozenset({"TERM", "KILL"})
    group_check: str = "dash"  # dash | raise | odd | hang
    destroy_hangs: bool = False
    upload_error: BaseException | None = None
    users: Mapping[str, tuple[int, int]] = field(default_factory=lambda: dict(USERS))
    before_subject_returns: Callable[[], None] | None = None

    execs: list[Exec] = field(default_factory=list)
    uploads: list[tuple[str, bytes, int, tuple[int, int]]] = field(default_factory=list)
    signals: list[Signal] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    group_checks: int = 0
    pid_reads: int = 0
    destroy_calls: int = 0
    destroy_finished: bool = False
    gone: bool = False  # destroyed: the container is no more
    subject_cancelled: bool = False
    subject_started: asyncio.Event = field(default_factory=asyncio.Event)
    signal_started: asyncio.Event = field(default_factory=asyncio.Event)
    destroy_started: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._subject_end: asyncio.Future[Out] | None = None
        self._group_alive = True
        self._release = asyncio.Event()  # lets hung calls end when the test is over

    # -- the protocol -------------------------------------------------------------------------

    async def exec(
        self,
        command: str | Command,
        *,
        timeout_sec: float | None = None,
        env: Mapping[str, str] | None = None,
        user: str = "",
    ) -> Out:
        self.execs.append(Exec(command, env, user, timeout_sec))
        if self.gone:
            raise container_gone()
        match command:
            case ProbeLeader():
                return self._probe()
            case GroupAlive():
                return await self._group_check()
            case Signal():
                return await self._signal(command)
            case RemoveFile(path=path):
                self.removed.append(path)
                return Out(0)
            case UserIds():
                if user not in self.users:
                    return Out(126, unknown_user_output(user))
                return Out(0, UserIds.answer(*self.users[user]))
            case Launch():
                return await self._subject(command)
        raise AssertionError(f"the fake does not know this command: {command!r}")

    async def upload_file(
        self, path: str, data: bytes, *, mode: int = 0o600, owner: tuple[int, int] = (0, 0)
    ) -> None:
        self.uploads.append((path, data, mode, owner))
        if self.gone:
            raise container_gone()
        if self.upload_error is not None:
            raise self.upload_error

    async def destroy(self) -> None:
        self.destroy_calls += 1
        self.gone = True
        self.destroy_started.set()
        if self.destroy_hangs:
            await self._release.wait()
        self.destroy_finished = True

    # -- behaviours ---------------------------------------------------------------------------

    def _probe(self) -> Out:
        self.pid_reads += 1
        if self.leader is None or not self.subject_running:
            return Out(1)  # the probe found no leader
        if isinstance(self.leader, int):
            return Out(0, ProbeLeader.answer(self.leader))
        return Out(0, self.leader + "\n")

    async def _subject(self, launch: Launch) -> Out:
        if self.subject_error is not None:
            raise self.subject_error
        if self.scope_unavailable:
            # The launcher echoes its launch's own marker to stderr, which the exec merges.
            return Out(SCOPE_UNAVAILABLE_EXIT, f"{launch.paths.scope_marker}\n")
        loop = asyncio.get_running_loop()
        self._subject_end = end = loop.create_future()
        if self.subject_after is not None:
            loop.call_later(self.subject_after, self._end_subject, Out(self.subject_exit))
        self.subject_started.set()
        try:
            result = await end
        except asyncio.CancelledError:
            self.subject_cancelled = True
            raise
        if self.before_subject_returns is not None:
            self.before_subject_returns()
        return Out(result.exit_code, self.subject_output)

    def _end_subject(self, how: Out | BaseException) -> None:
        end = self._subject_end
        if end is None or end.done():
            return
        if isinstance(how, BaseException):
            end.set_exception(how)
        else:
            end.set_result(how)

    async def _signal(self, signal: Signal) -> Out:
        self.signals.append(signal)
        self.signal_started.set()
        sig = signal.signal
        if self.signal_mode == "hang":
            await self._release.wait()
        if self.signal_mode == "raise":
            raise engine_gone()
        if self.signal_mode == "fail":
            return Out(1, NO_SUCH_PROCESS)
        if signal.group:
            if not self._group_alive:
                return Out(1, NO_SUCH_PROCESS)
            if sig in self.group_dies_on:
                self._group_alive = False
                if sig in self.leader_dies_on:
                    self._end_subject(self.leader_death(sig))
        elif self._subject_end is not None and self._subject_end.done():
            return Out(1, NO_SUCH_PROCESS)  # the leader is gone
        elif sig in self.leader_dies_on:
            self._end_subject(self.leader_death(sig))
        return Out(0)

    async def _group_check(self) -> Out:
        self.group_checks += 1
        if self.group_check == "raise":
            raise engine_gone()
        if self.group_check == "hang":
            await self._release.wait()
        if self.group_check == "odd":
            return Out(0, GROUP_NOT_PERMITTED)
        return Out(0, GroupAlive.answer(alive=self._group_alive))

    # -- reading the record -------------------------------------------------------------------

    @property
    def subject_running(self) -> bool:
        return self._subject_end is not None and not self._subject_end.done()

    @property
    def subject_execs(self) -> list[Exec]:
        return [e for e in self.execs if isinstance(e.command, Launch)]

    def execs_of(self, kind: type[object]) -> list[Exec]:
        """The execs of one kind of command (`Signal`, `ProbeLeader`, ...), in order."""
        return [e for e in self.execs if isinstance(e.command, kind)]

    def release(self) -> None:
        """The test is over: hung calls end, and so does a subject still running."""
        self._release.set()
        self._end_subject(Out(SIGNAL_EXIT["KILL"]))
