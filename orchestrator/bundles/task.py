"""A task as a bundle runs it: the same folder, plus the dependencies its image's venv needs.

The Docker backend's image builder knows such a task by its `venv_extra` (the protocol
`CarriesVenvExtra`, in `backends/docker/venv_extra.py`, since a backend cannot import this
class) and adds those packages in an image of their own, FROM the task's (docs/bundles.md).

`BundleTask` is a `Task` with a `venv_extra` (`BundleDependencies`).
"""

from __future__ import annotations

from pydantic import Field

from orchestrator.bundles.image import BundleDependencies
from orchestrator.tasks.task import Task


class BundleTask(Task):
    """A `Task` whose image's runtime venv also holds a bundle's dependencies."""

    venv_extra: BundleDependencies = Field(
        description="What the image's venv gets beyond trialbox's runtime."
    )

    @classmethod
    def of(cls, task: Task, dependencies: BundleDependencies) -> BundleTask:
        fields = {name: getattr(task, name) for name in Task.model_fields}
        return cls(**fields, venv_extra=dependencies)
