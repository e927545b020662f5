"""The fake sandbox's process table: every exec is a process with a pid that signals reach.

An exec's work is an asyncio task: the in-sandbox timeout is an `asyncio.timeout` inside it
(exit 124, `timed_out` set only when it fired), and a signal cancels the task and is
remembered, so the exec reports 128+N as a shell would. A process outlives a caller that
stops waiting for it (as a process outlives a dropped `docker exec` client) and ends with the
sandbox. Cancelling the task kills what it runs at once (`shell.py`: the real sh's run, its
children and all), so no signal is ignored or handled, and a pid here is its whole group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from signal import Signals

from orchestrator.sandbox.channel import TIMEOUT_EXIT


@dataclass
class Process:
    """One exec's work. `leader` marks a subject started by the relay's launch."""

    pid: int
    leader: bool
    task: asyncio.Task[int] = field(init=False)
    signal: int | None = None  # the signal that ended it
    timed_out: bool = False

    @property
    def exit_code(self) -> int:
        """The work's exit code, or 128+N when signal N ended it."""
        if self.task.cancelled():
            assert self.signal is not None, "only a signal cancels a process"
            return 128 + self.signal
        return self.task.result()


class ProcessTable:
    """The live processes of one sandbox, by pid."""

    def __init__(self) -> None:
        self._next_pid = 100
        self._live: dict[int, Process] = {}

    def start(
        self,
        work: Callable[[int], Awaitable[int]],
        *,
        leader: bool = False,
        timeout: float | None = None,
    ) -> Process:
        """Start `work` (given its pid) as a new process, bounded by `timeout` seconds."""
        proc = Process(self._next_pid, leader)
        self._next_pid += 1
        proc.task = asyncio.ensure_future(self._bounded(proc, work, timeout))
        self._live[proc.pid] = proc
        proc.task.add_done_callback(lambda _task: self._live.pop(proc.pid, None))
        return proc

    @staticmethod
    async def _bounded(
        proc: Process, work: Callable[[int], Awaitable[int]], limit: float | None
    ) -> int:
        scope = asyncio.timeout(limit)
        try:
            async with scope:
                return await work(proc.pid)
        except TimeoutError:
            if not scope.expired():
                raise  # the work's own TimeoutError, not the limit's
            proc.timed_out = True
            return TIMEOUT_EXIT

    def live(self) -> list[Process]:
        return [proc for proc in self._live.values() if not proc.task.done()]

    def pids(self) -> list[int]:
        return [proc.pid for proc in self.live()]

    def signal(self, pid: int, name: str) -> bool:
        """Send signal `name` to `pid`; False when there is no such live process or signal."""
        proc = self._live.get(pid)
        if proc is None or proc.task.done() or f"SIG{name}" not in Signals.__members__:
            return False
        proc.signal = Signals[f"SIG{name}"]
        proc.task.cancel()
        return True

    def end_all(self) -> None:
        """The sandbox is gone: every process is killed, and an exec still waiting reports
        137, as Docker's does when its container is removed under it."""
        for proc in self.live():
            self.signal(proc.pid, "KILL")
