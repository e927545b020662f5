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
from collections.abc import Awaitable, Callable

from orchestrator.sandbox import Sandbox
from orchestrator.sandbox.wrapper import SandboxWrapper

SAVE_WITHIN_SEC = 10.0


class GuardedSandbox(SandboxWrapper):
    """Delegates to `inner`; `destroy()` first runs `before_destroy` (bounded, once), unless
    the trial is being cancelled: a host abort removes the sandbox now, saving nothing."""

    def __init__(self, inner: Sandbox, before_destroy: Callable[[], Awaitable[None]]) -> None:
        super().__init__(inner)
        self._before_destroy = before_destroy
        self._saved: asyncio.Task[None] | None = None
        self._owner = asyncio.current_task()  # the trial's task, whose cancel is an abort

    async def destroy(self) -> None:
        try:
            aborting = self._owner is not None and self._owner.cancelling() > 0
            if self._saved is None and not self.inner.destroyed and not aborting:
                self._saved = asyncio.ensure_future(self._before_destroy())
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(self._saved), SAVE_WITHIN_SEC)
        finally:  # whatever happened while saving, the sandbox goes
            await self.inner.destroy()
