"""What the relay needs from a sandbox, and nothing more: exec, upload a file, destroy.

The orchestrator's Docker sandbox satisfies it; a fake satisfies it in unit tests. The relay
imports nothing of trialbox's, so this protocol is its whole view of the world.

`RelaySandbox` is that view (its commands are `Command` values or plain sh); `HostStoppable`
the sandbox that can also stop every process from the host when nothing can run inside.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable


class Command(Protocol):
    """A command of the framework's, as a value (`relay.commands`, `orchestrator.sandbox.
    commands`): a shell backend runs `shell()` under `sh -c`, another answers it by kind."""

    def shell(self) -> str:
        """The command in POSIX sh."""
        ...


class ExecOutput(Protocol):
    """The part of an exec's result the relay reads."""

    @property
    def exit_code(self) -> int | None: ...

    @property
    def output(self) -> str: ...


@runtime_checkable
class HostStoppable(Protocol):
    """A sandbox whose processes can be stopped from outside, without an exec inside."""

    async def pids_exhausted(self) -> bool:
        """The host's instant reading: every pid the sandbox allows is taken, so no command
        can start inside it. False when it is not, or cannot be told at once."""
        ...

    async def stop_all_from_host(self) -> bool:
        """Kill every process but PID 1; False when it could not."""
        ...


class RelaySandbox(Protocol):
    """A sandbox the relay can drive."""

    async def exec(
        self,
        command: str | Command,
        *,
        timeout_sec: float | None = None,
        env: Mapping[str, str] | None = None,
        user: str = "",
    ) -> ExecOutput:
        """Run `sh -c command` (a `Command` as its `shell()`) and wait for it to end."""
        ...

    async def upload_file(
        self, path: str, data: bytes, *, mode: int = 0o600, owner: tuple[int, int] = (0, 0)
    ) -> None:
        """Write one file inside the sandbox with this mode and owner (uid, gid)."""
        ...

    async def destroy(self) -> None:
        """Remove the sandbox; idempotent."""
        ...
