"""A `ShellChannel` on a local `sh` (a subprocess of the tests, its own session), so the loop's
protocol, its process groups and its timeouts are tested without an engine."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from orchestrator.sandbox.channel import SERVER_SCRIPT, ShellChannel


class LocalTransport:
    """The loop's stdin and stdout as a subprocess's pipes; its stderr kept."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self._stderr = b""
        assert process.stderr is not None
        self._errors = asyncio.create_task(process.stderr.read())

    @classmethod
    async def start(cls, script: str = SERVER_SCRIPT) -> LocalTransport:
        process = await asyncio.create_subprocess_exec(
            "sh", "-c", script,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        return cls(process)

    async def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        await self.process.stdin.drain()

    async def receive(self) -> bytes:
        assert self.process.stdout is not None
        return await self.process.stdout.read(1 << 16)

    async def send_eof(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    async def aclose(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            if self.process.returncode is None:
                await asyncio.wait_for(self.process.wait(), 5)
        with contextlib.suppress(asyncio.CancelledError, Exception):
            self._stderr = await asyncio.wait_for(self._errors, 1)

    def diagnostics(self) -> str:
        return self._stderr.decode(errors="replace")


async def local_signal(name: str, groups: list[int]) -> None:
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, getattr(signal, f"SIG{name}"))


async def open_local_channel(kill_grace_sec: float = 0.5) -> tuple[ShellChannel, LocalTransport]:
    transport = await LocalTransport.start()
    channel = await ShellChannel.start(transport, local_signal, kill_grace_sec=kill_grace_sec)
    return channel, transport
