"""One fake sandbox: an in-memory filesystem, a process table, and trialbox's own commands
answered by kind.

It implements the `Sandbox` protocol with the Docker sandbox's observable behaviour: exit
codes, `timeout -k`-style limits (124, `timed_out` only when the limit fired), merged and
capped output, archive uploads that keep modes and owners, capped downloads, and an
idempotent destroy that finishes before a cancel goes on. The framework's commands
(`relay.commands`, `sandbox.commands`) are answered from what they mean, with the output
their own `answer` helpers give; the task's own text (a string) runs through the few words of
sh in `script.py`, or a test's handler. An exec or file call on a removed sandbox raises
`SandboxNotFoundError`; an exec still running when the sandbox is removed exits 137.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import tarfile
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from container_runtime import paths
from orchestrator.backends.fake.files import FakeFiles, extract_tar, tar_of, write_capped
from orchestrator.backends.fake.images import FakeImage
from orchestrator.backends.fake.processes import Process, ProcessTable
from orchestrator.backends.fake.script import Context, ExecCall, Handler, run_script
from orchestrator.backends.fake.users import DEFAULT_USERS, Identity, resolve
from orchestrator.common.errors import SandboxConflictError, SandboxError, SandboxNotFoundError
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
from orchestrator.sandbox.commands import (
    REWARD_FILES,
    VERIFIER_STDOUT,
    CheckRuntime,
    PathExists,
    PrepareVerifier,
    RunVerifier,
    SandboxCommand,
    StartForwarder,
)
from relay.commands import GroupAlive, Launch, ProbeLeader, RemoveFile, Signal, UserIds
from relay.launcher import SCOPE_UNAVAILABLE_EXIT

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the engine answers for an exec when the sandbox's pids are all taken.
NO_PID_LEFT = "OCI runtime exec failed: fork/exec: resource temporarily unavailable\r\n"
# The framework's folders as the verifier's preparation puts them back: path, mode.
FRAMEWORK_DIRS = ((paths.LOGS_DIR, 0o755), (paths.AGENT_DIR, 0o777), (paths.ARTIFACTS_DIR, 0o777))


class FakeSandbox:
    """A sandbox in memory. Made by `FakeBackend.create_sandbox`; `destroy()` is idempotent."""

    def __init__(
        self,
        spec: SandboxSpec,
        image: FakeImage,
        *,
        capabilities: Capabilities,
        limits: Limits | None = None,
        agent: Handler | None = None,
        verifier: Handler | None = None,
        health: Health | None = None,
        users: tuple[Identity, ...] = DEFAULT_USERS,
        on_removed: Callable[[FakeSandbox], None] | None = None,
    ) -> None:
        self.spec, self.image, self.users = spec, image, users
        self.limits = limits or Limits()
        self.agent, self.verifier = agent, verifier
        self.files = FakeFiles()
        self.workdir = spec.workdir or image.workdir  # created, as the engine's -w does
        self.files.mkdir(self.workdir, parents=True)
        if spec.files is not None:  # placed before the start, as the Docker backend does
            extract_tar(self.files, spec.files, "/")
        self.healthcheck: Healthcheck | None = None  # the image's HEALTHCHECK, set by tests
        # What the engine says of the sandbox; a handler may change it mid-trial, as the
        # kernel or someone outside would (an OOM kill, every pid taken).
        self.engine_health: Health | None = health
        self.has_runtime = True  # whether trialbox's Python runtime works in it
        self.processes = ProcessTable(kill_after=self.limits.exec_kill_after_sec)
        self.execs: list[SandboxCommand] = []  # every command asked for, in order
        self.adopted = False  # taken from a warm pool
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
        command: SandboxCommand,
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
        if self.engine_health is not None and not self.engine_health.running:
            raise SandboxConflictError(f"{what}: conflict: the sandbox is not running")
        if self.engine_health is not None and self.engine_health.pids_exhausted:
            return ExecResult(exit_code=126, output=NO_PID_LEFT)  # nothing can start in it
        try:
            who = resolve(user, self.users, self.image.user)
        except LookupError as exc:  # the engine's own words and exit code
            return ExecResult(exit_code=126, output=f"{exc.args[0]}\r\n")
        output = bytearray()
        context = Context(
            self.files,
            env={"PATH": PATH, "HOME": who.home, "HOSTNAME": self.name[:63], **self.spec.env}
            | dict(env or {}),
            cwd=self.files.norm(workdir or self.workdir),
            user=(who.name, who.uid, who.gid),
            out=output.extend,
            err=output.extend,
        )
        started = time.monotonic()
        proc = self.processes.start(
            lambda p: self._answer(command, context, p),
            leader=isinstance(command, Launch),
            timeout=timeout_sec,
        )
        assert proc.task is not None
        await asyncio.wait({proc.task})  # a cancelled caller leaves the process running
        cap = output_cap or self.limits.exec_output_cap_bytes
        return ExecResult(
            exit_code=self._exit_code(proc, what),
            output=bytes(output[:cap]).decode("utf-8", errors="replace"),
            truncated=len(output) > cap,
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

    async def _answer(self, command: SandboxCommand, ctx: Context, proc: Process) -> int:
        """What `command` does, by its kind."""
        ctx.on_trap = lambda name: self.processes.ignore(proc.pid, name)
        say = ctx.out
        match command:
            case str():
                return await run_script(command, ctx)
            case Launch():
                return await self._launch(command, ctx, proc)
            case RunVerifier():
                return await self._run_verifier(command, ctx)
            case PrepareVerifier():
                say(self._prepare(command, proc).encode())
            case ProbeLeader():
                return self._probe(command, ctx)
            case Signal():
                if not self.processes.signal(command.pid, command.signal):
                    ctx.err(b"sh: 1: kill: No such process\n")
                    return 1
            case GroupAlive():
                say(GroupAlive.answer(self.processes.alive(command.pid)).encode())
            case UserIds():
                say(UserIds.answer(*ctx.user[1:]).encode())
            case RemoveFile():
                with contextlib.suppress(OSError):
                    self.files.remove(command.path)
            case PathExists():
                return 0 if self.files.get(command.path) is not None else 1
            case CheckRuntime():
                return 0 if self.has_runtime else 127
            case StartForwarder():
                ctx.err(b"the fake backend runs no model gateway forwarder\n")
                return 127
            case _:
                raise SandboxError(f"the fake backend does not know {command!r}")
        return 0

    async def _handle(self, handler: Handler, text: str, ctx: Context) -> int:
        status = await handler(self, ExecCall(text, ctx))
        return 0 if status is None else status

    async def _launch(self, launch: Launch, ctx: Context, proc: Process) -> int:
        """The relay's launcher: record the pid, source the credentials, redirect, run."""
        where = launch.paths
        try:
            self.files.mkdir(where.state_dir, parents=True)
            self.files.write(where.pid_file, b"%d\n" % proc.pid)
            if launch.has_env:
                pairs = shlex.split(self.files.read(where.env_file).decode())
                ctx.env.update(item.partition("=")[::2] for item in pairs)
        except OSError:
            ctx.err(f"{where.scope_marker}\n".encode())
            return SCOPE_UNAVAILABLE_EXIT
        finally:
            with contextlib.suppress(OSError):
                self.files.remove(where.env_file)
        for path in (where.stdout, where.stderr):
            self.files.write(path, b"")
        child = replace(
            ctx,
            env=dict(ctx.env),
            out=lambda data: self.files.write(where.stdout, data, append=True),
            err=lambda data: self.files.write(where.stderr, data, append=True),
        )
        if self.agent is not None:
            return await self._handle(self.agent, launch.subject, child)
        return await run_script(launch.subject, child)

    def _probe(self, probe: ProbeLeader, ctx: Context) -> int:
        """The leader's pid, as the relay's checked probe prints it: the pid file's, if that
        is a live leader, else the one live leader; none or two is no answer."""
        leaders = [p.pid for p in self.processes.leaders()]
        with contextlib.suppress(OSError, ValueError):
            guess = int(self.files.read(probe.paths.pid_file))
            if guess in leaders:
                leaders = [guess]
        if len(leaders) != 1:
            return 3 if leaders else 1
        ctx.out(ProbeLeader.answer(leaders[0]).encode())
        return 0

    def _prepare(self, prepare: PrepareVerifier, proc: Process) -> str:
        """Every other process killed (when asked), the framework's folders put back as
        root's, then /logs/verifier and /tests emptied; what it found, as the exec says it."""
        stopped = None
        if prepare.stop_leftovers:
            others = [pid for pid in self.processes.pids() if pid != proc.pid]
            for pid in others:
                self.processes.signal(pid, "KILL")
            stopped = len(others)
        found = []
        for path, mode in FRAMEWORK_DIRS:
            node = self.files.get(path)
            if node is not None and (not node.is_dir or (node.mode, node.owner) != (mode, (0, 0))):
                found.append(f"{path} was mode {node.mode:o} owned by {node.owner}")
                self.files.remove(path, recursive=True)
            self.files.put_dir(path, mode=mode)
        for path in (paths.VERIFIER_DIR, paths.TESTS_DIR):
            if self.files.get(path) is not None:
                self.files.remove(path, recursive=True)
        self.files.put_dir(paths.VERIFIER_DIR, mode=0o755)
        return PrepareVerifier.answer(found, stopped)

    async def _run_verifier(self, run: RunVerifier, ctx: Context) -> int:
        """tests/test.sh (a test's handler, else its text) with its output to
        test-stdout.txt, then the reward files as the run's snapshot prints them."""
        self.files.write(VERIFIER_STDOUT, b"")
        script = f"{paths.TESTS_DIR}/test.sh"

        def sink(data: bytes) -> None:
            self.files.write(VERIFIER_STDOUT, data, append=True)

        child = replace(ctx, out=sink, err=sink)
        if self.verifier is not None:
            status = await self._handle(self.verifier, script, child)
        else:
            status = await run_script(f"sh {script}", child)
        snapshot: dict[str, bytes | None] = {}
        for name in REWARD_FILES:
            node = self.files.get(f"{paths.VERIFIER_DIR}/{name}")
            if node is not None:
                snapshot[name] = None if node.is_dir else bytes(node.data)
        ctx.out(run.answer(snapshot).encode())
        return status

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
        try:
            archive = tar_of(self.files, path)  # taken on the loop: the tree may be changing
        except FileNotFoundError as exc:
            raise SandboxNotFoundError(f"{what}: not found ({exc.strerror})") from exc
        return await run_blocking(write_capped, archive, dest, file_cap=file_cap)

    # -- from outside ---------------------------------------------------------------------------

    async def image_defaults(self) -> ImageDefaults:
        return ImageDefaults(user=self.image.user, healthcheck=self.healthcheck)

    async def health(self, *, pids: bool = False) -> Health:
        """The engine's account (`engine_health`), else a sandbox that is simply there, or
        removed (by someone: Docker's events cannot tell who). As Docker's, the pid count
        (its live processes and PID 1) is read only when asked for, of a running sandbox."""
        scripted = self.engine_health
        if scripted is None and not self._present:
            return Health(exists=False, running=False, stopped_outside=True)
        if scripted is None:
            if not pids:
                return Health()
            count = len(self.processes.pids()) + 1
            return Health(pids_current=count, pids_limit=self.spec.pids_limit)
        if pids and scripted.running:
            return scripted
        return scripted.model_copy(update={"pids_current": None, "pids_limit": None})

    async def pids_exhausted(self) -> bool:
        """The pid count as Docker's host-side reading gives it."""
        return (await self.health(pids=True)).pids_exhausted

    async def stop_all_from_host(self) -> bool:
        """Every process ends at once, as SIGKILL from the host would, and only PID 1 holds a
        pid then; only when the pids are exhausted, as Docker's does."""
        scripted = self.engine_health
        if scripted is None or not await self.pids_exhausted():
            return False
        self.processes.end_all()
        self.engine_health = scripted.model_copy(update={"pids_current": 1})
        return True

    # -- a warm pool's (sandbox/pool.py) ---------------------------------------------------

    async def pristine(self) -> bool:
        """There, nothing ever ran in it, and running by the engine's account."""
        health = self.engine_health
        return self._present and not self.execs and (health is None or health.running)

    async def adopt(self, spec: SandboxSpec) -> None:
        """Become `spec`'s: its name (a rename; labels are the spec's here)."""
        self._check_present(f"rename {self.name}")
        await asyncio.sleep(0)
        self.spec, self.adopted = spec, True

    # -- teardown -----------------------------------------------------------------------------

    async def _remove(self) -> None:
        await asyncio.sleep(0)
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
