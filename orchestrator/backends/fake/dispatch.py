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
    FOUND,
    STOPPED,
    Launch,
    VerifierRun,
    parse_env_file,
    parse_prepare,
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
        stop = parse_prepare(command)
        if stop is not None:
            return self._prepare(stop, state, proc)
        run = parse_verifier_run(command)
        if run is not None:
            return await self._verifier(run, state)
        return await self.sandbox.shell.run(command, state)

    def _prepare(self, stop: bool, state: ShellState, proc: Process) -> int:
        """The verifier's prepare exec: every other process killed (when asked), the
        framework's folders put back as root's (a file in their place is reported), then
        /logs/verifier and /tests emptied."""
        if stop:
            others = [p for p in self.sandbox.processes.pids() if p != proc.pid]
            for pid in others:
                self.sandbox.processes.signal(pid, False, "KILL")
            state.say(f"{STOPPED}{len(others)}\n")
        files = self.sandbox.files
        for path, mode in (("/logs", 0o755), ("/logs/agent", 0o777), ("/logs/artifacts", 0o777)):
            node = files.get(path)
            if node is not None and not node.is_dir:
                state.say(f"{FOUND}{path} was no folder: a file\n")
                files.remove(path)
            if node is not None and node.is_dir and (node.mode, node.owner) != (mode, (0, 0)):
                state.say(f"{FOUND}{path} was mode {node.mode:o} owned by {node.owner}\n")
            files.put_dir(path, mode=mode)
        for path in ("/logs/verifier", "/tests"):
            if files.get(path) is not None:
                files.remove(path, recursive=True)
        files.put_dir("/logs/verifier", mode=0o755)
        return 0

    async def _verifier(self, run: VerifierRun, state: ShellState) -> int:
        """tests/test.sh (a test's handler, else the script through the shell) with its
        output redirected, then the reward files printed as the run line's snapshot does."""
        out, err = state.out, state.err
        status = await self.sandbox.shell.run(run.redirects, state)
        if status != 0:
            return status
        handler = self.sandbox.scripts.verifier
        if handler is not None:
            status = await self._handle(handler, run.script, state)
        else:
            status = await self.sandbox.shell.run(
                f"$(command -v bash || echo sh) {run.script}", state
            )
        state.out, state.err = out, err
        for name in ("reward.json", "reward.txt"):
            node = self.sandbox.files.get(f"/logs/verifier/{name}")
            if node is None:
                continue
            if node.is_dir:
                state.say(f"{run.mark} {name} other\n")
                continue
            state.say(f"{run.mark} {name}\n{bytes(node.data[: run.cap]).hex(' ')}\n")
        state.say(f"{run.mark} end\n")
        return status

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
