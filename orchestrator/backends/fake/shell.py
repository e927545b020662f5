"""A fake sandbox's processes: one mount and pid namespace per sandbox, which every exec
joins, as a container's. Its init (`INIT`) binds the host's /usr, /etc and program folders
(a host's /bin -> usr/bin is copied as that symlink) read-only onto the same paths in the
sandbox's folder, binds /dev, mounts the namespace's /proc, then runs the Docker backend's
`KEEPALIVE` as PID 1. An exec enters the namespaces (its parent outside, as `docker exec`'s),
leads a session of its own, `chroot`s into the folder as its uid:gid, in its folder, with its
environment alone, and runs `sh -c` under Docker's `timeout -k`. Killing the init (the
sandbox removed, or the thread that made it gone, with this process even SIGKILLed: `setpriv
--pdeathsig` on `unshare --kill-child`) ends every process in it; an exec then exits 137.

A handler (`FakeBackend(agent=, verifier=)`) runs in place of the relay's subject or of
tests/test.sh, while a stand-in process holds that place (`sandbox.py`), so signals reach a
real pid. It gets the sandbox and an `ExecCall`, may use the sandbox's files
(`sandbox.path(...)`, a host path), run sh (`await call.sh(...)`), print, sleep or wait, and
returns an exit code (None is 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.common.errors import SandboxError
from orchestrator.sandbox.commands import KEEPALIVE

if TYPE_CHECKING:
    from orchestrator.backends.fake.sandbox import FakeSandbox, User

UNAVAILABLE = (
    "the fake backend runs a sandbox's processes with the host's programs in private mount and "
    "pid namespaces, which needs root and util-linux's unshare, nsenter and setpriv (in a "
    "container, one allowed to mount, e.g. --privileged): "
)
NAMESPACES = ("/usr/bin/setpriv", "--pdeathsig", "KILL", "/usr/bin/unshare", "--mount", "--pid")
# The init: prints its host pid (from the host's /proc, before the namespace's is mounted).
INIT = r"""
root=$1
read -r pid _ </proc/self/stat
for d in /usr /bin /sbin /lib /lib64 /etc; do
  if [ -L $d ] && { [ -L "$root$d" ] || [ ! -d "$root$d" ]; }; then
    [ -e "$root$d" ] || [ -L "$root$d" ] || ln -s "$(readlink $d)" "$root$d"
  elif [ -d $d ]; then mkdir -p "$root$d" && mount --bind -o ro $d "$root$d" || exit 125; fi
done
mkdir -p "$root/dev" "$root/proc" && mount --rbind /dev "$root/dev" || exit 125
mount -t proc proc "$root/proc" || exit 125
echo "$pid"
exec sh -c "$KEEPALIVE" </dev/null >/dev/null 2>&1
"""


def append(path: Path, data: bytes) -> None:
    """Add `data` to the end of a file."""
    with path.open("ab") as file:
        file.write(data)


class Namespace:
    """A sandbox's namespaces, started with it; `kill(init=True)` ends them and all in them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        try:
            self._unshare = subprocess.Popen(
                [*NAMESPACES, "--fork", "--kill-child", "/bin/sh", "-c", INIT, "init", str(root)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                env={"KEEPALIVE": KEEPALIVE, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise SandboxError(UNAVAILABLE + str(exc)) from exc
        said = self._unshare.stdout
        assert said is not None  # a pipe, asked for above
        line = said.readline()
        if not line.strip().isdigit():  # what went wrong instead
            told = (line + self._unshare.communicate()[0]).decode(errors="replace").strip()
            raise SandboxError(UNAVAILABLE + (told or f"exit {self._unshare.returncode}"))
        said.close()
        self.init = int(line)
        self._ns = os.readlink(f"/proc/{self.init}/ns/pid")

    def argv(
        self, uid: int, gid: int, workdir: str, env: dict[str, str], leader: bool
    ) -> list[str]:
        """The prefix of an exec's argv: into the namespaces (a session of its own when
        `leader`), the chroot as uid:gid, the folder and the environment."""
        return [
            "/usr/bin/nsenter", "-t", str(self.init), "-m", "-p", "--",
            *(["/usr/bin/setsid"] if leader else []),
            "/usr/sbin/chroot", f"--userspec={uid}:{gid}", str(self.root),
            "/usr/bin/env", "-i", "-C", workdir, "--", *(f"{k}={v}" for k, v in env.items()),
        ]  # fmt: skip

    def pids(self) -> list[int]:
        """The host pids of the namespace's processes, its init's among them."""
        return [int(entry) for entry in os.listdir("/proc") if _ns_of(entry) == self._ns]

    def kill(self, *, init: bool) -> None:
        """SIGKILL all in the namespace but its init, or (`init`) the init, which takes all."""
        if init and self._unshare.poll() is not None:
            return  # gone already (its pid may be another's by now)
        for pid in [self.init] if init else set(self.pids()) - {self.init}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if init:
            self._unshare.wait()


def _ns_of(pid: str) -> str | None:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/ns/pid") if pid.isdigit() else None
    return None


async def run(argv: Sequence[str], out: Callable[[bytes], None]) -> int:
    """Run `argv` (a `Namespace.argv` and its command), its output (both streams, in the order
    written) to `out`; its exit status, 128+N when signal N ended it. Cancelled, it kills
    its process group (not an exec's: that leads a session of its own) and waits until its
    output is read."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={}, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        while chunk := await proc.stdout.read(1 << 16):
            out(chunk)
        status = await proc.wait()
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out((await proc.communicate())[0])  # the rest of its output, the process reaped
        raise
    return 128 - status if status < 0 else status


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
    namespace: Namespace
    command: str = ""

    def print(self, text: str) -> None:
        """Write to the process's standard output (where the framework sent it)."""
        self.out(text.encode())

    async def sh(self, command: str) -> int:
        """Run `command` with the real sh in this process's sandbox, folder, user and env."""
        prefix = self.namespace.argv(self.user.uid, self.user.gid, self.workdir, self.env, False)
        return await run([*prefix, "/bin/sh", "-c", command], self.out)


Handler = Callable[["FakeSandbox", ExecCall], Awaitable[int | None]]
