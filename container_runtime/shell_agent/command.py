"""Running one bash command: a timeout, a process-group kill, capped output, a drain thread."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from typing import Any, Dict, Optional

OUTPUT_LIMIT_BYTES = 16 * 1024
# After a command's shell exits, its output is read this much longer (background processes
# that keep the pipe open are then left to a drain thread).
DRAIN_GRACE_SEC = 0.5
_POLL_SEC = 0.1


class CommandResult:
    """What one command did: its output (the middle cut when long), how it ended, how long."""

    def __init__(
        self,
        head: bytes,
        tail: bytes,
        total_bytes: int,
        returncode: Optional[int],
        timed_out: bool,
        held_open: bool,
        duration_sec: float,
    ) -> None:
        self.head = head
        self.tail = tail
        self.total_bytes = total_bytes
        self.returncode = returncode
        self.timed_out = timed_out
        self.held_open = held_open
        self.duration_sec = duration_sec

    @property
    def cut_bytes(self) -> int:
        """How many bytes of output were dropped between the head and the tail."""
        return self.total_bytes - len(self.head) - len(self.tail)


class _Capture:
    """Keeps the first and the last ``limit / 2`` bytes of a stream, and counts all of it."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]


def run_command(
    command: str,
    *,
    cwd: str,
    timeout_sec: float,
    shell: str = "/bin/sh",
    env: Optional[Dict[str, str]] = None,
    limit: int = OUTPUT_LIMIT_BYTES,
) -> CommandResult:
    """Run ``shell -c command`` in a new session; kill its process group at the timeout.

    stdout and stderr are merged; memory stays bounded whatever the command prints. An
    exception (SIGTERM's ``Terminated``) kills the group too: no command outlives the agent.
    """
    started = time.monotonic()
    proc = subprocess.Popen(
        [shell, "-c", command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    capture = _Capture(limit)
    timed_out = held_open = False
    try:
        os.set_blocking(fd, False)
        end = started + timeout_sec
        exited_at: Optional[float] = None
        eof = False
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while not (eof and exited_at is not None):
                now = time.monotonic()
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is None and now >= end:
                    timed_out = True
                    _kill_group(proc)
                    exited_at = time.monotonic()
                    continue
                wait = (end if exited_at is None else exited_at + DRAIN_GRACE_SEC) - now
                if wait <= 0:  # the shell is gone but something still holds its output
                    held_open = True
                    break
                if eof:  # the command closed its output but goes on
                    try:
                        proc.wait(timeout=min(wait, _POLL_SEC))
                    except subprocess.TimeoutExpired:
                        pass
                    continue
                if selector.select(timeout=min(wait, _POLL_SEC)):
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if chunk:
                        capture.add(chunk)
                    else:
                        eof = True
    finally:
        if proc.poll() is None:
            _kill_group(proc)
        if held_open:
            _drain_in_background(proc.stdout)
        else:
            proc.stdout.close()
    return CommandResult(
        head=bytes(capture.head),
        tail=bytes(capture.tail),
        total_bytes=capture.total,
        returncode=proc.returncode,
        timed_out=timed_out,
        held_open=held_open,
        duration_sec=time.monotonic() - started,
    )


def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _drain_in_background(stream: Any) -> None:
    """Keep reading (and dropping) a pipe that background processes still write to.

    Closing it would hand them SIGPIPE at their next write. The daemon thread ends at EOF,
    or with the agent.
    """

    def _drain() -> None:
        try:
            fd = stream.fileno()
            os.set_blocking(fd, True)
            while os.read(fd, 65536):
                pass
        except (OSError, ValueError):
            pass
        finally:
            stream.close()

    threading.Thread(target=_drain, name="shell-agent-drain", daemon=True).start()
