"""A command channel: many short commands through one long-lived stream into a sandbox.

An engine exec costs tens of milliseconds (Docker: about 68 ms for `true`), which dominates a
trainer's episode of many short commands. A channel pays it once: a single exec runs
`SERVER_SCRIPT`, a loop in plain POSIX `sh` (with `setsid`, `mkfifo`, `head`, `cat`, `wc`,
`mktemp`: coreutils/util-linux or busybox; no python), and each command is one request
and one reply on its open stream.

Each command runs in a process group of its own (`setsid`), with stdin `/dev/null`, its
stdout and stderr each kept to the cap (plus one byte, which tells the host it was cut) and the
rest drained, so the command never sees a broken pipe and nothing past the cap is stored (the
drain starts with the shell's `read` up to the first newline past the cap, byte by byte, so an
output of megabytes without a newline past its cap drains slowly; a `cat` is spawned only for an
output that was cut, which keeps a command's cost to four `exec`s in the sandbox). It runs in
the background of a non-interactive shell, so it starts with SIGINT and SIGQUIT ignored. A
command's reply comes when it has exited *and* its outputs have closed, as with a plain exec
(a background child holding its stdout keeps it open). Its timeout is the host's: past it the
host stops the whole group (TERM, then KILL after a grace) through `GroupSignaller` (a plain
exec, outside the busy loop); `timed_out` is true only then. On `close()` (end of stdin) the
loop kills every group it started and removes its folder; the host kills what is left (the
loop, the groups it saw start) through the signaller when the loop does not end in time.

The wire, host to sandbox (one request is two lines; bytes outside `_SAFE` as `\\0NNN`, which
`printf '%b'` turns back): `HELLO` (sent once, before the loop says anything), then
`RUN <id> <keep>` and the command's script. Sandbox to host: `READY <pid>`,
`STARTED <id> <pgid>`, `DONE <id> <exit> <stdout bytes> <stderr bytes>` followed by exactly
those bytes; or `FAIL <id>` (the script could not be written). `encode_request`,
`command_script` and `ReplyParser` are pure and tested without an engine (tests/sandbox/).

`ShellChannel` drives the protocol over any `ChannelTransport` (Docker's hijacked exec socket,
or a local `sh` in tests). A sandbox that can open channels is a `ChannelSandbox` (an optional
capability, checked with `isinstance`); its `open_channel(user)` returns None when a channel
cannot start (no `sh` tools, an engine transport it cannot drive), and the caller falls back to
`Sandbox.exec`. A channel that breaks mid-command raises `ChannelBrokenError`; open another or
fall back.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from orchestrator.common.errors import SandboxError, SandboxTimeoutError
from orchestrator.sandbox.protocol import Health

DEFAULT_OUTPUT_CAP = 1 << 20  # bytes of stdout, and of stderr, a reply carries by default
KILL_GRACE_SEC = 2.0  # between the TERM and the KILL of a timed-out command's group
REPLY_BACKSTOP_SEC = 30.0  # after the KILL (or for STARTED): no reply means a broken channel

# The loop. It says nothing before the host's first line (HELLO), so no reply byte can arrive
# while the engine's HTTP answer is still being read. `set -f` around the header's split: no
# globbing. Groups whose members are all gone are forgotten before each command.
SERVER_SCRIPT = r"""IFS= read -r hello || exit 0
d=$(mktemp -d /tmp/trialbox-channel.XXXXXX) || exit 111
for t in setsid mkfifo head cat wc; do
  command -v "$t" >/dev/null 2>&1 || { rm -rf "$d"; echo "trialbox-channel: no $t" >&2; exit 112; }
done
groups=
trap 'for g in $groups; do kill -s KILL -- "-$g" 2>/dev/null; done; rm -rf "$d"' EXIT
mkfifo "$d/o" "$d/e" || exit 113
printf 'READY %s\n' "$$"
while IFS= read -r h; do
  set -f; set -- $h; set +f
  [ "$1" = RUN ] || continue
  id=$2 keep=$3
  IFS= read -r s || break
  live=
  for g in $groups; do kill -s 0 -- "-$g" 2>/dev/null && live="$live $g"; done
  groups=$live
  if printf '%b' "$s" > "$d/sh"; then
    { head -c "$keep" > "$d/out"; IFS= read -r x || [ -n "$x" ] || exit 0
      exec cat > /dev/null; } < "$d/o" &
    ro=$!
    { head -c "$keep" > "$d/err"; IFS= read -r x || [ -n "$x" ] || exit 0
      exec cat > /dev/null; } < "$d/e" &
    re=$!
    setsid sh "$d/sh" > "$d/o" 2> "$d/e" < /dev/null &
    p=$!
    groups="$groups $p"
    printf 'STARTED %s %s\n' "$id" "$p"
    wait "$p"
    rc=$?
    wait "$ro" "$re"
    if [ -s "$d/out" ] || [ -s "$d/err" ]; then
      set -f; set -- $(wc -c "$d/out" "$d/err"); set +f
      printf 'DONE %s %s %s %s\n' "$id" "$rc" "$1" "$3"
      cat "$d/out" "$d/err"
    else
      printf 'DONE %s %s 0 0\n' "$id" "$rc"
    fi
  else
    printf 'FAIL %s\n' "$id"
  fi
done
"""

# Bytes written as themselves on the wire; every other byte is `\0NNN` (octal).
_SAFE = frozenset(
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.,:/=+@#^~[]{}()<>;!?*&|"
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ChannelBrokenError(SandboxError):
    """The channel's stream ended or stopped answering; open another or use plain execs."""


TIMEOUT_EXIT, KILLED_EXIT = 124, 137  # `timeout -k`'s exit codes, which an exec reports


class ChannelResult(BaseModel):
    """One command's outcome through a channel: its exit code, and stdout and stderr apart."""

    exit_code: int = Field(description="The command's exit code; 128+n when signal n ended it.")
    stdout: bytes = Field(b"", description="stdout, cut at the output cap.")
    stderr: bytes = Field(b"", description="stderr, cut at the output cap.")
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = Field(False, description="True when its timeout stopped its group.")
    duration_sec: float = 0.0

    @property
    def exec_exit_code(self) -> int:
        """The exit code as a plain exec's `timeout -k` reports it: a timed-out command 124
        when its TERM ended it, 137 when only the KILL after it did; else its own."""
        stopped = self.timed_out and self.exit_code != KILLED_EXIT
        return TIMEOUT_EXIT if stopped else self.exit_code

    @property
    def truncated(self) -> bool:
        """True when either output was cut at the cap."""
        return self.stdout_truncated or self.stderr_truncated


@runtime_checkable
class CommandChannel(Protocol):
    """Commands one after another on one open stream into a sandbox."""

    async def run(
        self,
        command: str | list[str],
        *,
        timeout_sec: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> ChannelResult:
        """Run `command` (a script for `sh`, or an argv) in its own process group."""
        ...

    async def close(self) -> None:
        """End the loop; no process it started survives. Idempotent."""
        ...

    @property
    def closed(self) -> bool:
        """True once closed or broken: open another for the next command."""
        ...


class HasHealth(Protocol):
    """What `run_judged` asks of the sandbox: the engine's account of it."""

    async def health(self, *, pids: bool = False) -> Health: ...


async def run_judged(
    channel: CommandChannel,
    sandbox: HasHealth,
    command: str | list[str],
    *,
    timeout_sec: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    output_cap: int = DEFAULT_OUTPUT_CAP,
) -> ChannelResult:
    """`channel.run`, judged when the command breaks its channel: while the engine says the
    sandbox is fine, that was the command's own doing (it killed the loop, or left a process
    holding its output past every limit), so it ends as killed (137, trialbox's note on
    stderr, `timed_out` when its time was up) and the channel is closed for the caller to
    open another. A sandbox that is not fine re-raises the `ChannelBrokenError` (a
    `SandboxError`), for the caller to judge its cause."""
    started = time.monotonic()
    try:
        return await channel.run(
            command, timeout_sec=timeout_sec, env=env, cwd=cwd, output_cap=output_cap
        )
    except ChannelBrokenError as exc:
        health = await sandbox.health()
        if not (health.known and health.exists and health.running):
            raise
        took = time.monotonic() - started
        return ChannelResult(
            exit_code=KILLED_EXIT,
            stderr=f"trialbox: the command broke its command channel: {exc}\n".encode(),
            timed_out=timeout_sec is not None and took >= timeout_sec,
            duration_sec=took,
        )


@runtime_checkable
class ChannelSandbox(Protocol):
    """A sandbox that can open command channels (optional: check with `isinstance`)."""

    async def open_channel(self, user: str = "") -> CommandChannel | None:
        """A channel running as `user`, or None when one cannot start here (then use exec)."""
        ...


class ChannelTransport(Protocol):
    """The loop's stdin and stdout (its stderr is the transport's to keep for messages)."""

    async def send(self, data: bytes) -> None: ...

    async def receive(self) -> bytes:
        """The next bytes of the loop's stdout; b"" once it has ended."""
        ...

    async def send_eof(self) -> None: ...

    async def aclose(self) -> None: ...

    def diagnostics(self) -> str:
        """What the loop wrote to stderr, for an error message."""
        ...


# Sends a signal ("TERM", "KILL") to process groups by a plain exec (or anything else that
# does not wait for the busy loop); `kill_command` is its text.
GroupSignaller = Callable[[str, list[int]], Awaitable[None]]


def kill_command(signal: str, groups: list[int]) -> str:
    """`sh` text that sends `signal` to each process group, ignoring those gone."""
    if not re.fullmatch(r"[A-Z0-9]+", signal):
        raise ValueError(f"not a signal's name: {signal!r}")
    targets = " ".join(f"-{int(g)}" for g in groups if int(g) > 1)
    return f"kill -s {signal} -- {targets} 2>/dev/null; exit 0" if targets else "exit 0"


# -- the wire, host to sandbox ---------------------------------------------------------------


def encode_line(data: bytes) -> bytes:
    """`data` as one line `printf '%b'` turns back into exactly `data` (no newline inside)."""
    return b"".join(bytes([c]) if c in _SAFE else b"\\0%03o" % c for c in data)


def command_script(
    command: str | list[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> bytes:
    """The script the loop runs for one command: `cd` and `export`s, then the command (a
    string as `sh` text, an argv `exec`ed as given)."""
    lines = []
    if cwd is not None:
        lines.append(f"cd -- {shlex.quote(cwd)} || exit 126")
    for name, value in (env or {}).items():
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"not an environment variable's name: {name!r}")
        lines.append(f"export {name}={shlex.quote(value)}")
    if isinstance(command, str):
        lines.append(command)
    else:
        if not command:
            raise ValueError("an empty argv")
        lines.append("exec " + shlex.join(command))
    script = "\n".join(lines).encode()
    if b"\0" in script:
        raise ValueError("a command cannot hold a NUL byte")
    return script + b"\n"


def encode_request(request_id: int, output_cap: int, script: bytes) -> bytes:
    """One RUN request: the header (keep cap+1 bytes, so a cut shows) and the script line."""
    if output_cap < 0:
        raise ValueError("output_cap must be at least 0")
    return b"RUN %d %d\n%s\n" % (request_id, output_cap + 1, encode_line(script))


# -- the wire, sandbox to host ---------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    pid: int


@dataclass(frozen=True)
class Started:
    request_id: int
    pgid: int


@dataclass(frozen=True)
class Done:
    request_id: int
    exit_code: int
    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class Failed:
    request_id: int


Reply = Ready | Started | Done | Failed


class ReplyParser:
    """The loop's stdout, fed as it arrives, read back into replies (`feed` returns those
    completed). A line it does not understand is a `ChannelBrokenError`: the stream is out of
    step and nothing after it can be trusted."""

    MAX_LINE = 256

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._pending: tuple[int, int, int, int] | None = None  # a DONE awaiting its bytes

    def feed(self, data: bytes) -> list[Reply]:
        self._buffer += data
        replies: list[Reply] = []
        while True:
            if self._pending is not None:
                request_id, exit_code, out, err = self._pending
                if len(self._buffer) < out + err:
                    return replies
                body = bytes(self._buffer[: out + err])
                del self._buffer[: out + err]
                self._pending = None
                replies.append(Done(request_id, exit_code, body[:out], body[out:]))
                continue
            end = self._buffer.find(b"\n")
            if end < 0:
                if len(self._buffer) > self.MAX_LINE:
                    raise ChannelBrokenError(f"unframed output: {bytes(self._buffer[:80])!r}")
                return replies
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            reply = self._line(line)
            if reply is not None:
                replies.append(reply)

    def _line(self, line: bytes) -> Reply | None:
        words = line.split()
        try:
            match words:
                case [b"READY", pid]:
                    return Ready(int(pid))
                case [b"STARTED", request_id, pgid]:
                    return Started(int(request_id), int(pgid))
                case [b"FAIL", request_id]:
                    return Failed(int(request_id))
                case [b"DONE", request_id, exit_code, out, err]:
                    sizes = int(out), int(err)
                    if min(sizes) < 0:
                        raise ValueError(line)
                    self._pending = (int(request_id), int(exit_code), *sizes)
                    return None
        except ValueError:
            pass
        raise ChannelBrokenError(f"unframed output: {line[:80]!r}")


# -- the host's side -------------------------------------------------------------------------


class ShellChannel:
    """`CommandChannel` over a transport to `SERVER_SCRIPT`; one command at a time (use one
    channel per concurrent command). Made by `await ShellChannel.start(transport, signal)`."""

    def __init__(
        self, transport: ChannelTransport, signal: GroupSignaller, *, kill_grace_sec: float
    ) -> None:
        self._transport = transport
        self._signal = signal
        self._kill_grace = kill_grace_sec
        self._parser = ReplyParser()
        self._replies: asyncio.Queue[Reply | None] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._next_id = 0
        self._loop_pid: int | None = None
        self._groups: set[int] = set()  # every group it saw start, for the kill at close
        self._closed = False
        self._broken: str | None = None

    @classmethod
    async def start(
        cls,
        transport: ChannelTransport,
        signal: GroupSignaller,
        *,
        kill_grace_sec: float = KILL_GRACE_SEC,
        ready_within_sec: float = REPLY_BACKSTOP_SEC,
    ) -> ShellChannel:
        """Say HELLO and wait for READY; a loop that cannot start is a `ChannelBrokenError`
        (its transport closed)."""
        channel = cls(transport, signal, kill_grace_sec=kill_grace_sec)
        channel._reader = asyncio.create_task(channel._read())
        try:
            await transport.send(b"HELLO\n")
            reply = await asyncio.wait_for(channel._replies.get(), ready_within_sec)
            if not isinstance(reply, Ready):
                raise ChannelBrokenError(
                    f"the channel's loop did not start: {channel._why() or 'no answer'}"
                )
            channel._loop_pid = reply.pid
        except (TimeoutError, OSError) as exc:
            await channel._drop()
            raise ChannelBrokenError(f"the channel's loop did not start: {exc!r}") from exc
        except BaseException:
            await channel._drop()
            raise
        return channel

    @property
    def closed(self) -> bool:
        return self._closed

    async def _read(self) -> None:
        try:
            while data := await self._transport.receive():
                for reply in self._parser.feed(data):
                    self._replies.put_nowait(reply)
        except (OSError, SandboxError) as exc:
            self._broken = str(exc)
        finally:
            self._replies.put_nowait(None)

    def _why(self) -> str:
        return "; ".join(p for p in (self._broken, self._transport.diagnostics().strip()) if p)

    async def _reply(self, request_id: int, within: float | None) -> Reply:
        """The next reply to `request_id` (older ones, of a command cancelled, are skipped)."""
        async with asyncio.timeout(within):
            while True:
                reply = await self._replies.get()
                if reply is None:
                    self._replies.put_nowait(None)  # every later wait sees the end too
                    raise ChannelBrokenError(f"the channel ended: {self._why() or 'no reason'}")
                if isinstance(reply, Ready) or reply.request_id == request_id:
                    return reply

    async def run(
        self,
        command: str | list[str],
        *,
        timeout_sec: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> ChannelResult:
        """Run one command; see the module's docstring for what is guaranteed."""
        request = command_script(command, env=env, cwd=cwd)
        async with self._lock:
            if self._closed:
                raise ChannelBrokenError("the channel is closed")
            self._next_id += 1
            request_id = self._next_id
            started = time.monotonic()
            await self._transport.send(encode_request(request_id, output_cap, request))
            pgid: int | None = None
            try:
                reply = await self._reply(request_id, REPLY_BACKSTOP_SEC)
                if isinstance(reply, Failed):
                    raise SandboxError("the channel could not write the command's files")
                if not isinstance(reply, Started):
                    raise ChannelBrokenError(f"out of step: {reply!r}")
                pgid = reply.pgid
                self._groups.add(pgid)
                timed_out = False
                try:
                    left = (
                        None if timeout_sec is None else timeout_sec - (time.monotonic() - started)
                    )
                    reply = await self._reply(request_id, None if left is None else max(left, 0))
                except TimeoutError:
                    timed_out = True
                    reply = await self._stop(request_id, pgid)
            except TimeoutError as exc:
                await self._broke()
                raise ChannelBrokenError(
                    f"the channel did not answer within {REPLY_BACKSTOP_SEC:.0f} s"
                ) from exc
            except asyncio.CancelledError:
                if pgid is not None:  # the loop goes on to the next request once it ends
                    await _quietly(self._signal("KILL", [pgid]))
                raise
            except ChannelBrokenError:
                await self._broke()
                raise
            if not isinstance(reply, Done):
                await self._broke()
                raise ChannelBrokenError(f"out of step: {reply!r}")
            return ChannelResult(
                exit_code=reply.exit_code,
                stdout=reply.stdout[:output_cap],
                stderr=reply.stderr[:output_cap],
                stdout_truncated=len(reply.stdout) > output_cap,
                stderr_truncated=len(reply.stderr) > output_cap,
                timed_out=timed_out,
                duration_sec=time.monotonic() - started,
            )

    async def _stop(self, request_id: int, pgid: int) -> Reply:
        """TERM the group, then KILL it after the grace; its reply (a backstop after)."""
        await self._signal("TERM", [pgid])
        try:
            return await self._reply(request_id, self._kill_grace)
        except TimeoutError:
            await self._signal("KILL", [pgid])
        return await self._reply(request_id, REPLY_BACKSTOP_SEC)

    async def _broke(self) -> None:
        """Out of step or silent: nothing it says can be trusted any more; end it."""
        await self._finish(graceful=False)

    async def close(self) -> None:
        """EOF to the loop, which kills its groups and leaves; what is left then (the loop
        itself, a group it could not reach) is killed through the signaller."""
        await self._finish(graceful=True)

    async def _finish(self, *, graceful: bool) -> None:
        if self._closed:
            return
        self._closed = True
        ended = False
        if graceful:
            with contextlib.suppress(OSError, SandboxError):
                await self._transport.send_eof()
                ended = await self._ended(within=self._kill_grace + 3.0)
        if not ended:
            # The loop is its exec's group leader; its group holds its output's readers.
            loop = [] if self._loop_pid is None else [self._loop_pid]
            if self._groups or loop:
                await _quietly(self._signal("KILL", sorted(self._groups) + loop))
        await self._drop()

    async def abandon(self) -> None:
        """Close the stream without a word or a signal: its sandbox is going (the loop ends
        with its stdin, and the sandbox's removal ends the rest)."""
        self._closed = True
        await self._drop()

    async def _ended(self, within: float) -> bool:
        if self._reader is None:
            return True
        done, _ = await asyncio.wait({self._reader}, timeout=within)
        return bool(done)

    async def _drop(self) -> None:
        self._closed = True
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        await self._transport.aclose()


async def _quietly(call: Awaitable[None]) -> None:
    """A best-effort signal: a sandbox already gone has nothing left to stop."""
    with contextlib.suppress(SandboxError, SandboxTimeoutError, OSError):
        await call
