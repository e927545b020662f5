"""A command channel into a container: one exec kept open, its socket driven from asyncio.

`open_docker_channel` creates an exec of `sh -c SERVER_SCRIPT` with stdin attached, starts it
with the SDK's low-level `exec_start(socket=True)` (the hijacked HTTP connection), and hands
a duplicate of that socket to asyncio, so no thread is parked on it and the loop never blocks.
Without a TTY the engine multiplexes the exec's stdout and stderr in frames of an 8-byte
header (stream, three zero bytes, big-endian length) and the payload: `Demux` splits them,
stdout to the protocol (`sandbox/channel.py`), stderr kept (bounded) for error messages.

Only a plain socket can be handed over (a local unix socket or TCP engine); over TLS or SSH,
or when the loop cannot start (no `sh` tools in the image), `open_docker_channel` returns None
and the caller uses plain execs. Signals to a timed-out command's group go by a plain exec
(`kill_command`), which never waits for the busy loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct

from orchestrator.backends.docker import api as docker_api
from orchestrator.sandbox.channel import (
    KILL_GRACE_SEC,
    SERVER_SCRIPT,
    ChannelBrokenError,
    GroupSignaller,
    ShellChannel,
)

STDERR_KEPT = 16 << 10  # of the loop's own stderr, for messages
READ_SIZE = 1 << 16
_HEADER = struct.Struct(">BxxxL")


class Demux:
    """The engine's multiplexed exec stream, fed as it comes, split into stdout and stderr."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        """The stdout and stderr payloads completed by `data` (partial frames are kept)."""
        self._buffer += data
        out, err = bytearray(), bytearray()
        while len(self._buffer) >= _HEADER.size:
            kind, length = _HEADER.unpack_from(self._buffer)
            if len(self._buffer) < _HEADER.size + length:
                break
            payload = self._buffer[_HEADER.size : _HEADER.size + length]
            if kind == 2:
                err += payload
            elif kind in (0, 1):
                out += payload
            else:
                raise ChannelBrokenError(f"not a multiplexed exec stream (frame kind {kind})")
            del self._buffer[: _HEADER.size + length]
        return bytes(out), bytes(err)


class DockerTransport:
    """A `ChannelTransport` on the exec's socket, as asyncio streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._demux = Demux()
        self._stderr = bytearray()

    async def send(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def receive(self) -> bytes:
        while True:
            data = await self._reader.read(READ_SIZE)
            if not data:
                return b""
            out, err = self._demux.feed(data)
            if err and len(self._stderr) < STDERR_KEPT:
                self._stderr += err[: STDERR_KEPT - len(self._stderr)]
            if out:
                return out

    async def send_eof(self) -> None:
        if self._writer.can_write_eof() and not self._writer.is_closing():
            self._writer.write_eof()  # the engine closes the loop's stdin

    async def aclose(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

    def diagnostics(self) -> str:
        return self._stderr.decode("utf-8", errors="replace")


def _start_blocking(container_id: str, user: str) -> socket.socket | None:
    """Create and start the loop's exec; its socket (a duplicate, ours to close), or None
    when the engine's transport is not a plain socket."""
    api = docker_api.docker_client().api
    exec_id = api.exec_create(
        container_id, ["sh", "-c", SERVER_SCRIPT], stdin=True, stdout=True, stderr=True,
        user=user,
    )["Id"]  # fmt: skip
    hijacked = api.exec_start(exec_id, socket=True)
    raw = getattr(hijacked, "_sock", None)
    try:
        if not isinstance(raw, socket.socket) or raw.family not in (
            socket.AF_UNIX, socket.AF_INET, socket.AF_INET6,
        ):  # fmt: skip
            return None  # TLS or SSH: its bytes are not the socket's
        return raw.dup()
    finally:
        with contextlib.suppress(Exception):
            hijacked.close()
        if isinstance(raw, socket.socket):
            raw.close()  # the duplicate keeps the connection


async def open_docker_channel(
    container_id: str,
    user: str,
    signal: GroupSignaller,
    *,
    kill_grace_sec: float = KILL_GRACE_SEC,
    ready_within_sec: float = 30.0,
) -> ShellChannel | None:
    """A channel running as `user` in the container, or None when one cannot start there.

    Engine errors (the container gone) are raised as `SandboxError`s."""
    sock = await docker_api.call_once(
        f"open a channel in {container_id[:12]}", _start_blocking, container_id, user
    )
    if sock is None:
        return None
    try:
        sock.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=sock)
    except BaseException:
        sock.close()
        raise
    transport = DockerTransport(reader, writer)
    try:
        return await ShellChannel.start(
            transport, signal, kill_grace_sec=kill_grace_sec, ready_within_sec=ready_within_sec
        )
    except ChannelBrokenError:
        return None  # no sh, no /tmp, no setsid: plain execs it is
