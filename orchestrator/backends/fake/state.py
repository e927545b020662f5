"""A fake shell process's state: environment, folder, user, where its output goes, `$?`.

Output goes to sinks: an exec's merged output kept in memory, an open file of the fake
filesystem (after `>` or `exec >`), or nowhere (`/dev/null`). A child shell (a script,
`sh -c`, a `$(…)`) gets a copy of the environment, as a forked process would.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from orchestrator.backends.fake.files import FakeFiles
from orchestrator.backends.fake.users import Identity


class Exit(Exception):
    """`exit N`: ends the innermost shell process (an exec, a script, a `$(…)`)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class Sink(Protocol):
    def write(self, data: bytes) -> None: ...


@dataclass
class Capture:
    """Output kept in memory: an exec's merged output, or a `$(…)`'s."""

    data: bytearray = field(default_factory=bytearray)

    def write(self, data: bytes) -> None:
        self.data += data


class Discard:
    def write(self, data: bytes) -> None:
        pass


@dataclass
class FileSink:
    """An open file in the fake filesystem."""

    files: FakeFiles
    path: str

    def write(self, data: bytes) -> None:
        self.files.append(self.path, data)


@dataclass
class ShellState:
    """One shell process: environment, folder, user, where its output goes, `$?`."""

    env: dict[str, str]
    cwd: str
    user: Identity
    out: Sink
    err: Sink
    pid: int = 1
    status: int = 0
    errexit: bool = False
    bash: bool = False  # bash rather than dash: `echo` leaves backslashes alone

    def child(self) -> ShellState:
        """The state of a child shell (a script, `sh -c`, `$(…)`): a copy of the environment."""
        return replace(self, env=dict(self.env), errexit=False)

    def say(self, text: str) -> None:
        self.out.write(text.encode())

    def complain(self, text: str) -> None:
        self.err.write(text.encode())
