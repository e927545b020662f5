"""Prewarm: build every distinct image some tasks need before serving, so the first rollouts
do not pay for builds. Failures do not stop the others; they are reported together.

Given an agent, the images are those its trials use: each task as `Agent.for_task` makes it,
the step a trial starts with (a bundle's task carries the bundle's dependencies, and its image
is the task's with them in the venv).

`prewarm` builds each distinct image once; each `PrewarmRow` says how an image went
(`task_lines`: a line per task, which `serve --prewarm` logs); `PrewarmError` lists every row.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from orchestrator.common.defaults import DEFAULT_PARALLEL_BUILDS
from orchestrator.common.errors import TrialboxError
from orchestrator.common.offload import run_blocking
from orchestrator.sandbox import ImageMaker, ImagePlan
from orchestrator.tasks.task import Task, load_task
from orchestrator.trials.agents import Agent
from orchestrator.trials.config import TrialConfig


class PrewarmRow(BaseModel):
    """One distinct image: which tasks need it and what prewarm did."""

    tag: str | None
    tasks: list[str]
    status: Literal["built", "cached", "failed"]
    seconds: float
    error: str | None = None

    def task_lines(self) -> list[str]:
        """A line per task: what prewarm did for it, and why when its image failed."""
        if self.status == "failed":
            return [f"{task}: failed: {_first_line(self.error)}" for task in self.tasks]
        return [f"{t}: {self.status} ({self.tag}, {self.seconds:.1f} s)" for t in self.tasks]


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else "unknown error"


class PrewarmError(TrialboxError):
    """Some images failed to build; `rows` has every image's outcome."""

    def __init__(self, rows: list[PrewarmRow]) -> None:
        self.rows = rows
        failed = [r for r in rows if r.status == "failed"]
        reasons = "; ".join(f"{', '.join(r.tasks)}: {_first_line(r.error)}" for r in failed)
        super().__init__(f"{len(failed)} of {len(rows)} image(s) failed to build: {reasons}")


async def prewarm(
    tasks: Sequence[Task | str | Path],
    *,
    base_image_map: Mapping[str, str] | None = None,
    backend: ImageMaker | None = None,
    max_parallel: int = DEFAULT_PARALLEL_BUILDS,
    on_done: Callable[[PrewarmRow], None] | None = None,
    force_build: bool = False,
    agent: Agent | None = None,
) -> list[PrewarmRow]:
    """Build each distinct image once (up to `max_parallel` at a time), reusing what exists.
    `force_build` builds each task's environment/Dockerfile even when it names a prebuilt
    docker_image (as `TrialConfig.force_build` does for trials, so they find these images).
    `agent`: the images its trials use (a bundle's, with its dependencies); a task it refuses
    is a failed row. Without one, each task's own image.

    Raises PrewarmError, carrying every row, when any build failed.
    """
    if backend is None:  # the images of where a default TrialConfig runs its trials
        from orchestrator.executors.base import executor_for

        backend = executor_for(TrialConfig()).images
    mapping = dict(base_image_map or {})
    loaded = [t if isinstance(t, Task) else await run_blocking(load_task, t) for t in tasks]
    by_tag: dict[str, list[Task]] = {}
    plans: dict[str, ImagePlan] = {}
    failed_plans: list[PrewarmRow] = []
    for task in loaded:
        try:
            ready = task if agent is None else agent.for_task(task)  # as its trials start
            plan = await backend.plan_image(ready, mapping, force_build=force_build)
        except Exception as exc:  # every failure becomes a row; the others still build
            failed_plans.append(
                PrewarmRow(tag=None, tasks=[task.name], status="failed", seconds=0, error=str(exc))
            )
            continue
        by_tag.setdefault(plan.tag, []).append(ready)
        plans[plan.tag] = plan
    slots = asyncio.Semaphore(max(1, max_parallel))

    async def one(tag: str, group: list[Task]) -> PrewarmRow:
        started = time.monotonic()
        names = [t.name for t in group]
        async with slots:
            try:
                outcome = await backend.ensure_image(group[0], mapping, plan=plans[tag])
                row = PrewarmRow(
                    tag=outcome.tag, tasks=names, status=outcome.status,
                    seconds=time.monotonic() - started,
                )  # fmt: skip
            except Exception as exc:
                row = PrewarmRow(
                    tag=tag, tasks=names, status="failed", seconds=time.monotonic() - started,
                    error=str(exc),
                )  # fmt: skip
        if on_done is not None:
            on_done(row)
        return row

    for row in failed_plans:
        if on_done is not None:
            on_done(row)
    rows = failed_plans + list(await asyncio.gather(*(one(t, g) for t, g in by_tag.items())))
    if any(r.status == "failed" for r in rows):
        raise PrewarmError(rows)
    return rows
