"""One fake sandbox: a host folder for its filesystem, a process table (`processes.py`), and
the `Sandbox` protocol with the Docker sandbox's observable behaviour, where the package's
docstring does not say otherwise. The framework's commands (`relay.commands`,
`sandbox.commands`) are answered from what they mean, with the output their own `answer`
helpers give; the task's own text (a string) runs with the host's real sh (`shell.py`), or
the backend's handler, and so do the commands that need no process of another exec (a path's
test, a file's removal, the user's ids: their own sh). An exec or file call on a removed
sandbox raises `SandboxNotFoundError`; an exec still running when the sandbox is removed
exits 137.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
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
from orchestrator.backends.fake.processes import ProcessTable
from orchestrator.backends.fake.shell import ExecCall, Handler, append, run_sh
from orchestrator.common.archive import extract_stream, tar_of_dir, tar_of_files
from orchestrator.common.errors import SandboxConflictError, SandboxError, SandboxNotFoundError
from orchestrator.common.offload import run_blocking
from orchestrator.common.shielding import RunOnce
from orchestrator.sandbox import ExecResult, Health, Healthcheck, ImageDefaults, SandboxSpec
from orchestrator.sandbox.commands import (
    REWARD_FILES,
    VERIFIER_STDOUT,
    CheckRuntime,
    PathExists,
    PrepareAndVerify,
    PrepareVerifier,
    RunVerifier,
    SandboxCommand,
)
from relay.commands import GroupAlive, Launch, ProbeLeader, RemoveFile, Signal, UserIds

if TYPE_CHECKING:
    from orchestrator.backends.fake.backend import FakeBackend

# What the engine answers for an exec when the sandbox's pids are all taken.
NO_PID_LEFT = "OCI runtime exec failed: fork/exec: resource temporarily unavailable\r\n"
# The framework's folders as the verifier's preparation puts them back: path, mode.
FRAMEWORK_DIRS = ((paths.LOGS_DIR, 0o755), (paths.AGENT_DIR, 0o777), (paths.ARTIFACTS_DIR, 0o777))


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
        # Its filesystem: a host folder, there until this object is dropped (so a test reads
        # what a finished trial left) or the process ends.
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
        self.processes = ProcessTable()
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
        )  # fmt: skip
        started = time.monotonic()
        proc = self.processes.start(
            partial(self._answer, command, call),
            leader=isinstance(command, Launch),
            timeout=timeout_sec,
        )
        await asyncio.wait({proc.task})  # a cancelled caller leaves the process running
        cap = output_cap or self.backend.limits.exec_output_cap_bytes
        return ExecResult(
            exit_code=proc.exit_code,
            output=bytes(output[:cap]).decode("utf-8", errors="replace"),
            truncated=len(output) > cap,
            timed_out=proc.timed_out,
            duration_sec=time.monotonic() - started,
        )

    async def _answer(self, command: SandboxCommand, call: ExecCall, pid: int) -> int:
        """What `command` does, by its kind."""
        match command:
            case str():
                return await run_sh(command, call)
            case PathExists() | RemoveFile() | UserIds():  # their own sh, as the exec's user
                return await run_sh(command.shell(), call)
            case Launch():
                return await self._launch(command, call, pid)
            case RunVerifier():
                return await self._run_verifier(command, call)
            case PrepareAndVerify():
                call.print(self._prepare(command.prepare, pid))
                return await self._at_once(command, call)
            case PrepareVerifier():
                call.print(self._prepare(command, pid))
            case ProbeLeader():
                return self._probe(command, call)
            case Signal():
                if not self.processes.signal(command.pid, command.signal):
                    call.err(b"sh: 1: kill: No such process\n")
                    return 1
            case GroupAlive():
                call.print(GroupAlive.answer(command.pid in self.processes.pids()))
            case CheckRuntime():
                return 127 if self.backend.runtime == "absent" else 0
            case _:
                raise SandboxError(f"the fake backend does not know {command!r}")
        return 0

    async def _run(self, handler: Handler | None, call: ExecCall, text: str) -> int:
        """The backend's handler for `call`, else `text` run by sh."""
        if handler is None:
            return await run_sh(text, call)
        status = await handler(self, call)
        return 0 if status is None else status

    async def _launch(self, launch: Launch, call: ExecCall, pid: int) -> int:
        """The relay's launcher: record the pid, source the credentials, redirect, run."""
        where = launch.paths
        self.path(where.state_dir).mkdir(parents=True, exist_ok=True)
        self.path(where.pid_file).write_bytes(b"%d\n" % pid)
        env = dict(call.env)
        if launch.has_env:
            pairs = shlex.split(self.path(where.env_file).read_text())
            self.path(where.env_file).unlink()
            env.update(item.partition("=")[::2] for item in pairs)
        for path in (where.stdout, where.stderr):
            self.path(path).write_bytes(b"")
        child = replace(
            call, command=launch.subject, env=env,
            out=partial(append, self.path(where.stdout)),
            err=partial(append, self.path(where.stderr)),
        )  # fmt: skip
        return await self._run(self.backend.agent, child, launch.subject)

    def _probe(self, probe: ProbeLeader, call: ExecCall) -> int:
        """The leader's pid, as the relay's checked probe prints it: the pid file's, if that
        is a live leader, else the one live leader; none or two is no answer."""
        leaders = [proc.pid for proc in self.processes.live() if proc.leader]
        with contextlib.suppress(OSError, ValueError):
            guess = int(self.path(probe.paths.pid_file).read_bytes())
            if guess in leaders:
                leaders = [guess]
        if len(leaders) != 1:
            return 3 if leaders else 1
        call.print(ProbeLeader.answer(leaders[0]))
        return 0

    def _prepare(self, prepare: PrepareVerifier, pid: int) -> str:
        """Every other process killed (when asked), the framework's folders given back their
        modes, then /logs/verifier and /tests (and /logs/agent, when asked) emptied; as the
        exec says it (with nothing found to report: the fake does not look for wrong owners
        or symlinks)."""
        stopped = None
        if prepare.stop_leftovers:
            others = [other for other in self.processes.pids() if other != pid]
            for other in others:
                self.processes.signal(other, "KILL")
            stopped = len(others)
        emptied = [paths.VERIFIER_DIR, paths.TESTS_DIR, *prepare.remove]
        for path in emptied + ([paths.AGENT_DIR] if prepare.empty_agent else []):
            shutil.rmtree(self.path(path), ignore_errors=True)  # `rm -rf`, a file or a folder
            self.path(path).unlink(missing_ok=True)
        for path, mode in (*FRAMEWORK_DIRS, (paths.VERIFIER_DIR, 0o755)):
            self.path(path).mkdir(parents=True, exist_ok=True)
            self.path(path).chmod(mode)
        return PrepareVerifier.answer([], stopped)

    async def _at_once(self, command: PrepareAndVerify, call: ExecCall) -> int:
        """The staged tests (and conversation) moved into place, then the run."""
        trajectory = self.path(f"{paths.AGENT_DIR}/trajectory.json")
        handed_over = command.hand_over and not trajectory.exists() and not trajectory.is_symlink()
        self.path(command.staged).rename(self.path(paths.TESTS_DIR))
        if handed_over:
            self.path(command.conversation).rename(trajectory)
        self.path(command.conversation).unlink(missing_ok=True)
        call.print(command.answer("", handed_over, ""))
        try:
            return await asyncio.wait_for(self._run_verifier(command.run, call), command.limit[0])
        except TimeoutError:
            return 124  # as `timeout` exits

    async def _run_verifier(self, run: RunVerifier, call: ExecCall) -> int:
        """tests/test.sh (the backend's handler, else its text) with its output to
        test-stdout.txt, then the reward files as the run's snapshot prints them."""
        script = f"{paths.TESTS_DIR}/test.sh"
        self.path(VERIFIER_STDOUT).write_bytes(b"")
        sink = partial(append, self.path(VERIFIER_STDOUT))
        child = replace(call, command=script, out=sink, err=sink)
        status = await self._run(self.backend.verifier, child, f"sh {script}")
        snapshot: dict[str, bytes | None] = {}
        for name in REWARD_FILES:
            reward = self.path(f"{paths.VERIFIER_DIR}/{name}")
            if reward.is_symlink() or reward.exists():
                snapshot[name] = reward.read_bytes() if reward.is_file() else None
        call.print(run.answer(snapshot))
        return status

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
        if not pids:
            return Health()
        count = len(self.processes.pids()) + 1
        return Health(pids_current=count, pids_limit=self.spec.pids_limit)

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
        if self._present:
            self._present = False
            self.processes.end_all()

    async def destroy(self) -> None:
        """Remove the sandbox. Runs once, whatever cancels the caller meanwhile."""
        await self._destroy()

    @property
    def destroyed(self) -> bool:
        """True once removal was asked for: the sandbox can no longer be used."""
        return self._destroy.started
