"""The sandbox as the relay sees it: before the relay fails closed and destroys it, the
engine's account of it is read and its /logs are saved.

An infra-ended agent would otherwise leave nothing to look at, and its category could not be
judged any more once the sandbox is gone. Both steps need no exec inside (an archive copy and
the engine's events), so they work in a sandbox that can no longer run a command.

`GuardedSandbox` wraps the trial's sandbox; on a host abort (the trial cancelled) it saves
nothing and the sandbox goes at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from orchestrator.sandbox import Capabilities, ExecResult, Health, Sandbox
from orchestrator.sandbox.commands import SandboxCommand

SAVE_WITHIN_SEC = 10.0


class GuardedSandbox:
    """Delegates to `inner`; `destroy()` first runs `before_destroy` (bounded, once), unless
    the trial is being cancelled: a host abort removes the sandbox now, saving nothing."""

    def __init__(self, inner: Sandbox, before_destroy: Callable[[], Awaitable[None]]) -> None:
        self.inner = inner
        self._before_destroy = before_destroy
        self._saved: asyncio.Task[None] | None = None
        self._owner = asyncio.current_task()  # the trial's task, whose cancel is an abort

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @property
    def destroyed(self) -> bool:
        return self.inner.destroyed

    async def exec(
        self,
        command: SandboxCommand,
        *,
        timeout_sec: float | None = None,
        env: Mapping[str, str] | None = None,
        user: str = "",
        workdir: str | None = None,
        output_cap: int | None = None,
    ) -> ExecResult:
        return await self.inner.exec(
            command, timeout_sec=timeout_sec, env=env, user=user, workdir=workdir,
            output_cap=output_cap,
        )  # fmt: skip

    async def upload(self, tar_bytes: bytes, path: str = "/") -> None:
        await self.inner.upload(tar_bytes, path)

    async def upload_file(
        self, path: str, data: bytes, *, mode: int = 0o600, owner: tuple[int, int] = (0, 0)
    ) -> None:
        await self.inner.upload_file(path, data, mode=mode, owner=owner)

    async def download(self, path: str, dest: Path, *, file_cap: int) -> list[str]:
        return await self.inner.download(path, dest, file_cap=file_cap)

    async def health(self, *, pids: bool = False) -> Health:
        return await self.inner.health(pids=pids)

    async def pids_exhausted(self) -> bool:
        return await self.inner.pids_exhausted()

    async def stop_all_from_host(self) -> bool:
        return await self.inner.stop_all_from_host()

    async def destroy(self) -> None:
        try:
            aborting = self._owner is not None and self._owner.cancelling() > 0
            if self._saved is None and not self.inner.destroyed and not aborting:
                self._saved = asyncio.ensure_future(self._before_destroy())
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(self._saved), SAVE_WITHIN_SEC)
        finally:  # whatever happened while saving, the sandbox goes
            await self.inner.destroy()
