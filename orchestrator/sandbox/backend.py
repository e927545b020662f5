"""The backend interface: where sandboxes come from.

A backend makes sure a task's image exists, creates sandboxes from a `SandboxSpec`, and
finds and removes what a crashed run left behind. Only the essential operations are
abstract; a new place to run trials (Ray nodes, a remote engine, Kubernetes) is one new
subpackage under `orchestrator/backends/` and one config class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from orchestrator.sandbox.protocol import Capabilities, Sandbox
from orchestrator.sandbox.spec import SandboxSpec
from orchestrator.tasks.task import Task


class ImagePlan(Protocol):
    """A backend's plan for one task image; its `tag` names the image and is a content hash,
    so tasks whose plans share a tag share an image."""

    @property
    def tag(self) -> str: ...


class ImageOutcome(BaseModel):
    """What `ensure_image` did for one tag."""

    tag: str
    status: Literal["built", "cached"]
    seconds: float = Field(description="Wall time spent, including waiting for another build.")


class Leftover(BaseModel):
    """One trial sandbox that is still there, as the backend lists it."""

    name: str
    trial: str
    job: str
    owner: str
    state: str


class Backend(ABC):
    """Creates sandboxes and the images they run. One instance serves many trials."""

    name: str = "backend"

    @property
    def capabilities(self) -> Capabilities:
        """What this backend's sandboxes can have (network modes, GPUs)."""
        return Capabilities()

    @abstractmethod
    async def plan_image(self, task: Task, base_image_map: Mapping[str, str]) -> ImagePlan:
        """How the task's image would be made, without making it (its tag is known)."""

    @abstractmethod
    async def ensure_image(
        self,
        task: Task,
        base_image_map: Mapping[str, str] | None = None,
        *,
        plan: ImagePlan | None = None,
    ) -> ImageOutcome:
        """The task's image, made at most once however many trials ask at the same time."""

    @abstractmethod
    async def create_sandbox(self, spec: SandboxSpec) -> Sandbox:
        """A started sandbox; a cancel or error at any point leaves nothing behind."""

    @abstractmethod
    async def find_leftovers(
        self, *, owner: str | None = None, job: str | None = None
    ) -> list[Leftover]:
        """Trial sandboxes that still exist, optionally only one owner's or one job's."""

    @abstractmethod
    async def remove_leftovers(self, leftovers: list[Leftover]) -> int:
        """Remove these sandboxes; returns how many were removed."""
