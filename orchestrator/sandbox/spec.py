"""What a sandbox is made of, whatever backend makes it: image, identity, the task's limits.

`SandboxSpec` holds the image, the trial's identity, its limits, `mounts` (`Mount`), the task's
`env` and `workdir`, the `files` there from its start, the `jobs_dir` and the `creator`;
`sandbox_name` and the `trialbox.*` labels (`LABEL_TRIAL`, `LABEL_JOB`, `LABEL_OWNER`) are how
a sandbox is found again.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.sandbox.creator import LABEL_JOBS_DIR, Creator, this_process

LABEL_TRIAL = "trialbox.trial"
LABEL_JOB = "trialbox.job"
LABEL_OWNER = "trialbox.owner"
SLOT_DIR = "/run/trialbox-gateway"  # where a sandbox's own slot folder is (`slot_mount`)


def sandbox_name(trial_id: str, job_id: str) -> str:
    """`trialbox-<trial id>.<6 hex of the job id>`."""
    return f"trialbox-{trial_id}.{hashlib.sha256(job_id.encode()).hexdigest()[:6]}"


class Mount(BaseModel):
    """A host folder made visible inside the sandbox (e.g. the trial's gateway socket), or
    a volume of the engine's (`kind` volume: a Compose file's named volume, shared with its
    services)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(description="Absolute path on the engine's host, or a volume's name.")
    kind: Literal["bind", "volume"] = "bind"
    target: str = Field(description="Absolute path inside the sandbox.")
    read_only: bool = True


class SandboxSpec(BaseModel):
    """One sandbox to create: its image, who it belongs to, and the limits it runs under."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str
    trial_id: str
    job_id: str
    owner: str
    cpus: float = 1.0
    memory_mb: int = 2048
    pids_limit: int = 1024
    storage_mb: int | None = Field(
        None, description="Disk the sandbox may write (MiB), held by the backend; None: unheld."
    )
    network_mode: str = "none"
    gpus: int = 0
    mounts: tuple[Mount, ...] = ()
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment of every process in the sandbox (the task's [environment.env]).",
    )
    workdir: str | None = Field(
        None, description="Working directory of every exec; None keeps the image's WORKDIR."
    )
    files: bytes | None = Field(
        None,
        repr=False,
        description="A tar extracted at / before the sandbox starts (modes, owners and times "
        "kept, as `Sandbox.upload` keeps them): there from its first instant, without a copy "
        "into the running sandbox (the trial's /logs).",
    )
    slot_mount: str | None = Field(
        None,
        description="Where a folder of the engine's host that is the sandbox's own is mounted "
        "read-only (`SlotSandbox.slot_folder`), for a host service to bind a socket in once "
        "the sandbox exists (the model gateway: a pooled sandbox is made before its trial) "
        "and for the host to hand files in without the engine's copy (the verifier's tests); "
        "needs `Capabilities.host_mounts`. None: no such folder.",
    )
    jobs_dir: str | None = Field(
        None,
        description="The absolute jobs folder of the trial: a later process on that folder "
        "removes the sandbox once its creator is gone.",
    )
    service_network: str | None = Field(
        None,
        description="The trial's Compose services' network (`sandbox/services.py`), joined "
        "as the host name `main`; with `network_mode` none, the only network (it reaches "
        "the services, nothing else). None: no services.",
    )
    creator: Creator = Field(
        default_factory=this_process, description="The process that makes the sandbox."
    )

    @property
    def name(self) -> str:
        """The sandbox's name: one per trial of one job, so a half-made one can always be
        found, and two engines on one host running the same rollout id never meet."""
        return sandbox_name(self.trial_id, self.job_id)

    @property
    def labels(self) -> dict[str, str]:
        """Every sandbox carries these, so leftovers can always be found and reaped, and
        those of a dead process told from those of a live one."""
        labels = {LABEL_TRIAL: self.trial_id, LABEL_JOB: self.job_id, LABEL_OWNER: self.owner}
        labels |= self.creator.labels
        if self.jobs_dir is not None:
            labels[LABEL_JOBS_DIR] = self.jobs_dir
        return labels
