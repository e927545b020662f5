"""What an exec runs in a fake sandbox: trialbox's own commands emulated, a test's handler,
or the shell.

The relay's launcher is emulated step by step as its script would run (record the pid, source
and delete the credentials file, redirect output, run the subject), failing with the scope
marker and 125 where the script would; its leader probe is answered from the process table.
A test's `agent` handler stands in for the subject, its `verifier` for tests/test.sh; every
other command runs through the shell.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from container_runtime.paths import RUNTIME_CHECK
from orchestrator.backends.fake.framework import (
    Launch,
    parse_env_file,
    parse_probe,
    parse_verifier_run,
)
from orchestrator.backends.fake.processes import Process
from orchestrator.backends.fake.scripting import ExecCall, Handler
from orchestrator.backends.fake.state import ShellState
from relay.launcher import SCOPE_UNAVAILABLE_EXIT

if TYPE_CHECKING:
    from orchestrator.backends.fake.sandbox import FakeSandbox


class Dispatcher:
    """Decides, for each exec of one sandbox, what runs."""

    def __init__(self, sandbox: FakeSandbox) -> None:
        self.sandbox = sandbox

    async def run(
        self, command: str, launch: Launch | None, state: ShellState, proc: Process
    ) -> int:
        """Run one exec's command as process `proc`."""
        state.pid = proc.pid
        if launch is not None:
            return await self._launch(launch, state, proc)
        if command == RUNTIME_CHECK:  # the runtime "works" unless the image has none
            return 0 if self.sandbox.has_runtime else 127
        pid_file = parse_probe(command)
        if pid_file is not None:
            return self._answer_probe(pid_file, state)
        run = parse_verifier_run(command) if self.sandbox.scripts.verifier is not None else None
        if run is not None and self.sandbox.scripts.verifier is not None:
            status = await self.sandbox.shell.run(run.redirects, state)
            if status != 0:
                return status
            return await self._handle(self.sandbox.scripts.verifier, run.script, state)
        return await self.sandbox.shell.run(command, state)

    async def _handle(self, handler: Handler, command: str, state: ShellState) -> int:
        status = await handler(self.sandbox, ExecCall(command, state, self.sandbox.shell))
        return 0 if status is None else status

    async def _launch(self, launch: Launch, state: ShellState, proc: Process) -> int:
        """The relay's launcher: record the pid, source the credentials, redirect, run."""
        who, files = state.user.who, self.sandbox.files
        try:
            files.mkdir(launch.state_dir, who, parents=True)
            files.append(files.open_for_write(launch.pid_file, who), b"%d\n" % proc.pid)
            if launch.env_file is not None:
                state.env.update(parse_env_file(files.read(launch.env_file, who).decode()))
        except OSError:
            state.complain(launch.marker + "\n")
            return SCOPE_UNAVAILABLE_EXIT
        finally:
            if launch.env_file is not None:
                with contextlib.suppress(OSError):
                    files.remove(launch.env_file, who)
        status = await self.sandbox.shell.run(launch.redirects, state)
        if status != 0:
            return status
        if self.sandbox.scripts.agent is not None:
            return await self._handle(self.sandbox.scripts.agent, launch.subject, state)
        return await self.sandbox.shell.run(launch.subject, state.child())

    def _answer_probe(self, pid_file: str, state: ShellState) -> int:
        """The leader's pid, as the relay's checked probe prints it: the pid file's, if that
        is a live leader, else the one live leader; none or two is no answer."""
        leaders = [p.pid for p in self.sandbox.processes.leaders()]
        try:
            guess = self.sandbox.files.read(pid_file).decode().strip()
        except OSError:
            guess = ""
        if guess.isdigit() and int(guess) in leaders:
            state.say(f"{guess}\n")
        elif len(leaders) == 1:
            state.say(f"{leaders[0]}\n")
        else:
            return 3 if leaders else 1
        return 0
