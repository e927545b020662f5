"""How a test scripts a fake backend: handlers for the agent and the verifier, and faults.

A handler replaces a command the fake would otherwise run through its shell: `agent` runs
in place of the relay's subject (after the launcher recorded the pid, sourced the
credentials and redirected output to /logs/agent), `verifier` in place of tests/test.sh
(after its output went to /logs/verifier/test-stdout.txt). It may write files
(`sandbox.files`), run vocabulary (`await call.sh(...)`), print, sleep, wait on an event, and
returns an exit code (None is 0). Faults are what a real engine cannot produce on demand.

`Scripts` holds a test's `agent` and `verifier` handlers (each called with an `ExecCall`);
`Faults` the faults.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.backends.fake.shell import Shell
from orchestrator.backends.fake.state import ShellState
from orchestrator.backends.fake.users import Identity
from orchestrator.sandbox import Health

if TYPE_CHECKING:
    from orchestrator.backends.fake.sandbox import FakeSandbox


@dataclass
class ExecCall:
    """One exec handed to a handler: what was asked, and the shell process to act in."""

    command: str
    state: ShellState
    shell: Shell

    @property
    def env(self) -> dict[str, str]:
        """The process's environment (for the agent: with the credentials sourced)."""
        return self.state.env

    @property
    def user(self) -> Identity:
        return self.state.user

    @property
    def workdir(self) -> str:
        return self.state.cwd

    def print(self, text: str) -> None:
        """Write to the process's standard output (where the framework redirected it)."""
        self.state.say(text)

    async def sh(self, command: str) -> int:
        """Run vocabulary in this process, as this user, with this environment."""
        return await self.shell.run(command, self.state)


Handler = Callable[["FakeSandbox", ExecCall], Awaitable[int | None]]


@dataclass(frozen=True)
class Faults:
    """Failures to inject; each raises `SandboxError` (`ImageBuildError` for a build)."""

    build_fails: bool = False
    create_fails: bool = False
    exec_fails_on: str | None = None  # an exec whose command contains this raises
    download_fails: bool = False
    destroy_fails: bool = False  # the sandbox stays, listed as a leftover
    leader_ignores_term: bool = False  # a timed-out agent needs KILL
    # What the engine says of the sandbox from its start (an OOM, a kill from outside); a
    # handler changes it mid-trial through `sandbox.engine_health`. While it says every
    # pid is taken, no exec can start (126) until `stop_all_from_host` frees them.
    health: Health | None = None


@dataclass(frozen=True)
class Scripts:
    """Everything a test scripted, handed from the backend to each sandbox it makes."""

    agent: Handler | None = None
    verifier: Handler | None = None
    faults: Faults = Faults()
