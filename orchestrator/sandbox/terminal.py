"""A terminal in a sandbox: one long-lived shell on a pseudo-terminal, its bytes both ways.

What tmux gives an agent, without tmux (or anything else) in the image: a shell that keeps
its state between commands (its folder, its variables, its background jobs), that a Ctrl-C
interrupts as a user's would, and whose screen a full-screen program draws. The sandbox only
carries bytes: keystrokes in, what the terminal prints out; the screen is the host's to
render (`trials/terminus.py` feeds the bytes to the `pyte` emulator).

A sandbox that can open one is a `TerminalSandbox` (an optional capability, checked with
`isinstance`, as `ChannelSandbox` is): `open_terminal(user, cols, rows)` starts the shell
(`bash` when the image has it, else `sh`) as `user` on a terminal of that size and returns a
`Terminal`, or None when it cannot (an engine transport it cannot drive). `close()` ends the
shell and every process of its session (TERM, then KILL), so nothing started at the prompt
outlives it, except what left the session on purpose (`setsid`, a daemon).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

# The shell the terminal runs. It says its pid first (one line the host reads and drops, so
# the screen never shows it): the session the host kills at close. TERM names what the host
# renders (pyte: a VT100/xterm subset).
TERMINAL_MARK = b"TRIALBOX-TERMINAL"
TERMINAL_SCRIPT = (
    "printf 'TRIALBOX-TERMINAL %s\\n' \"$$\"; "
    "if command -v bash >/dev/null 2>&1; then exec bash -i; else exec sh -i; fi"
)


def kill_session_command(session: int, signal: str) -> str:
    """`sh` text that sends `signal` to every process of `session` (read from /proc: no
    `ps` needed), ignoring those gone."""
    if not signal.isalnum():
        raise ValueError(f"not a signal's name: {signal!r}")
    sid = int(session)
    if sid <= 1:
        raise ValueError(f"not a terminal's session: {sid}")
    return (
        'for p in /proc/[0-9]*; do s=$(cat "$p/stat" 2>/dev/null) || continue; '
        "s=${s##*) }; set -- $s; "
        f'[ "$4" = {sid} ] && kill -s {signal} "${{p#/proc/}}" 2>/dev/null; done; exit 0'
    )


@runtime_checkable
class Terminal(Protocol):
    """A shell on a pseudo-terminal in the sandbox."""

    async def send(self, data: bytes) -> None:
        """Write `data` to the terminal, as typed keys."""
        ...

    async def receive(self) -> bytes:
        """The next bytes the terminal printed; b"" once the shell has ended."""
        ...

    async def close(self) -> None:
        """End the shell and its session's processes; idempotent."""
        ...


@runtime_checkable
class TerminalSandbox(Protocol):
    """A sandbox that can open terminals (optional: check with `isinstance`)."""

    async def open_terminal(
        self,
        user: str = "",
        cols: int = 160,
        rows: int = 40,
        *,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Terminal | None:
        """A terminal running a shell as `user`, or None when one cannot start here."""
        ...


__all__ = [
    "TERMINAL_MARK",
    "TERMINAL_SCRIPT",
    "Terminal",
    "TerminalSandbox",
    "kill_session_command",
]
