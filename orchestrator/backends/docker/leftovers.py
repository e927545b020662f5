"""Finding and removing leftover trial containers (and their services' networks and volumes)
by their labels.

Every container trialbox starts carries `trialbox.trial`, `trialbox.job` and
`trialbox.owner`, so what a crashed orchestrator left behind can always be found again, and
the process that made it and its jobs folder (`sandbox.creator`), so a later process can
tell whether that maker is gone.
"""

from __future__ import annotations

import shutil
from typing import Any, Literal

from orchestrator.backends.docker import api as docker_api
from orchestrator.backends.docker.inspection import engine_is_local
from orchestrator.backends.docker.sandbox import is_slot_folder
from orchestrator.backends.docker.services import remove_network, remove_volume
from orchestrator.common.errors import SandboxNotFoundError
from orchestrator.common.offload import run_blocking
from orchestrator.sandbox import LABEL_JOB, LABEL_OWNER, LABEL_TRIAL, Leftover
from orchestrator.sandbox.creator import LABEL_JOBS_DIR, Creator
from orchestrator.sandbox.spec import SLOT_DIR

LeftoverKind = Literal["container", "network", "volume"]


async def find_leftovers(*, owner: str | None = None, job: str | None = None) -> list[Leftover]:
    """Trial containers (running or not; a sandbox or a Compose service), then the networks
    and volumes of trials' services, optionally only one owner's or one job's."""
    labels = [LABEL_TRIAL]
    if owner is not None:
        labels.append(f"{LABEL_OWNER}={owner}")
    if job is not None:
        labels.append(f"{LABEL_JOB}={job}")
    api = docker_api.docker_client().api
    found = await docker_api.call(
        "list trial containers", api.containers, all=True, filters={"label": labels}
    )
    leftovers = []
    for c in found:
        name = (c.get("Names") or ["?"])[0].lstrip("/")
        slot = slot_folder_of(c.get("Mounts") or [])
        leftovers.append(_leftover(name, c["Labels"], c.get("State", ""), slot_folder=slot))
    networks = await docker_api.call("list trial networks", api.networks, filters={"label": labels})
    # Their state column says what they are, in `trialbox reap`'s table.
    leftovers += [
        _leftover(n["Name"], n.get("Labels") or {}, "network", "network") for n in networks
    ]
    volumes = await docker_api.call("list trial volumes", api.volumes, filters={"label": labels})
    leftovers += [
        _leftover(v["Name"], v.get("Labels") or {}, "volume", "volume")
        for v in (volumes or {}).get("Volumes") or []
    ]
    return leftovers


def _leftover(
    name: str,
    labels: dict[str, str],
    state: str,
    kind: LeftoverKind = "container",
    *,
    slot_folder: str | None = None,
) -> Leftover:
    return Leftover(
        name=name, kind=kind, trial=labels.get(LABEL_TRIAL, ""), job=labels.get(LABEL_JOB, ""),
        owner=labels.get(LABEL_OWNER, ""), state=state, jobs_dir=labels.get(LABEL_JOBS_DIR),
        creator=Creator.from_labels(labels), slot_folder=slot_folder,
    )  # fmt: skip


def slot_folder_of(mounts: list[dict[str, Any]]) -> str | None:
    """The container's slot folder on a local engine's host (a bind mount at `SLOT_DIR`)."""
    for mount in mounts:
        source = mount.get("Source") or ""
        if mount.get("Destination") == SLOT_DIR and engine_is_local() and is_slot_folder(source):
            return str(source)
    return None


async def remove_leftovers(leftovers: list[Leftover]) -> int:
    """Remove these (forcefully): containers first (each with its slot folder), then the
    networks and volumes they used; returns how many were removed."""
    api = docker_api.docker_client().api
    removed = 0
    for leftover in sorted(leftovers, key=lambda item: _ORDER[item.kind]):
        try:
            if leftover.kind == "network":
                await remove_network(leftover.name)
            elif leftover.kind == "volume":
                await remove_volume(leftover.name)
            else:
                await docker_api.call(
                    f"remove container {leftover.name}",
                    api.remove_container, leftover.name, force=True, v=True,
                )  # fmt: skip
            removed += 1
        except SandboxNotFoundError:
            pass  # gone meanwhile
        if leftover.slot_folder is not None and is_slot_folder(leftover.slot_folder):
            await run_blocking(shutil.rmtree, leftover.slot_folder, ignore_errors=True)
    return removed


_ORDER = {"container": 0, "network": 1, "volume": 2}
