"""At start, remove the sandboxes a dead trialbox process left on the same jobs folder.

A process killed with SIGKILL (or a crashed host process) tears nothing down: its sandboxes
run on, holding memory and CPU, until someone reaps them. `serve` and `run --resume` call
`reclaim_dead` first. A sandbox is removed only when all of its labels agree: the same jobs
folder as this process, made on this host, by a process that is gone (its pid ended, or is
now another process's). A live process's sandboxes, another folder's and another host's are
never touched, nor any sandbox whose labels name no creator.
"""

from __future__ import annotations

import logging
from pathlib import Path

from orchestrator.common.errors import TrialboxError
from orchestrator.common.offload import run_blocking
from orchestrator.sandbox.backend import Leftover, Reaper
from orchestrator.sandbox.creator import is_gone, this_process

log = logging.getLogger(__name__)


def _dead_of(leftovers: list[Leftover], jobs_dir: str) -> list[Leftover]:
    me = this_process()
    return [
        item
        for item in leftovers
        if item.jobs_dir == jobs_dir
        and item.creator is not None
        and item.creator.host == me.host
        and item.creator != me
        and is_gone(item.creator)
    ]


async def reclaim_dead(backend: Reaper, jobs_dir: Path) -> int:
    """Remove the sandboxes dead processes left on `jobs_dir` (resolved here) and say so in
    one line naming them; returns how many were removed. An engine that cannot list or
    remove them is a warning: the process starts anyway, and `trialbox reap` can remove
    them later."""
    folder = str(await run_blocking(jobs_dir.resolve))
    try:
        dead = await run_blocking(_dead_of, await backend.find_leftovers(), folder)
        removed = await backend.remove_leftovers(dead) if dead else 0
    except TrialboxError as exc:
        log.warning(
            "%s: could not remove the sandboxes dead trialbox processes left (%s); "
            "list them with trialbox reap --all --dry-run",
            folder, exc,
        )  # fmt: skip
        return 0
    if dead:
        log.warning(
            "%s: removed %d sandbox(es) that dead trialbox process(es) left: %s",
            folder, removed, ", ".join(sorted(item.name for item in dead)),
        )  # fmt: skip
    return removed
