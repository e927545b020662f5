"""One Docker container per trial: create, exec, move files, destroy.

The image's ENTRYPOINT is kept and only the command is replaced, by a quiet `sh` reaper
(KEEPALIVE): zombies are reaped and no signal sent from inside stops it, so an agent cannot
stop its own sandbox, and no python3 is needed in the image. Files move by archive copy
through the API, never by bind mounts: that works the same against a remote engine and
leaves no root-owned files on the host (the bind mounts, both read-only, are the model
gateway's socket and, on a local engine, the runtime venv: `backend.py`).

`DockerSandbox` creates the container (with the spec's mounts, env and working folder), runs
execs, copies archives, reads the image's USER and HEALTHCHECK, and destroys it idempotently.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import tempfile
import time
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any

from docker.models.containers import Container
from docker.types import Mount as DockerMount

from orchestrator.backends.docker import api as docker_api
from orchestrator.backends.docker.capabilities import docker_capabilities
from orchestrator.backends.docker.channel import open_docker_channel
from orchestrator.backends.docker.inspection import (
    engine_is_local,
    health_blocking,
    pristine_blocking,
    stop_all_from_host_blocking,
)
from orchestrator.backends.docker.prestart import place_files
from orchestrator.backends.docker.storage import DiskWatch, create_sized
from orchestrator.backends.docker.terminal import DockerTerminal, open_docker_terminal
from orchestrator.common.archive import extract_stream, tar_of_files
from orchestrator.common.errors import (
    SandboxConflictError,
    SandboxError,
    SandboxNotFoundError,
    SandboxTimeoutError,
)
from orchestrator.common.limits import Limits
from orchestrator.common.offload import run_blocking
from orchestrator.common.shielding import RunOnce, ride_out_cancels
from orchestrator.sandbox import (
    Capabilities,
    ExecResult,
    Health,
    Healthcheck,
    ImageDefaults,
    SandboxSpec,
)
from orchestrator.sandbox.channel import ShellChannel, kill_command
from orchestrator.sandbox.commands import (
    KEEPALIVE,
    SandboxCommand,
    bounded_command,
    shell_of,
    timed_out,
)
from orchestrator.sandbox.terminal import kill_session_command
from orchestrator.tasks.compose import MAIN_SERVICE

SIGNAL_TIMEOUT_SEC = 10.0  # a channel's kill exec
SLOT_PREFIX = "tbslot-"  # a sandbox's slot folder: a folder of this host's temporary folder


def is_slot_folder(path: str) -> bool:
    """Whether `path` (a mount's source) is a slot folder this backend makes: only such a
    folder is removed with a container found left over."""
    folder = Path(path)
    return folder.parent == Path(tempfile.gettempdir()) and folder.name.startswith(SLOT_PREFIX)


def _healthcheck_of(config: Mapping[str, object] | None) -> Healthcheck | None:
    """The image's HEALTHCHECK as Docker stores it (durations in ns, 0 for the default)."""
    probe = config.get("Test") if config else None
    if not config or not isinstance(probe, list) or not probe:
        return None
    test = [str(part) for part in probe]
    if test[0] == "NONE" or len(test) < 2:
        return None
    command = test[1] if test[0] == "CMD-SHELL" else shlex.join(test[1:])

    def seconds(key: str, default: float) -> float:
        value = config.get(key)
        return int(value) / 1e9 if isinstance(value, int) and value > 0 else default

    retries = config.get("Retries")
    return Healthcheck(
        command=command, interval_sec=seconds("Interval", 30.0),
        timeout_sec=seconds("Timeout", 30.0), start_period_sec=seconds("StartPeriod", 0.0),
        start_interval_sec=seconds("StartInterval", 5.0),
        retries=retries if isinstance(retries, int) and retries > 0 else 3,
    )  # fmt: skip


def _network_of(spec: SandboxSpec) -> dict[str, object]:
    """The create's network: the spec's mode; a sandbox without a network that has Compose
    services joins only their network (internal: it reaches them and nothing else), as
    `main`. With a network, the services' one is connected after the create."""
    if spec.service_network is None or spec.network_mode != "none":
        return {"network_mode": spec.network_mode}
    endpoint = docker_api.docker_client().api.create_endpoint_config(aliases=[MAIN_SERVICE])
    return {"network": spec.service_network,
            "networking_config": {spec.service_network: endpoint}}  # fmt: skip


class DockerSandbox:
    """A running container. Use `await DockerSandbox.create(spec)`; `destroy()` is idempotent."""

    def __init__(
        self,
        container_id: str,
        spec: SandboxSpec,
        limits: Limits | None = None,
        capabilities: Capabilities | None = None,
    ) -> None:
        self.container_id = container_id
        self.spec = spec
        self.limits = limits or Limits()
        # The backend's (it read the engine's cpus and memory); made alone: those unknown.
        self._capabilities = capabilities or docker_capabilities()
        self.created_at = time.time()
        self._destroy = RunOnce(self._remove, self.limits.destroy_settle_sec)
        self._disk: DiskWatch | None = None  # storage.py: holds it to spec.storage_mb
        self._channels: list[ShellChannel] = []  # open_channel's, dropped at destroy
        self._terminals: list[DockerTerminal] = []  # open_terminal's, dropped at destroy
        # The engine's account of the container as created (its image's USER and HEALTHCHECK,
        # its layer's folder): what `image_defaults` and the disk watch read, without asking.
        self._created: Mapping[str, Any] | None = None
        self.adopted = False  # taken from a warm pool (`adopt`)
        self.slot_folder: Path | None = None  # `SandboxSpec.slot_mount`'s, removed with it

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @classmethod
    async def create(
        cls,
        spec: SandboxSpec,
        limits: Limits | None = None,
        capabilities: Capabilities | None = None,
    ) -> DockerSandbox:
        """Create the container, place `spec.files` in it and start it; a cancel or error at
        any point leaves nothing.

        The container is named after the trial, so whatever went wrong (a cancel while the
        engine was creating it, or a retried create whose first try did succeed) it can be
        found and removed by that name.
        """
        client = docker_api.docker_client()
        # The sandbox's own folder of this host, for the gateway to bind its socket in later.
        slot = Path(tempfile.mkdtemp(prefix=SLOT_PREFIX)) if spec.slot_mount else None
        mounts = [DockerMount(m.target, m.source, type=m.kind, read_only=m.read_only)
                  for m in spec.mounts]  # fmt: skip
        if slot is not None and spec.slot_mount is not None:
            slot.chmod(0o755)
            mounts.append(DockerMount(spec.slot_mount, str(slot), type="bind", read_only=True))

        def create(extra: Mapping[str, object]) -> Awaitable[Container]:
            return docker_api.call(
                f"create a container from {spec.image}",
                client.containers.create,
                spec.image,
                command=["sh", "-c", KEEPALIVE],
                environment=dict(spec.env),
                working_dir=spec.workdir,
                detach=True,
                name=spec.name,
                labels=spec.labels,
                **_network_of(spec),
                nano_cpus=int(spec.cpus * 1e9),
                mem_limit=f"{spec.memory_mb}m",
                pids_limit=spec.pids_limit,
                security_opt=["no-new-privileges"],
                mounts=mounts,
                **extra,
            )

        async def made() -> tuple[Container, bool]:
            """The created container, with `spec.files` placed in it: one piece of work, so
            a cancel lets it end before the container is removed."""
            container, enforced = await create_sized(spec.storage_mb, create)
            if spec.files is not None:
                await place_files(container.id, container.attrs, spec.files)
            if spec.service_network is not None and spec.network_mode != "none":
                await docker_api.call(
                    f"connect {spec.name} to {spec.service_network}",
                    client.api.connect_container_to_network, container.id,
                    spec.service_network, aliases=[MAIN_SERVICE],
                )  # fmt: skip
            return container, enforced

        creating = asyncio.ensure_future(made())
        try:
            container, enforced = await asyncio.shield(creating)
            sandbox = cls(container.id, spec, limits, capabilities)
            sandbox.slot_folder = slot
            sandbox._created = container.attrs  # the SDK's create inspected it already
            await docker_api.call(f"start container {container.short_id}", container.start)
            if spec.storage_mb is not None:
                sandbox._disk = DiskWatch(
                    container.id, spec.storage_mb, enforced=enforced, attrs=container.attrs
                ).start()
        except SandboxConflictError:
            raise  # the name belongs to another container: not ours to remove
        except BaseException:
            settle = (limits or Limits()).create_settle_sec
            cancelled = await ride_out_cancels(creating, settle)
            await cls(spec.name, spec, limits).destroy()
            if slot is not None:
                shutil.rmtree(slot, ignore_errors=True)
            if cancelled:
                raise asyncio.CancelledError from None
            raise
        return sandbox

    # -- a warm pool's (sandbox/pool.py) ---------------------------------------------------

    async def pristine(self) -> bool:
        """Running, and by the engine's own events since its creation nothing ran in it (no
        exec, from trialbox or from outside), nothing killed it, no OOM."""
        return await docker_api.call(
            f"inspect container {self.container_id[:12]}",
            pristine_blocking, self.container_id, self.created_at,
        )  # fmt: skip

    async def adopt(self, spec: SandboxSpec) -> None:
        """Become `spec`'s: renamed to its name (labels cannot change on this engine: they
        stay the pool's, which `trialbox reap` finds by its creator as well)."""
        api = docker_api.docker_client().api
        await docker_api.call(
            f"rename container {self.container_id[:12]} to {spec.name}",
            api.rename, self.container_id, spec.name,
        )  # fmt: skip
        self.spec, self.adopted = spec, True

    # -- exec ---------------------------------------------------------------------------------

    def _exec_blocking(
        self, argv: list[str], env: Mapping[str, str] | None, user: str, workdir: str | None,
        output_cap: int,
    ) -> tuple[int | None, bytes, bool]:  # fmt: skip
        api = docker_api.docker_client().api
        exec_id = api.exec_create(
            self.container_id, argv, environment=dict(env or {}), user=user, workdir=workdir
        )["Id"]
        kept = bytearray()
        truncated = False
        with docker_api.exec_output(exec_id) as output:
            for chunk in output:
                room = output_cap - len(kept)
                if room > 0:
                    kept += chunk[:room]
                if len(chunk) > max(room, 0):
                    truncated = True  # keep draining: the exec ends when its pipes close
        return api.exec_inspect(exec_id).get("ExitCode"), bytes(kept), truncated

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
        """Run `sh -c command` (a command value rendered to sh); bounded inside the container
        and, as a backstop, on the host."""
        limits = self.limits
        argv = bounded_command(shell_of(command), timeout_sec, limits.exec_kill_after_sec)
        cap = output_cap or limits.exec_output_cap_bytes
        started = time.monotonic()
        backstop = (
            None
            if timeout_sec is None
            else timeout_sec + limits.exec_kill_after_sec + limits.exec_host_backstop_sec
        )
        what = f"exec in {self.container_id[:12]}"
        try:
            exit_code, output, truncated = await asyncio.wait_for(
                docker_api.call_once(what, self._exec_blocking, argv, env, user, workdir, cap),
                backstop,
            )
        except TimeoutError as exc:
            raise SandboxTimeoutError(f"{what}: no answer within {backstop:.0f} s") from exc
        return ExecResult(
            exit_code=exit_code,
            output=output.decode("utf-8", errors="replace"),
            truncated=truncated,
            timed_out=timed_out(timeout_sec, exit_code, time.monotonic() - started),
            duration_sec=time.monotonic() - started,
        )

    async def open_channel(self, user: str = "") -> ShellChannel | None:
        """A command channel (`sandbox/channel.py`) running as `user`: one exec kept open for
        many commands. None when one cannot start here (an engine over TLS or SSH, an image
        without `sh`'s tools): use `exec`. Engine errors are `SandboxError`s. A channel still
        open at `destroy()` is dropped with the sandbox."""
        if self.destroyed:
            raise SandboxError(f"sandbox {self.name} is destroyed")

        async def signal(name: str, groups: list[int]) -> None:
            await self.exec(kill_command(name, groups), user=user, timeout_sec=SIGNAL_TIMEOUT_SEC)

        channel = await open_docker_channel(
            self.container_id, user, signal, kill_grace_sec=self.limits.exec_kill_after_sec
        )
        if channel is not None:
            self._channels = [c for c in self._channels if not c.closed] + [channel]
        return channel

    async def open_terminal(
        self,
        user: str = "",
        cols: int = 160,
        rows: int = 40,
        *,
        workdir: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> DockerTerminal | None:
        """A terminal (`sandbox/terminal.py`): a shell as `user` on a pseudo-terminal of
        `cols` x `rows`, kept open; None when one cannot start here (an engine over TLS or
        SSH, an image without `sh`). Its `close()` kills its session's processes; one still
        open at `destroy()` is dropped with the sandbox."""
        if self.destroyed:
            raise SandboxError(f"sandbox {self.name} is destroyed")

        async def signal(name: str, session: int) -> None:
            await self.exec(
                kill_session_command(session, name), user=user, timeout_sec=SIGNAL_TIMEOUT_SEC
            )

        terminal = await open_docker_terminal(
            self.container_id, user, signal, cols=cols, rows=rows, workdir=workdir, env=env
        )
        if terminal is not None:
            self._terminals = [t for t in self._terminals if not t.closed] + [terminal]
        return terminal

    # -- files --------------------------------------------------------------------------------

    async def upload(self, tar_bytes: bytes, path: str = "/") -> None:
        """Extract a tar archive at `path` inside the container."""
        api = docker_api.docker_client().api
        ok = await docker_api.call(
            f"upload to {path} in {self.container_id[:12]}",
            api.put_archive, self.container_id, path, tar_bytes,
        )  # fmt: skip
        if not ok:
            raise SandboxError(f"upload to {path} in {self.container_id[:12]} was refused")

    async def upload_file(
        self, path: str, data: bytes, *, mode: int = 0o600, owner: tuple[int, int] = (0, 0)
    ) -> None:
        """Write one file (absolute `path`) with this mode and numeric owner."""
        await self.upload(tar_of_files({path.lstrip("/"): data}, mode=mode, owner=owner), "/")

    def _download_blocking(self, path: str, dest: Path, file_cap: int) -> list[str]:
        dest.mkdir(parents=True, exist_ok=True)
        # Closed however the extraction ends: one cut part-way (a full host disk) would
        # otherwise keep the container busy, and its removal would block.
        with docker_api.archive_chunks(self.container_id, path, 1 << 20) as chunks:
            return extract_stream(chunks, dest, file_cap=file_cap)

    async def download(self, path: str, dest: Path, *, file_cap: int) -> list[str]:
        """Copy `path` from the container into the host folder `dest`, each file capped.

        Returns the files that were cut (relative to `dest`).
        """
        return await docker_api.call_once(
            f"download {path} from {self.container_id[:12]}",
            self._download_blocking, path, dest, file_cap,
        )  # fmt: skip

    # -- from outside ---------------------------------------------------------------------------

    async def image_defaults(self) -> ImageDefaults:
        """The USER and HEALTHCHECK of the container's image (its merged config): as the
        engine told them at the create (they never change after it), else asked now."""
        attrs = self._created or await docker_api.call(
            f"inspect container {self.container_id[:12]}",
            docker_api.docker_client().api.inspect_container, self.container_id,
        )  # fmt: skip
        config = (attrs or {}).get("Config") or {}
        return ImageDefaults(
            user=config.get("User") or "", healthcheck=_healthcheck_of(config.get("Healthcheck"))
        )

    async def health(self, *, pids: bool = False) -> Health:
        """The engine's account (events, state, and with `pids` the pid count): no exec."""
        try:
            health = await docker_api.call(
                f"inspect container {self.container_id[:12]}",
                health_blocking, self.container_id, self.created_at, pids,
            )  # fmt: skip
        except SandboxError:
            health = Health(known=False)
        return health if self._disk is None else self._disk.mark(health)

    async def pids_exhausted(self) -> bool:
        """The container's pids cgroup, read on this host (instant). False with a remote
        engine: its stats take a second, and its processes cannot be stopped from here."""
        return engine_is_local() and (await self.health(pids=True)).pids_exhausted

    async def stop_all_from_host(self) -> bool:
        """Only for a sandbox whose pids are exhausted (nothing else can run a `kill`): any
        other failure to run a command is no reason to kill the agent's servers."""
        if not await self.pids_exhausted():
            return False
        try:
            return await docker_api.call(
                f"stop the processes of {self.container_id[:12]} from the host",
                stop_all_from_host_blocking, self.container_id,
            )  # fmt: skip
        except SandboxError:
            return False

    # -- teardown -----------------------------------------------------------------------------

    async def _remove(self) -> None:
        if self._disk is not None:
            self._disk.stop()
        for channel in self._channels:  # an open exec stream would hold up the removal
            await channel.abandon()
        self._channels.clear()
        for terminal in self._terminals:
            await terminal.abandon()
        self._terminals.clear()
        api = docker_api.docker_client().api
        try:
            await docker_api.call(
                f"remove container {self.container_id[:12]}",
                api.remove_container, self.container_id, force=True, v=True,
            )  # fmt: skip
        except SandboxNotFoundError:
            pass  # already gone: the goal of teardown is met
        if self.slot_folder is not None:  # unmounted now: the container is gone
            await run_blocking(shutil.rmtree, self.slot_folder, ignore_errors=True)

    async def destroy(self) -> None:
        """Remove the sandbox. Runs once, whatever cancels the caller meanwhile."""
        await self._destroy()

    @property
    def destroyed(self) -> bool:
        """True once removal was asked for: the sandbox can no longer be used."""
        return self._destroy.started
