"""A terminal in a container: one exec with a pseudo-terminal, its socket driven from asyncio.

`open_docker_terminal` creates an exec of `sh -c TERMINAL_SCRIPT` with `tty=True` and stdin
attached, starts it with the SDK's low-level `exec_start(socket=True)` (the hijacked HTTP
connection, as `channel.py` does), sizes its terminal (`exec_resize`), and hands a duplicate of
the socket to asyncio. With a TTY the engine does not multiplex: the socket carries the
terminal's bytes as they are, both ways. The script's first line names its pid (the session
the engine's TTY exec starts, which every job of the shell belongs to); it is read and dropped
here, and `close()` signals that session's processes (TERM, then KILL) by a plain exec.

Only a plain socket can be handed over (a local unix socket or TCP engine); over TLS or SSH
`open_docker_terminal` returns None.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Mapping

from orchestrator.backends.docker import api as docker_api
from orchestrator.common.errors import SandboxError, SandboxTimeoutError
from orchestrator.sandbox.terminal import TERMINAL_MARK, TERMINAL_SCRIPT

READ_SIZE = 1 << 16
START_WITHIN_SEC = 30.0
TERM_GRACE_SEC = 1.0

# Sends a signal ("TERM", "KILL") to every process of a session, by a plain exec.
SessionSignaller = Callable[[str, int], Awaitable[None]]


class DockerTerminal:
    """A `Terminal` on the exec's socket. Made by `open_docker_terminal`."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        session: int,
        signal: SessionSignaller,
        pending: bytes = b"",
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.session = session
        self._signal = signal
        self._pending = pending
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def send(self, data: bytes) -> None:
        if self._closed:
            raise SandboxError("the terminal is closed")
        self._writer.write(data)
        await self._writer.drain()

    async def receive(self) -> bytes:
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        if self._closed:
            return b""
        try:
            return await self._reader.read(READ_SIZE)
        except OSError:
            return b""

    async def close(self) -> None:
        """TERM and HUP the shell's session, KILL what is left after a grace (shorter once the
        shell has gone), close the stream."""
        if self._closed:
            return
        self._closed = True
        # TERM for the programs; HUP for the shell, which as an interactive shell ignores TERM
        # and leaves on a hangup, as when a terminal closes. The grace ends as soon as the
        # shell is gone (its stream ends); KILL then takes whatever is left.
        for name in ("TERM", "HUP", "KILL"):
            with contextlib.suppress(SandboxError, SandboxTimeoutError, OSError):
                await self._signal(name, self.session)
            if name == "HUP":
                with contextlib.suppress(TimeoutError, OSError):
                    await asyncio.wait_for(self._drain(), TERM_GRACE_SEC)
        await self.abandon()

    async def _drain(self) -> None:
        """Read and drop the terminal's output until it ends (its shell exited)."""
        while await self._reader.read(READ_SIZE):
            pass

    async def abandon(self) -> None:
        """Close the stream without a signal: its sandbox is going."""
        self._closed = True
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


def _start_blocking(
    container_id: str,
    user: str,
    cols: int,
    rows: int,
    workdir: str | None,
    env: Mapping[str, str],
) -> socket.socket | None:
    api = docker_api.docker_client().api
    exec_id = api.exec_create(
        container_id, ["sh", "-c", TERMINAL_SCRIPT], stdin=True, stdout=True, stderr=True,
        tty=True, user=user, workdir=workdir,
        environment={"TERM": "xterm", "COLUMNS": str(cols), "LINES": str(rows), **env},
    )["Id"]  # fmt: skip
    hijacked = api.exec_start(exec_id, socket=True, tty=True)
    raw = getattr(hijacked, "_sock", None)
    try:
        if not isinstance(raw, socket.socket) or raw.family not in (
            socket.AF_UNIX, socket.AF_INET, socket.AF_INET6,
        ):  # fmt: skip
            return None
        with contextlib.suppress(Exception):  # a terminal of the default size still works
            api.exec_resize(exec_id, height=rows, width=cols)
        return raw.dup()
    finally:
        with contextlib.suppress(Exception):
            hijacked.close()
        if isinstance(raw, socket.socket):
            raw.close()


async def _read_mark(reader: asyncio.StreamReader) -> tuple[int, bytes] | None:
    """The script's first line (its pid) and the bytes after it; None if the shell ended."""
    seen = bytearray()
    while True:
        start = seen.find(TERMINAL_MARK)
        end = seen.find(b"\n", start) if start >= 0 else -1
        if end >= 0:
            words = seen[start:end].split()
            try:
                return int(words[1]), bytes(seen[end + 1 :])
            except (IndexError, ValueError):
                return None
        data = await reader.read(READ_SIZE)
        if not data:
            return None
        seen += data


async def open_docker_terminal(
    container_id: str,
    user: str,
    signal: SessionSignaller,
    *,
    cols: int,
    rows: int,
    workdir: str | None = None,
    env: Mapping[str, str] | None = None,
) -> DockerTerminal | None:
    """A terminal running a shell as `user` in the container, or None when one cannot start
    there. Engine errors (the container gone) are raised as `SandboxError`s."""
    sock = await docker_api.call_once(
        f"open a terminal in {container_id[:12]}", _start_blocking, container_id, user, cols,
        rows, workdir, dict(env or {}),
    )  # fmt: skip
    if sock is None:
        return None
    try:
        sock.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=sock)
    except BaseException:
        sock.close()
        raise
    try:
        mark = await asyncio.wait_for(_read_mark(reader), START_WITHIN_SEC)
    except (TimeoutError, OSError):
        mark = None
    except BaseException:
        writer.close()
        raise
    if mark is None:
        writer.close()
        return None
    session, pending = mark
    return DockerTerminal(reader, writer, session, signal, pending)
