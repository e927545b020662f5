"""The fake sandbox's process table: every exec is a process with a pid that signals reach.

An exec's work is an asyncio task: the in-sandbox timeout is an `asyncio.timeout` inside it
(exit 124, `timed_out` set only when it fired), and a signal cancels the task and is
remembered, so the exec reports 128+N as a shell would. A process outlives a caller that
stops waiting for it (as a process outlives a dropped `docker exec` client) and ends with the
sandbox. A process is its own group: the fake has no background children.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

SIGNALS = {"HUP": 1, "INT": 2, "KILL": 9, "TERM": 15}
TIMEOUT_EXIT = 124  # what `timeout` exits with when the limit fired
KILLED_EXIT = 128 + SIGNALS["KILL"]  # what `timeout -k` exits with when TERM was ignored


@dataclass
class Process:
    """One exec's work. `leader` marks a subject started by the relay's launch."""

    pid: int
    leader: bool
    task: asyncio.Task[int] | None = None
    signal: int | None = None
    timed_out: bool = False
    ignores_term: bool = False  # `trap '' TERM`: only KILL ends it
    limit: asyncio.Timeout | None = None  # the in-sandbox timeout, while it runs

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done()


class ProcessTable:
    """The live processes of one sandbox, by pid."""

    def __init__(self, *, kill_after: float = 5.0, first_pid: int = 100) -> None:
        self._next_pid = first_pid
        self._live: dict[int, Process] = {}
        self.kill_after = kill_after  # `timeout -k`: KILL this long after an ignored TERM

    def start(
        self,
        work: Callable[[Process], Awaitable[int]],
        *,
        leader: bool = False,
        timeout: float | None = None,
    ) -> Process:
        """Start `work` as a new process, bounded by `timeout` seconds from inside."""
        proc = Process(self._next_pid, leader)
        self._next_pid += 1
        proc.task = asyncio.ensure_future(self._bounded(proc, work, timeout))
        self._live[proc.pid] = proc
        proc.task.add_done_callback(lambda _task: self._live.pop(proc.pid, None))
        return proc

    @staticmethod
    async def _bounded(
        proc: Process, work: Callable[[Process], Awaitable[int]], limit: float | None
    ) -> int:
        if limit is None:
            return await work(proc)
        scope = proc.limit = asyncio.timeout(limit)
        try:
            async with scope:
                return await work(proc)
        except TimeoutError:
            if not scope.expired():
                raise  # the work's own TimeoutError, not the limit's
            proc.timed_out = True
            return KILLED_EXIT if proc.ignores_term else TIMEOUT_EXIT
        finally:
            proc.limit = None

    def ignore(self, pid: int, name: str) -> None:
        """`trap '' TERM` in process `pid`: its timeout's KILL ends it `kill_after` seconds
        past its limit (137), as `timeout -k` does."""
        proc = self._live.get(pid)
        if proc is None or name not in ("TERM", "15") or proc.ignores_term:
            return
        proc.ignores_term = True
        deadline = proc.limit.when() if proc.limit is not None else None
        if proc.limit is not None and deadline is not None:
            proc.limit.reschedule(deadline + self.kill_after)

    def pids(self) -> list[int]:
        """The live processes' pids."""
        return [p.pid for p in self._live.values() if p.alive]

    def leaders(self) -> list[Process]:
        return [p for p in self._live.values() if p.leader and p.alive]

    def alive(self, pid: int) -> bool:
        proc = self._live.get(pid)
        return proc is not None and proc.alive

    def signal(self, pid: int, name: str) -> bool:
        """Send signal `name` to `pid`; False when there is no such live process or signal."""
        proc = self._live.get(pid)
        number = SIGNALS.get(name)
        if proc is None or not proc.alive or number is None:
            return False
        if number == SIGNALS["TERM"] and proc.ignores_term:
            return True
        proc.signal = number
        assert proc.task is not None
        proc.task.cancel()
        return True

    def end_all(self) -> None:
        """The sandbox is gone: every process is killed, and an exec still waiting reports
        137, as Docker's does when its container is removed under it."""
        for proc in list(self._live.values()):
            if proc.task is not None:
                proc.signal = SIGNALS["KILL"]
                proc.task.cancel()
