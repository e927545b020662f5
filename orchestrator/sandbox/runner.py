"""Commands into one sandbox, the fast way where it can: through a command channel per user
where the sandbox has one (`channel.py`), else each as a plain exec.

A session's calls (`trials/session.py`) and a host-side agent's commands
(`trials/host_agent.py`) both run through a `CommandRunner`, so the choice, the channel's
opening and closing, and what a command that breaks its channel means (`run_judged`) live
once. Through a channel a command's stdout and stderr come apart and a timed-out one reads as
a plain exec's (`ChannelResult.exec_exit_code`); through an exec the two are one stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.sandbox.channel import ChannelSandbox, CommandChannel, run_judged
from orchestrator.sandbox.protocol import Sandbox

CHANNEL_CLOSE_SEC = 10.0  # a channel's close; the sandbox's removal ends it in any case


@dataclass(frozen=True)
class CommandOutcome:
    """One command's end: its exit code (None when it could not be read), stdout and stderr
    (through an exec, the merged output is `stdout`), each capped."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    truncated: bool
    timed_out: bool
    duration_sec: float
    channel: bool


class CommandRunner:
    """Runs commands in `sandbox`; `use_channel=False` makes every one a plain exec."""

    def __init__(self, sandbox: Sandbox, *, use_channel: bool = True) -> None:
        self.sandbox = sandbox
        self.use_channel = use_channel
        self._channels: dict[str, CommandChannel | None] = {}  # by user; None: no channel

    async def run(
        self,
        command: str | list[str],
        *,
        user: str,
        timeout_sec: float,
        env: Mapping[str, str] | None,
        cwd: str | None,
        output_cap: int,
    ) -> CommandOutcome:
        """`command` (a script for `sh -c`, or an argv) as `user` in `cwd`, stopped past
        `timeout_sec`. A sandbox that cannot run it raises `SandboxError`."""
        channel = await self._channel(user)
        if channel is not None:
            ran = await run_judged(
                channel, self.sandbox, command, timeout_sec=timeout_sec, env=env, cwd=cwd,
                output_cap=output_cap,
            )  # fmt: skip
            if channel.closed:  # the command broke it: the next command opens another
                self._channels.pop(user, None)
            return CommandOutcome(
                exit_code=ran.exec_exit_code, stdout=ran.stdout, stderr=ran.stderr,
                truncated=ran.truncated, timed_out=ran.timed_out,
                duration_sec=ran.duration_sec, channel=True,
            )  # fmt: skip
        text = command if isinstance(command, str) else shlex.join(command)
        done = await self.sandbox.exec(
            text, timeout_sec=timeout_sec, env=dict(env or {}), user=user, workdir=cwd,
            output_cap=output_cap,
        )  # fmt: skip
        return CommandOutcome(
            exit_code=done.exit_code, stdout=done.output.encode(), stderr=b"",
            truncated=done.truncated, timed_out=done.timed_out,
            duration_sec=done.duration_sec, channel=False,
        )  # fmt: skip

    async def _channel(self, user: str) -> CommandChannel | None:
        """`user`'s channel, opened on first use; None where the sandbox has none."""
        if not self.use_channel or not isinstance(self.sandbox, ChannelSandbox):
            return None
        if user not in self._channels:
            self._channels[user] = await self.sandbox.open_channel(user)
        return self._channels[user]

    async def close(self) -> None:
        """Every channel ended, its processes with it (before a verifier or teardown)."""
        channels = [c for c in self._channels.values() if c is not None]
        self._channels.clear()
        for channel in channels:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(channel.close(), CHANNEL_CLOSE_SEC)
