"""One fake sandbox: an in-memory filesystem, a process table and a tiny shell.

It implements the `Sandbox` protocol with the Docker sandbox's observable behaviour: exit
codes, `timeout -k`-style limits (124, `timed_out` only when the limit fired), merged and
capped output, archive uploads that keep modes and owners, capped downloads, and an
idempotent destroy that finishes before a cancel goes on. An exec or file call on a removed
sandbox raises `SandboxNotFoundError`, as the engine's 404 does; an exec still running when
the sandbox is removed exits 137, as a killed container's does.
"""

from __future__ import annotations

import asyncio
import tarfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from orchestrator.backends.fake.archives import extract_tar, tar_of, write_capped
from orchestrator.backends.fake.dispatch import Dispatcher
from orchestrator.backends.fake.files import FakeFiles
from orchestrator.backends.fake.framework import parse_launch
from orchestrator.backends.fake.images import FakeImage
from orchestrator.backends.fake.processes import Process, ProcessTable
from orchestrator.backends.fake.scripting import Scripts
from orchestrator.backends.fake.shell import Shell
from orchestrator.backends.fake.state import Capture, ShellState
from orchestrator.backends.fake.users import DEFAULT_USERS, Identity, resolve
from orchestrator.common.errors import (
    SandboxConflictError,
    SandboxError,
    SandboxNotFoundError,
)
from orchestrator.common.limits import Limits
from orchestrator.common.offload import run_blocking
from orchestrator.common.shielding import RunOnce
from orchestrator.sandbox import (
    Capabilities,
    ExecResult,
    Health,
    Healthcheck,
    ImageDefaults,
    SandboxSpec,
)

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the engine answers for an exec when the sandbox's pids are all taken.
NO_PID_LEFT = "OCI runtime exec failed: fork/exec: resource temporarily unavailable\r\n"


class FakeSandbox:
    """A sandbox in memory. Made by `FakeBackend.create_sandbox`; `destroy()` is idempotent."""

    def __init__(
        self,
        spec: SandboxSpec,
        image: FakeImage,
        *,
        capabilities: Capabilities,
        limits: Limits | None = None,
        scripts: Scripts | None = None,
        users: tuple[Identity, ...] = DEFAULT_USERS,
        on_removed: Callable[[FakeSandbox], None] | None = None,
    ) -> None:
        self.spec, self.image, self.users = spec, image, users
        self.limits = limits or Limits()
        self.scripts = scripts or Scripts()
        self.files = FakeFiles()
        self.workdir = spec.workdir or image.workdir  # created, as the engine's -w does
        self.files.mkdir(self.workdir, parents=True)
        self.healthcheck: Healthcheck | None = None  # the image's HEALTHCHECK, set by tests
        # What the engine says of the sandbox (`Faults.health`); a handler may change it
        # mid-trial, as the kernel or someone outside would (an OOM kill, every pid taken).
        self.engine_health: Health | None = self.scripts.faults.health
        self.has_runtime = True  # whether trialbox's Python runtime works in it
        self.processes = ProcessTable()
        self.processes.leaders_ignore_term = self.scripts.faults.leader_ignores_term
        self.processes.kill_after = self.limits.exec_kill_after_sec
        self.shell = Shell(self.files, self.processes.signal, self.processes.ignore)
        self._commands = Dispatcher(self)
        self.execs: list[str] = []  # every command asked for, in order, for tests to read
        self._capabilities = capabilities
        self._on_removed = on_removed
        self._present = True
        self._destroy = RunOnce(self._remove, self.limits.destroy_settle_sec)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def present(self) -> bool:
        """True until the sandbox is removed (a failed destroy leaves it present)."""
        return self._present

    def _check_present(self, what: str) -> None:
        if not self._present:
            raise SandboxNotFoundError(f"{what}: not found (sandbox {self.name} was removed)")

    # -- exec ---------------------------------------------------------------------------------

    async def exec(
        self,
        command: str,
        *,
        timeout_sec: float | None = None,
        env: Mapping[str, str] | None = None,
        user: str = "",
        workdir: str | None = None,
        output_cap: int | None = None,
    ) -> ExecResult:
        """Run `command` as `user` in `workdir`, bounded by `timeout_sec` inside the sandbox."""
        what = f"exec in {self.name}"
        self._check_present(what)
        self.execs.append(command)
        faults = self.scripts.faults
        if faults.exec_fails_on is not None and faults.exec_fails_on in command:
            raise SandboxError(f"{what}: injected fault (the engine failed the exec)")
        if self.engine_health is not None and not self.engine_health.running:
            raise SandboxConflictError(f"{what}: conflict: the sandbox is not running")
        if self.engine_health is not None and self.engine_health.pids_exhausted:
            return ExecResult(exit_code=126, output=NO_PID_LEFT)  # nothing can start in it
        try:
            identity = resolve(user, self.users, self.image.user)
        except LookupError as exc:  # the engine's own words and exit code
            return ExecResult(exit_code=126, output=f"{exc.args[0]}\r\n")
        output = Capture()
        base = {"PATH": PATH, "HOME": identity.home, "HOSTNAME": self.name[:63]}
        state = ShellState(
            env={**base, **self.spec.env, **(env or {})},
            cwd=self.files.norm(workdir or self.workdir),
            user=identity, out=output, err=output,
        )  # fmt: skip
        launch = parse_launch(command)
        started = time.monotonic()
        proc = self.processes.start(
            lambda p: self._commands.run(command, launch, state, p),
            leader=launch is not None,
            timeout=timeout_sec,
        )
        assert proc.task is not None
        await asyncio.wait({proc.task})  # a cancelled caller leaves the process running
        exit_code = self._exit_code(proc, what)
        cap = output_cap or self.limits.exec_output_cap_bytes
        return ExecResult(
            exit_code=exit_code,
            output=bytes(output.data[:cap]).decode("utf-8", errors="replace"),
            truncated=len(output.data) > cap,
            timed_out=proc.timed_out,
            duration_sec=time.monotonic() - started,
        )

    @staticmethod
    def _exit_code(proc: Process, what: str) -> int:
        assert proc.task is not None
        if proc.task.cancelled():
            if proc.signal is not None:
                return 128 + proc.signal
            raise SandboxError(f"{what}: the process ended without an exit code")
        return proc.task.result()

    # -- files --------------------------------------------------------------------------------

    async def upload(self, tar_bytes: bytes, path: str = "/") -> None:
        """Extract a tar archive at `path` (an existing folder), modes and owners kept."""
        what = f"upload to {path} in {self.name}"
        self._check_present(what)
        await asyncio.sleep(0)  # a real copy takes a moment: a cancel can land here
        try:
            extract_tar(self.files, tar_bytes, path)
        except FileNotFoundError as exc:
            raise SandboxNotFoundError(f"{what}: not found ({exc.strerror})") from exc
        except tarfile.TarError as exc:
            raise SandboxError(f"{what}: not a tar archive ({exc})") from exc

    async def upload_file(
        self, path: str, data: bytes, *, mode: int = 0o600, owner: tuple[int, int] = (0, 0)
    ) -> None:
        """Write one file (absolute `path`) with this mode and numeric owner."""
        self._check_present(f"upload {path} to {self.name}")
        await asyncio.sleep(0)
        self.files.put(path, data, mode=mode, owner=owner)

    async def download(self, path: str, dest: Path, *, file_cap: int) -> list[str]:
        """Copy `path` into the host folder `dest`, each file capped; returns the files cut."""
        what = f"download {path} from {self.name}"
        self._check_present(what)
        if self.scripts.faults.download_fails:
            raise SandboxError(f"{what}: injected fault (the engine failed the copy)")
        try:
            archive = tar_of(self.files, path)  # taken on the loop: the tree may be changing
        except FileNotFoundError as exc:
            raise SandboxNotFoundError(f"{what}: not found ({exc.strerror})") from exc
        return await run_blocking(write_capped, archive, dest, file_cap=file_cap)

    # -- from outside ---------------------------------------------------------------------------

    async def image_defaults(self) -> ImageDefaults:
        return ImageDefaults(user=self.image.user, healthcheck=self.healthcheck)

    async def health(self, *, pids: bool = False) -> Health:
        """The scripted health (`engine_health`), else a sandbox that is simply there, or
        removed (by someone: Docker's events cannot tell who). As Docker's, the pid count
        (its live processes and PID 1) is read only when asked for, of a running sandbox."""
        scripted = self.engine_health
        if scripted is None and not self._present:
            return Health(exists=False, running=False, stopped_outside=True)
        if scripted is None:
            if not pids:
                return Health()
            return Health(
                pids_current=len(self.processes.pids()) + 1, pids_limit=self.spec.pids_limit
            )
        if pids and scripted.running:
            return scripted
        return scripted.model_copy(update={"pids_current": None, "pids_limit": None})

    async def pids_exhausted(self) -> bool:
        """The scripted health's pid count, as Docker's host-side reading."""
        return (await self.health(pids=True)).pids_exhausted

    async def stop_all_from_host(self) -> bool:
        """Every process ends at once, as SIGKILL from the host would, and only PID 1 holds a
        pid then; only when the scripted health says the pids are exhausted, as Docker's does."""
        scripted = self.engine_health
        if scripted is None or not await self.pids_exhausted():
            return False
        self.processes.end_all()
        self.engine_health = scripted.model_copy(update={"pids_current": 1})
        return True

    # -- teardown -----------------------------------------------------------------------------

    async def _remove(self) -> None:
        await asyncio.sleep(0)
        if self.scripts.faults.destroy_fails:
            raise SandboxError(f"remove {self.name}: injected fault (the engine refused)")
        self.remove_now()

    def remove_now(self) -> None:
        """Gone at once, processes and all (a forced removal, as reaping does)."""
        if not self._present:
            return
        self._present = False
        self.processes.end_all()
        if self._on_removed is not None:
            self._on_removed(self)

    async def destroy(self) -> None:
        """Remove the sandbox. Runs once, whatever cancels the caller meanwhile."""
        await self._destroy()

    @property
    def destroyed(self) -> bool:
        """True once removal was asked for: the sandbox can no longer be used."""
        return self._destroy.started
