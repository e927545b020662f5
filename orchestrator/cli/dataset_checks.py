"""What `run` and `serve` check once before anything starts, the same way for both: the
tasks (every folder loaded, the broken ones refused together) and the base-image mapping
against them and the engine.

`serve_tasks` loads the template task or every folder of `--tasks-dir` as `run` loads its own;
`check_base_images` checks the mapping against the tasks, and against the engine unless on a
cluster.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestrator.service.base_image_check import check_base_image_map
from orchestrator.tasks.task import Task, discover_tasks, load_task
from orchestrator.trials.config import TrialConfig


def check_base_images(config: TrialConfig, tasks: list[Task], *, every_task: bool = True) -> None:
    """Refuse a mapping whose local image the engine lacks, or, when `tasks` are `every_task`
    that can run, one no task's FROM names (BaseImageMapError). A cluster's images are on
    its nodes' engines: there, only the FROM side is checked."""
    from orchestrator.backends import build_backend

    backend = None if config.backend.type == "ray" else build_backend(config.backend, config.limits)
    asyncio.run(
        check_base_image_map(
            config.base_image_map, tasks, backend=backend, refuse_unused=every_task
        )
    )


def serve_tasks(task: Path | None, tasks_dir: Path | None) -> list[Task]:
    """The tasks `serve` offers, loaded and checked as `run` checks its own: the template
    task, or every task folder of the dataset (TaskError, as `run` words it, when one cannot
    be used); none when requests name their own task folders."""
    if task is not None:
        return [load_task(task)]
    if tasks_dir is None:
        return []
    return discover_tasks(
        tasks_dir,
        leave_out=f"move them out of {tasks_dir.resolve()} (serve offers every task folder in it)",
    )
