"""The task's own text in a fake sandbox, run by the host's real `/bin/sh`: what a test writes
as its test.sh, solve.sh or `command:` agent, and a handler's `call.sh(...)`.

Each run gets a private mount and pid namespace of its own (util-linux's `unshare`, which
needs root): there the host's /usr, /etc and program folders (a host's /bin -> usr/bin is
copied as that symlink) are bound read-only onto the same paths in the sandbox's host folder,
/dev bound and a /proc of the run's own mounted, then `chroot` makes that folder `/`, as the
exec's uid:gid, in its folder, with its environment alone. So an absolute path the text
writes lands in the sandbox's folder, never on the host, and the mounts vanish with the
namespace. The run is the exec's process: cancelling it (a signal, the timeout, the sandbox
removed: `processes.py`) SIGKILLs its process group, and the namespace's init with it takes
every process the text started, background children too; so does this process's death (the
init's watcher, `SETUP`). A run costs some 10 ms. Each exec is a pid namespace of its own,
so the text sees no process of another exec (trialbox's relay commands, which do, are
answered by kind: `sandbox.py`).

A test that needs a scripted agent or verifier gives the backend a handler: `agent` runs in
place of the relay's subject (after the launch recorded the pid, sourced the credentials and
sent output to /logs/agent), `verifier` in place of tests/test.sh (its output to
/logs/verifier/test-stdout.txt). It gets the sandbox and an `ExecCall`, may read and write
its files (`sandbox.path(...)`, a host path), run sh (`await call.sh(...)`), print, sleep or
wait, and returns an exit code (None is 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from subprocess import DEVNULL, PIPE, STDOUT
from typing import TYPE_CHECKING

from orchestrator.common.errors import SandboxError

if TYPE_CHECKING:
    from orchestrator.backends.fake.sandbox import FakeSandbox, User

# The host's folders a run sees in the sandbox, read-only (those the host has).
HOST_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc")
NAMESPACES = ("/usr/bin/unshare", "--mount", "--pid", "--fork", "--kill-child")
# The namespaces' init, in an empty environment. Its stdin is a pipe this process never
# writes: at its end (this process died, even SIGKILLed) a watcher kills all in the
# namespace. Then the binds ($5: host folders), /dev and /proc, and the text in the chroot
# with the exec's environment ($6...: NAME=VALUE), as a child (not exec'd: as PID 1 it
# would ignore every signal it has no handler for).
SETUP = r"""
root=$1 user=$2 dir=$3 text=$4 binds=$5
shift 5
exec 3<&0
(read -r _ <&3; kill -KILL -1) &
for bind in $binds; do /usr/bin/mount --bind -o ro "$bind" "$root$bind" || exit 125; done
/usr/bin/mount --rbind /dev "$root/dev" && /usr/bin/mount -t proc proc "$root/proc" || exit 125
/usr/sbin/chroot --userspec="$user" "$root" /usr/bin/env -i -C "$dir" -- "$@" /bin/sh -c "$text" \
    </dev/null 3<&-
"""
_host_checked = False


def append(path: Path, data: bytes) -> None:
    """Add `data` to the end of a file."""
    with path.open("ab") as file:
        file.write(data)


@dataclass
class ExecCall:
    """One process running the task's text, as a handler gets it: the text it stands in for
    (`command`), its environment, folder and user, and where its output goes (one sink for
    both keeps them in the order written)."""

    root: Path  # the sandbox's filesystem, a host folder
    env: dict[str, str]
    workdir: str
    user: User
    out: Callable[[bytes], None]
    err: Callable[[bytes], None]
    command: str = ""

    def print(self, text: str) -> None:
        """Write to the process's standard output (where the framework sent it)."""
        self.out(text.encode())

    async def sh(self, command: str) -> int:
        """Run `command` with the real sh in this process's sandbox, folder, user and env."""
        return await run_sh(command, self)


Handler = Callable[["FakeSandbox", ExecCall], Awaitable[int | None]]


async def run_sh(text: str, call: ExecCall) -> int:
    """`sh -c text` in the sandbox; its exit status. Cancelled, it kills the run and waits
    until its output is read to the end and the process reaped."""
    await _check_host()
    together = call.out == call.err
    proc = await asyncio.create_subprocess_exec(
        *NAMESPACES, "/bin/sh", "-c", SETUP, "setup", str(call.root),
        f"{call.user.uid}:{call.user.gid}", call.workdir, text, " ".join(furnish(call.root)),
        *(f"{name}={value}" for name, value in call.env.items()),
        stdin=PIPE, stdout=PIPE, stderr=STDOUT if together else PIPE, env={},
        start_new_session=True,
    )  # fmt: skip
    ran = asyncio.ensure_future(_until_done(proc, call))
    try:
        return await asyncio.shield(ran)
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its namespace's init, so all in it
        await asyncio.wait({ran})  # the output to its end, the process reaped
        raise


async def _until_done(proc: asyncio.subprocess.Process, call: ExecCall) -> int:
    """The output read to its end (into the call's sinks), then the exit status."""
    assert proc.stdout is not None
    pumps = [_pump(proc.stdout, call.out)]
    if proc.stderr is not None:
        pumps.append(_pump(proc.stderr, call.err))
    await asyncio.gather(*pumps)
    status = await proc.wait()
    assert proc.stdin is not None
    proc.stdin.close()
    return 128 - status if status < 0 else status  # killed from outside: as a shell says it


async def _pump(stream: asyncio.StreamReader, sink: Callable[[bytes], None]) -> None:
    while chunk := await stream.read(1 << 16):
        sink(chunk)


def furnish(root: Path) -> list[str]:
    """Make the sandbox's folder ready for a run: /dev, /proc and the host's folders to bind
    (returned), a host's symlink among them (/bin -> usr/bin) made as that symlink."""
    binds = []
    for name in HOST_DIRS:
        host, there = Path(name), root / name[1:]
        if host.is_symlink() and not (there.is_dir() and not there.is_symlink()):
            if not there.is_symlink() and not there.exists():
                there.symlink_to(os.readlink(host))
        elif host.is_dir():
            there.mkdir(exist_ok=True)
            binds.append(name)
    for mountpoint in ("dev", "proc"):
        (root / mountpoint).mkdir(exist_ok=True)
    return binds


async def _check_host() -> None:
    """Once per process: can this host make the namespaces? If not, say what is needed."""
    global _host_checked
    if _host_checked:
        return
    try:
        proc = await asyncio.create_subprocess_exec(
            *NAMESPACES, "/bin/true", stdin=DEVNULL, stdout=DEVNULL, stderr=PIPE
        )
        _, said = await proc.communicate()
    except OSError as exc:
        failed = str(exc)
    else:
        failed = "" if proc.returncode == 0 else said.decode(errors="replace").strip() or "failed"
    if failed:
        raise SandboxError(
            "the fake backend runs the task's text with the host's /bin/sh in private mount and "
            "pid namespaces, which needs root and util-linux's unshare (/usr/bin/unshare; in a "
            f"container, one allowed to mount, e.g. --privileged): {failed}"
        )
    _host_checked = True
