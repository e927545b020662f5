"""The sandbox protocol: what a trial, its agent and the relay may do with a sandbox.

It is small on purpose (exec, upload, download, destroy) and structurally includes the
relay's own `RelaySandbox`, so every backend's sandbox can be driven by the relay unchanged.
Timeouts are enforced inside the sandbox (`timeout -k`), with a host-side backstop a little
longer; `ExecResult.timed_out` is true only when the in-sandbox limit fired.

Beyond those: `health` (the engine's account from outside, no exec: `Health`),
`stop_all_from_host` and `pids_exhausted` (when no command can run inside), `image_defaults`
(the image's USER and HEALTHCHECK: `ImageDefaults`, `Healthcheck`). `Capabilities` says
what a backend offers, the host's cpus and memory included.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.sandbox.commands import SandboxCommand
from relay import RelaySandbox


class Capabilities(BaseModel):
    """What a backend can give a sandbox; a task that asks for more is refused up front."""

    model_config = ConfigDict(frozen=True)

    network_modes: frozenset[str] = Field(
        frozenset({"none"}), description="Network modes a sandbox may be created with."
    )
    gpus: bool = Field(False, description="Whether GPUs can be attached.")
    host_mounts: bool = Field(
        False,
        description="Whether host folders can be mounted (the model gateway's socket needs "
        "the sandbox on the gateway's host).",
    )
    cpus: float | None = Field(
        None, description="The most cpus one sandbox can get (the host's); None: unknown."
    )
    memory_mb: int | None = Field(
        None, description="The most memory one sandbox can get, in MiB; None: unknown."
    )


class Healthcheck(BaseModel):
    """A readiness check run before the agent starts, with Docker's HEALTHCHECK meaning:
    during the start period failures do not count; after it, `retries` failures in a row
    mean the sandbox never became ready."""

    model_config = ConfigDict(frozen=True)

    command: str = Field(description="A shell command; exit 0 means ready.")
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


class ImageDefaults(BaseModel):
    """What a sandbox's image declares for the processes run in it."""

    model_config = ConfigDict(frozen=True)

    user: str = Field("", description="The image's USER; '' when it sets none (root).")
    healthcheck: Healthcheck | None = None


PIDS_A_COMMAND_NEEDS = 3  # see Health.pids_exhausted


class Health(BaseModel):
    """What the engine says about a sandbox, read from outside it (no exec needed), so a
    fault can be put in its true category: the agent's doing, or the engine's and host's."""

    known: bool = Field(True, description="False when the engine did not answer.")
    exists: bool = True
    running: bool = True
    oom_kills: int = Field(0, description="Processes the kernel killed for memory.")
    died_inside: bool = Field(
        False, description="The sandbox stopped without the engine being asked to."
    )
    stopped_outside: bool = Field(
        False, description="Someone asked the engine to kill or remove it (not this trial)."
    )
    pids_current: int | None = None
    pids_limit: int | None = None
    storage_used_mb: int | None = Field(
        None, description="What the sandbox wrote to disk, as last measured (MiB)."
    )
    storage_limit_mb: int | None = Field(None, description="The task's storage_mb it is held to.")
    storage_exceeded: bool = Field(
        False, description="It wrote up to its storage_mb and was stopped for it."
    )

    @property
    def pids_exhausted(self) -> bool:
        """Too few pids are left for any command of the framework's to run: it needs three
        (the exec's own process, the `timeout` wrapper's shell, one fork of that shell). A
        fork loop whose parents gave up leaves one or two free, and nothing can start."""
        if self.pids_current is None or not self.pids_limit:
            return False
        return self.pids_limit - self.pids_current < PIDS_A_COMMAND_NEEDS


class ExecResult(BaseModel):
    """The outcome of one exec: its exit code and its (capped) merged output."""

    exit_code: int | None = Field(description="None when the exit code could not be read.")
    output: str = Field("", description="stdout and stderr, cut at the output cap.")
    truncated: bool = Field(False, description="True when output was cut.")
    timed_out: bool = Field(False, description="True when the in-sandbox timeout fired.")
    duration_sec: float = 0.0


@runtime_checkable
class SlotSandbox(Protocol):
    """A sandbox made with `SandboxSpec.slot_mount`: the host folder mounted there, its own,
    removed with it (Docker's on a local engine)."""

    @property
    def slot_folder(self) -> Path | None:
        """The folder on this host, or None when the sandbox has none."""
        ...


@runtime_checkable
class Sandbox(RelaySandbox, Protocol):
    """One running sandbox. `destroy()` is idempotent and runs once whatever cancels."""

    @property
    def name(self) -> str:
        """The sandbox's name, unique per trial."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What the backend that made it supports."""
        ...

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
        """Run `sh -c command` (a command value as its backend renders it: `sandbox.commands`)
        as `user` in `workdir`; bounded inside and, as a backstop, outside the sandbox. Never
        runs the command twice."""
        ...

    async def upload(self, tar_bytes: bytes, path: str = "/") -> None:
        """Extract a tar archive at `path` inside the sandbox, ownership and modes kept."""
        ...

    async def upload_file(
        self, path: str, data: bytes, *, mode: int = 0o600, owner: tuple[int, int] = (0, 0)
    ) -> None:
        """Write one file (absolute `path`) with this mode and numeric owner."""
        ...

    async def download(self, path: str, dest: Path, *, file_cap: int) -> list[str]:
        """Copy `path` into the host folder `dest`, each file cut at `file_cap` bytes;
        returns the files that were cut, relative to `dest`."""
        ...

    async def destroy(self) -> None:
        """Remove the sandbox; idempotent, and finished before a cancel goes on."""
        ...

    async def image_defaults(self) -> ImageDefaults:
        """What the sandbox's image declares: its USER and HEALTHCHECK."""
        ...

    async def health(self, *, pids: bool = False) -> Health:
        """The engine's view of the sandbox; `pids` also reads the pid count (slower)."""
        ...

    async def pids_exhausted(self) -> bool:
        """The host's instant reading of the pid count (no exec): every pid is taken. False
        when not, or when this backend cannot tell at once (a remote engine)."""
        ...

    async def stop_all_from_host(self) -> bool:
        """When the sandbox's pids are exhausted (it cannot fork a `kill`), kill every process
        but PID 1 without running anything inside; False when they are not, or this backend
        cannot."""
        ...

    @property
    def destroyed(self) -> bool:
        """True once removal was asked for: the sandbox can no longer be used."""
        ...
