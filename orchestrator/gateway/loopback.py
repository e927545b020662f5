"""A slot reached from the host: a loopback TCP port that pipes each connection to the slot's
unix socket.

An agent whose loop runs on the host (a host-side agent, `trials/host_agent.py`) talks to
its model through the same slot a sandbox's forwarder reaches: same token, limits and record.
Any HTTP client can use it (an OpenAI SDK, litellm, httpx), since it is a plain
`http://127.0.0.1:<port>/v1`; the upstream key never reaches the agent, which holds only the
slot's token. The listener binds 127.0.0.1 only, on a port the kernel picks, and serves one
trial; `aclose()` stops it and cuts every connection, so nothing outlives the agent's phase.

`Loopback` is the listener: `await Loopback(socket_path).start()` returns the port.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

HOST = "127.0.0.1"
CHUNK = 64 * 1024


class Loopback:
    """Pipes each TCP connection on 127.0.0.1 to a new connection to `socket_path`."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._closing = False
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (`.../v1`)."""
        if self.port is None:
            raise RuntimeError("the loopback endpoint is not started")
        return f"http://{HOST}:{self.port}/v1"

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, upstream_writer = await asyncio.open_unix_connection(self.socket_path)
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError):
            pass  # the slot closed, or either side went: the client sees its connection end
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # Cut by `aclose`: ended quietly (Python 3.11's server logs a handler that ends
            # cancelled as an error).
        finally:
            self._pipes.discard(task)
            for end in (writer, upstream_writer):
                if end is not None:
                    end.close()

    async def aclose(self) -> None:
        """Stop listening and cut every connection. Idempotent."""
        server, self._server = self._server, None
        self._closing = True
        if server is not None:
            server.close()
        pipes = list(self._pipes)
        for pipe in pipes:
            pipe.cancel()
        for pipe in pipes:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pipe
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until `source` ends, then half-close `sink` (HTTP/1.1 keep-alive lives on)."""
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if sink.can_write_eof():
                sink.write_eof()
