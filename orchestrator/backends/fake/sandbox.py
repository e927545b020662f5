"""One fake sandbox: a host folder for its files, namespaces for its processes (`shell.py`),
and the `Sandbox` protocol with the Docker sandbox's observable behaviour where the package's
docstring does not say otherwise. An exec or file call on a removed sandbox raises
`SandboxNotFoundError`; an exec still running when it is removed exits 137."""

from __future__ import annotations

import asyncio
import io
import os
import posixpath
import shlex
import shutil
import tarfile
import tempfile
import time
import weakref
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from container_runtime import paths
from orchestrator.backends.fake.images import FakeImage
from orchestrator.backends.fake.shell import ExecCall, Namespace, append, run
from orchestrator.common.archive import extract_stream, tar_of_dir, tar_of_files
from orchestrator.common.errors import SandboxConflictError, SandboxNotFoundError
from orchestrator.common.offload import run_blocking
from orchestrator.common.shielding import RunOnce
from orchestrator.sandbox import ExecResult, Health, Healthcheck, ImageDefaults, SandboxSpec
from orchestrator.sandbox.commands import (
    VERIFIER_STDOUT,
    CheckRuntime,
    PrepareAndVerify,
    RunVerifier,
    SandboxCommand,
    bounded_command,
    shell_of,
    timed_out,
)
from relay.commands import Launch

if TYPE_CHECKING:
    from orchestrator.backends.fake.backend import FakeBackend

# What the engine answers for an exec when the sandbox's pids are all taken.
NO_PID_LEFT = "OCI runtime exec failed: fork/exec: resource temporarily unavailable\r\n"
# A handler's stand-in (`run N`): says it started, then exits with what the handler returned.
STAND_INS = "/.trialbox-fake"
STAND_IN = f'echo >{STAND_INS}/$1.start; read -r rc <{STAND_INS}/$1.done; exit "$rc"\n'


class User(NamedTuple):
    """Who a process runs as."""

    name: str
    uid: int
    gid: int


# The image's passwd: what a Debian image has that trialbox's tests use (nobody: "not root").
USERS = {"root": User("root", 0, 0), "nobody": User("nobody", 65534, 65534)}


def resolve_user(user: str, default: str) -> User:
    """Who `user` names, as `docker exec -u` resolves it: a name from the passwd or a numeric
    `uid[:gid]`; "" is the image's USER. Else a LookupError in the engine's words."""
    wanted = user or default or "root"
    uid, _, gid = wanted.partition(":")
    if wanted in USERS:
        return USERS[wanted]
    if not uid.isdigit() or not (gid or "0").isdigit():
        raise LookupError(f"unable to find user {wanted}: no matching entries in passwd file")
    return User(uid, int(uid), int(gid or uid))


class FakeSandbox:
    """A sandbox in this process, made by `FakeBackend.create_sandbox`, whose scripting hooks
    (`agent`, `verifier`) and limits it follows; `destroy()` is idempotent."""

    def __init__(self, spec: SandboxSpec, image: FakeImage, backend: FakeBackend) -> None:
        self.spec, self.image, self.backend = spec, image, backend
        self.capabilities = backend.offered
        # Its files, there until this object is dropped: a test reads what a trial left.
        self.root = Path(tempfile.mkdtemp(prefix="trialbox-fake-"))
        weakref.finalize(self, shutil.rmtree, self.root, ignore_errors=True)
        self.root.chmod(0o755)
        self.workdir = spec.workdir or image.workdir  # created, as the engine's -w does
        for folder in ("/tmp", self.workdir):
            self.path(folder).mkdir(parents=True, exist_ok=True)
        self.path("/tmp").chmod(0o1777)
        if spec.files is not None:  # placed before the start, as the Docker backend does
            self._extract(spec.files, "/")
        self.healthcheck: Healthcheck | None = None  # the image's HEALTHCHECK, set by tests
        # What the engine says of the sandbox; a handler may change it mid-trial, as the
        # kernel or someone outside would (an OOM kill, every pid taken).
        self.engine_health: Health | None = backend.health
        self._ns = Namespace(self.root)  # its processes', ended with it or when it is dropped
        self._end = weakref.finalize(self, self._ns.kill, init=True)
        self._runs = 0
        self.execs: list[SandboxCommand] = []  # every command asked for, in order
        self.adopted = False  # taken from a warm pool
        self._present = True
        self._destroy = RunOnce(self._remove, backend.limits.destroy_settle_sec)

    @property
    def name(self) -> str:
        return self.spec.name

    def path(self, inside: str) -> Path:
        """Where the sandbox's absolute path `inside` is on the host."""
        return self.root / posixpath.normpath(inside).lstrip("/")

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
            who = resolve_user(user, self.image.user)
        except LookupError as exc:  # the engine's own words and exit code
            return ExecResult(exit_code=126, output=f"{exc.args[0]}\r\n")
        output = bytearray()
        call = ExecCall(
            self.root, env=self.spec.env | dict(env or {}), user=who,
            workdir=workdir or self.workdir, out=output.extend, err=output.extend,
            namespace=self._ns,
        )  # fmt: skip
        started = time.monotonic()
        ran = asyncio.ensure_future(self._run(command, call, timeout_sec))
        await asyncio.wait({ran})  # a cancelled caller leaves the process running
        cap = output_cap or self.backend.limits.exec_output_cap_bytes
        return ExecResult(
            exit_code=ran.result(),
            output=bytes(output[:cap]).decode("utf-8", errors="replace"),
            truncated=len(output) > cap,
            timed_out=timed_out(timeout_sec, ran.result(), time.monotonic() - started),
            duration_sec=time.monotonic() - started,
        )

    async def _run(self, command: SandboxCommand, call: ExecCall, limit: float | None) -> int:
        """The exec's process. A handler runs in place of the launch's subject (the agent's)
        or of tests/test.sh (the verifier's), while a stand-in process holds that place: it
        says it started through one FIFO, the handler starts then, and its exit code goes to
        the stand-in through another; the handler is cancelled if the exec ends first (a
        signal, the timeout, the sandbox removed)."""
        self._runs += 1
        stand_in, test_sh = f"{STAND_INS}/run {self._runs}", f"{paths.TESTS_DIR}/test.sh"
        handler, text, out = None, shell_of(command), call.out
        if isinstance(command, Launch) and self.backend.agent is not None:
            where, env = command.paths, dict(call.env)
            if command.has_env and self.path(where.env_file).is_file():
                pairs = shlex.split(self.path(where.env_file).read_text())
                env.update(item.partition("=")[::2] for item in pairs)
            handler, text = self.backend.agent, replace(command, subject=f"sh {stand_in}").shell()
            call = replace(
                call, command=command.subject, env=env,
                out=partial(append, self.path(where.stdout)),
                err=partial(append, self.path(where.stderr)),
            )  # fmt: skip
        elif isinstance(command, RunVerifier | PrepareAndVerify) and self.backend.verifier:
            sink = partial(append, self.path(VERIFIER_STDOUT))
            call = replace(call, command=test_sh, out=sink, err=sink)
            handler, text = self.backend.verifier, command.shell().replace(test_sh, stand_in)
        elif isinstance(command, CheckRuntime):  # no runtime here: the backend says what it has
            text = "exit 127" if self.backend.runtime == "absent" else ":"
        argv = [
            *self._ns.argv(call.user.uid, call.user.gid, call.workdir, call.env, leader=True),
            *bounded_command(text, limit, self.backend.limits.exec_kill_after_sec),
        ]
        if handler is None:
            return await run(argv, out)
        self.path(STAND_INS).mkdir(exist_ok=True)
        self.path(f"{STAND_INS}/run").write_text(STAND_IN)
        fifos = [self.path(f"{STAND_INS}/{self._runs}.{end}") for end in ("start", "done")]
        for fifo in fifos:
            os.mkfifo(fifo)
            fifo.chmod(0o666)
        start, done = (os.open(fifo, os.O_RDWR | os.O_NONBLOCK) for fifo in fifos)
        loop, began = asyncio.get_running_loop(), asyncio.Event()
        loop.add_reader(start, began.set)

        async def handled() -> None:
            await began.wait()
            loop.remove_reader(start)
            status = None
            try:
                status = await handler(self, call)
            finally:  # a handler that raised: its exec's error, once the stand-in exited
                os.write(done, b"%d\n" % (status or 0))

        work, ran = asyncio.ensure_future(handled()), asyncio.ensure_future(run(argv, out))
        try:
            await asyncio.wait({ran})
            work.cancel()
            await asyncio.wait({work})
            if not work.cancelled() and (error := work.exception()) is not None:
                raise error
            return ran.result()
        finally:
            loop.remove_reader(start)
            for fd, fifo in zip((start, done), fifos, strict=True):
                os.close(fd)
                fifo.unlink(missing_ok=True)

    # -- files --------------------------------------------------------------------------------

    async def upload(self, tar_bytes: bytes, path: str = "/") -> None:
        """Extract a tar archive at `path` (an existing folder), modes kept."""
        what = f"upload to {path} in {self.name}"
        self._check_present(what)
        await asyncio.sleep(0)  # a real copy takes a moment: a cancel can land here
        if not self.path(path).is_dir():
            raise SandboxNotFoundError(f"{what}: not found (no such folder)")
        self._extract(tar_bytes, path)

    def _extract(self, tar_bytes: bytes, at: str) -> None:
        """As the engine's copy: each member's mode and owner kept (an existing folder takes
        the archive's), links and special files skipped; nothing lands outside the folder."""

        def kept(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
            if not (member.isfile() or member.isdir()):
                return None
            return tarfile.tar_filter(member, dest).replace(mode=member.mode, deep=False)

        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as archive:
            archive.extractall(self.path(at), filter=kept)

    async def upload_file(
        self, path: str, data: bytes, *, mode: int = 0o600, owner: tuple[int, int] = (0, 0)
    ) -> None:
        """Write one file (absolute `path`) with this mode and owner."""
        await self.upload(tar_of_files({path.lstrip("/"): data}, mode=mode, owner=owner), "/")

    async def download(self, path: str, dest: Path, *, file_cap: int) -> list[str]:
        """Copy `path` into the host folder `dest`, each file capped; returns the files cut."""
        what = f"download {path} from {self.name}"
        self._check_present(what)
        source = self.path(path)
        if not source.exists():
            raise SandboxNotFoundError(f"{what}: not found (no such file or folder)")
        archive = tar_of_dir(source, source.name)  # named from its last component, as Docker's
        return await run_blocking(extract_stream, [archive], dest, file_cap=file_cap)

    # -- from outside ---------------------------------------------------------------------------

    async def image_defaults(self) -> ImageDefaults:
        return ImageDefaults(user=self.image.user, healthcheck=self.healthcheck)

    async def health(self, *, pids: bool = False) -> Health:
        """The engine's account (`engine_health`), else a sandbox that is simply there, or
        removed (by someone: Docker's events cannot tell who). As Docker's, the pid count
        (its live processes and PID 1) is read only when asked for, of a running sandbox."""
        scripted = self.engine_health
        if scripted is not None:
            if pids and scripted.running:
                return scripted
            return scripted.model_copy(update={"pids_current": None, "pids_limit": None})
        if not self._present:
            return Health(exists=False, running=False, stopped_outside=True)
        count = len(self._ns.pids()) if pids else None
        return Health(pids_current=count, pids_limit=self.spec.pids_limit if pids else None)

    async def pids_exhausted(self) -> bool:
        """The pid count as Docker's host-side reading gives it."""
        return (await self.health(pids=True)).pids_exhausted

    async def stop_all_from_host(self) -> bool:
        """Every process ends at once, as SIGKILL from the host would, and only PID 1 holds a
        pid then; only when the pids are exhausted, as Docker's does."""
        scripted = self.engine_health
        if scripted is None or not await self.pids_exhausted():
            return False
        self._ns.kill(init=False)
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
        if self._present:
            self._present = False
            self._end()

    async def destroy(self) -> None:
        """Remove the sandbox. Runs once, whatever cancels the caller meanwhile."""
        await self._destroy()

    @property
    def destroyed(self) -> bool:
        """True once removal was asked for: the sandbox can no longer be used."""
        return self._destroy.started
