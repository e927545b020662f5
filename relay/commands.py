"""The relay's in-sandbox commands as values: what each one asks, and how it reads back.

A backend renders a command with `shell()` and runs it under `sh -c` (Docker, the fake
backend); the relay's own test double answers it by its kind with no shell at all. Each
command's rendering, the output a shell prints for it and the reading of that output live
together here, so a test double is tied to the meaning, never to the wording.

`Launch` starts the subject (`relay.launcher`'s script); `ProbeLeader` finds its checked pid;
`Signal` sends one signal to the leader or its group; `GroupAlive` asks whether the group is
still there (`GroupState`); `UserIds` resolves the exec's user; `RemoveFile` removes one file.
"""

from __future__ import annotations

import enum
import shlex
from dataclasses import dataclass

from relay.launcher import LaunchPaths, launcher_script, leader_probe_script
from relay.protocol import ExecOutput


class GroupState(enum.Enum):
    """Is the process group still there? `UNKNOWN` is never read as `GONE`."""

    ALIVE = "alive"
    GONE = "gone"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Launch:
    """Make `subject` the process-group leader with a recorded pid, its credentials sourced
    from the env file when `has_env`, its output to the paths' files."""

    paths: LaunchPaths
    subject: str
    has_env: bool = False

    def shell(self) -> str:
        return launcher_script(self.paths, self.subject, has_env=self.has_env)


@dataclass(frozen=True)
class ProbeLeader:
    """Print the subject leader's pid, checked in /proc (see `leader_probe_script`)."""

    paths: LaunchPaths

    def shell(self) -> str:
        return leader_probe_script(self.paths)

    @staticmethod
    def answer(pid: int) -> str:
        """What the probe prints when it found the leader."""
        return f"{pid}\n"

    @staticmethod
    def read(got: ExecOutput) -> int | None:
        text = (got.output or "").strip()
        if got.exit_code == 0 and text.isdigit() and int(text) > 1:
            return int(text)
        return None


@dataclass(frozen=True)
class Signal:
    """Send `signal` (a name: TERM, KILL) to the leader `pid`, or to its whole group."""

    signal: str
    pid: int
    group: bool = False

    def shell(self) -> str:
        return f"kill -{self.signal} {'-' if self.group else ''}{self.pid}"


# What `kill` prints for a pid or group that is gone (dash's words, which busybox and bash
# share in substance); `GroupAlive.read` looks for the phrase, case aside.
NO_SUCH_PROCESS = "kill: No such process"
# dash's whole message for it under `sh -c` (a blank line follows, dash's own habit).
KILL_NO_SUCH_PROCESS = f"sh: 1: {NO_SUCH_PROCESS}\n\n"


@dataclass(frozen=True)
class GroupAlive:
    """Whether the process group led by `pid` still has a process in it."""

    pid: int

    def shell(self) -> str:
        return f"kill -0 -{self.pid} 2>&1; echo rc=$?"

    @staticmethod
    def answer(alive: bool) -> str:
        """What the check prints while the group lives, or once it is gone."""
        return "rc=0\n" if alive else f"{KILL_NO_SUCH_PROCESS}rc=1\n"

    @staticmethod
    def read(got: ExecOutput) -> GroupState:
        text = (got.output or "").lower()
        if got.exit_code != 0 or "rc=" not in text:
            return GroupState.UNKNOWN
        if "rc=0" in text:
            return GroupState.ALIVE
        return GroupState.GONE if NO_SUCH_PROCESS.lower() in text else GroupState.UNKNOWN


@dataclass(frozen=True)
class UserIds:
    """The numeric uid and gid of the exec's own user (run with `user=` set)."""

    def shell(self) -> str:
        return "id -u; id -g"

    @staticmethod
    def answer(uid: int, gid: int) -> str:
        return f"{uid}\n{gid}\n"

    @staticmethod
    def read(got: ExecOutput) -> tuple[int, int] | None:
        numbers = (got.output or "").split()
        if got.exit_code != 0 or len(numbers) != 2 or not all(n.isdigit() for n in numbers):
            return None
        return int(numbers[0]), int(numbers[1])


@dataclass(frozen=True)
class RemoveFile:
    """Remove one file if it is there (`rm -f`)."""

    path: str

    def shell(self) -> str:
        return f"rm -f {shlex.quote(self.path)}"
