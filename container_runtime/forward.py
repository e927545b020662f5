"""A TCP-to-unix-socket forwarder: how an agent in a sandbox without a network reaches its
model gateway.

The host's gateway listens on a unix socket that only this sandbox has mounted; agents and
OpenAI clients want an HTTP URL. So this listens on 127.0.0.1 (the loopback every sandbox
has, even with network mode none) and pipes each connection to the socket, byte for byte.
``--daemon`` binds first, prints the port, then detaches: when the command returns the
forwarder already accepts connections.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from typing import Optional, TextIO

CHUNK = 64 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


def _handler(target: str):
    async def connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return connect


async def _serve(listener: socket.socket, target: str) -> None:
    server = await asyncio.start_server(_handler(target), sock=listener)
    async with server:
        await server.serve_forever()


def _listener(host: str, port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(512)
    return listener


def _detach() -> None:
    """Leave the caller's session and close its pipes, so the exec that started us ends."""
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def forward_main(listen: str, target: str, daemon: bool, stdout: Optional[TextIO] = None) -> int:
    host, _, port_text = listen.rpartition(":")
    listener = _listener(host or "127.0.0.1", int(port_text or 0))
    port = listener.getsockname()[1]
    out = stdout or sys.stdout
    if daemon:
        if os.fork() != 0:
            print(port, file=out, flush=True)
            os._exit(0)
        _detach()
    else:
        print(port, file=out, flush=True)
    asyncio.run(_serve(listener, target))
    return 0
