"""What a rollout runs: its task folder (by id in dataset mode, by path, or the engine's
default) and its agent, each loaded once and kept for the engine's life.

`Loader` is the class: `load` gives a request's task and agent (`load_task` the task alone, for
a session), `task_path` its task's folder.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.common.offload import run_blocking
from orchestrator.service.rollouts import RolloutRequest
from orchestrator.tasks.task import Task, load_task, resolve_task_id
from orchestrator.trials.agents import Agent, parse_agent


class Loader:
    """Resolves a request's task and agent; caches each loaded task by path, agent by spec."""

    def __init__(
        self, *, default_agent: str, default_task: Path | None, tasks_dir: Path | None
    ) -> None:
        self.default_agent = default_agent
        self.default_task = default_task
        self.tasks_dir = tasks_dir
        self._tasks: dict[Path, Task] = {}
        self._agents: dict[str, Agent] = {}

    def task_path(self, request: RolloutRequest) -> Path:
        if request.task_id is not None:
            if self.tasks_dir is None:
                raise ValueError("task_id needs an engine with tasks_dir (dataset mode)")
            return resolve_task_id(self.tasks_dir, request.task_id)
        if request.task is not None:
            return Path(request.task).resolve()
        if self.default_task is None:
            raise ValueError("the request names no task and the engine has no default task")
        return self.default_task.resolve()

    async def load_task(self, request: RolloutRequest) -> Task:
        path = self.task_path(request)
        task = self._tasks.get(path)
        if task is None:
            task = await run_blocking(load_task, path)
            self._tasks[path] = task
        return task

    async def load(self, request: RolloutRequest) -> tuple[Task, Agent]:
        task = await self.load_task(request)
        spec = request.agent or self.default_agent
        agent = self._agents.get(spec)
        if agent is None:  # off the loop: a bundle:<project> spec builds the project
            agent = self._agents[spec] = await run_blocking(parse_agent, spec)
        return task, agent
