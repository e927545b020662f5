"""Finding and removing leftover trial containers by their labels.

Every container trialbox starts carries `trialbox.trial`, `trialbox.job` and
`trialbox.owner`, so what a crashed orchestrator left behind can always be found again, and
the process that made it and its jobs folder (`sandbox.creator`), so a later process can
tell whether that maker is gone.
"""

from __future__ import annotations

from orchestrator.backends.docker import api as docker_api
from orchestrator.common.errors import SandboxNotFoundError
from orchestrator.sandbox import LABEL_JOB, LABEL_OWNER, LABEL_TRIAL, Leftover
from orchestrator.sandbox.creator import LABEL_JOBS_DIR, Creator


async def find_leftovers(*, owner: str | None = None, job: str | None = None) -> list[Leftover]:
    """Trial containers (running or not), optionally only one owner's or one job's."""
    labels = [LABEL_TRIAL]
    if owner is not None:
        labels.append(f"{LABEL_OWNER}={owner}")
    if job is not None:
        labels.append(f"{LABEL_JOB}={job}")
    api = docker_api.docker_client().api
    found = await docker_api.call(
        "list trial containers", api.containers, all=True, filters={"label": labels}
    )
    return [
        Leftover(
            name=(c.get("Names") or ["?"])[0].lstrip("/"),
            trial=c["Labels"].get(LABEL_TRIAL, ""),
            job=c["Labels"].get(LABEL_JOB, ""),
            owner=c["Labels"].get(LABEL_OWNER, ""),
            state=c.get("State", ""),
            jobs_dir=c["Labels"].get(LABEL_JOBS_DIR),
            creator=Creator.from_labels(c["Labels"]),
        )
        for c in found
    ]


async def remove_leftovers(leftovers: list[Leftover]) -> int:
    """Remove these containers (forcefully); returns how many were removed."""
    api = docker_api.docker_client().api
    removed = 0
    for leftover in leftovers:
        try:
            await docker_api.call(
                f"remove container {leftover.name}",
                api.remove_container, leftover.name, force=True, v=True,
            )  # fmt: skip
            removed += 1
        except SandboxNotFoundError:
            pass  # gone meanwhile
    return removed
