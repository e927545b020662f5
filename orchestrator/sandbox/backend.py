"""The backend interface: where sandboxes come from.

A backend makes sure a task's image exists, creates sandboxes from a `SandboxSpec`, and
finds and removes what a crashed run left behind. Only the essential operations are
abstract; a new engine to make sandboxes with (a remote engine, Kubernetes) is one new
subpackage under `orchestrator/backends/` and one config class. Where a whole trial runs
(here, or on a cluster's node) is not a backend's business but an executor's
(`orchestrator/executors/`); the two halves a backend shares with a cluster's nodes, images
(`ImageMaker`: prewarm) and leftovers (`Reaper`: reap, resume), are protocols of their own.

The `Backend` ABC: `async capabilities()`, `plan_image` / `ensure_image` (`ImagePlan`,
`ImageOutcome` with its `runtime` and `warnings`), `create_sandbox`, `start_services` (a
task's Compose services), `find_leftovers` /
`remove_leftovers` (`Leftover`, with its `node`, `jobs_dir` and `creator`) and `local_images`
(`LocalImages`, None unless the backend can say).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from orchestrator.common.errors import TaskError
from orchestrator.sandbox.creator import Creator
from orchestrator.sandbox.protocol import Capabilities, Sandbox
from orchestrator.sandbox.services import Services, ServicesSpec
from orchestrator.sandbox.spec import SandboxSpec
from orchestrator.tasks.task import Task


class ImagePlan(Protocol):
    """A backend's plan for one task image; its `tag` names the image and is a content hash,
    so tasks whose plans share a tag share an image."""

    @property
    def tag(self) -> str: ...


RuntimeState = Literal["present", "absent", "unknown"]


class ImageOutcome(BaseModel):
    """What `ensure_image` did for one tag, and whether the image has trialbox's runtime venv
    (`container_runtime.paths.RUNTIME_PYTHON`), which only workflow and shell agents, graders
    and the model gateway's forwarder need; oracle, nop, command agents and verifiers need
    only `sh`."""

    tag: str
    status: Literal["built", "cached"]
    seconds: float = Field(description="Wall time spent, including waiting for another build.")
    runtime: RuntimeState = Field(
        "unknown",
        description="`present`: the venv was added for a python3 the backend checked (in "
        "the image, or mounted into its sandboxes); `absent`: the image has no usable python3 "
        "(or the runtime could not be prepared for it: a warning says so) and gets no venv; "
        "`unknown`: a layer that makes the venv only if it finds a python3 >= 3.9 at build "
        "time, or an image whose python3 could not be probed (check inside).",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="What the result should say, e.g. a prebuilt image that could not be "
        "pulled and was built from environment/Dockerfile instead.",
    )


class LocalImages(BaseModel):
    """What an engine holds, as far as some image references go."""

    missing: list[str] = Field(description="The references asked about that it lacks.")
    names: list[str] = Field(description="Every repository:tag it holds (for a suggestion).")


class Leftover(BaseModel):
    """One trial sandbox that is still there, as the backend lists it (or what its Compose
    services left: a service container, the trial's network or a volume, by `kind`)."""

    name: str
    kind: Literal["container", "network", "volume"] = "container"
    trial: str
    job: str
    owner: str
    state: str
    node: str | None = Field(
        None, description="The cluster node whose engine holds it; None: this host's engine."
    )
    jobs_dir: str | None = Field(None, description="Its `trialbox.jobs_dir` label.")
    slot_folder: str | None = Field(
        None,
        description="Its own folder on the engine's host (`SandboxSpec.slot_mount`), removed "
        "with it: what its maker would have removed at teardown.",
    )
    creator: Creator | None = Field(
        None, description="The process its labels say made it; None: they name none."
    )


class ImageMaker(Protocol):
    """What prewarm and the base-image check need: a task's image planned and made, and
    what the engine holds. A `Backend` is one; so is a cluster's set of nodes, or one node."""

    name: str

    async def plan_image(
        self, task: Task, base_image_map: Mapping[str, str], *, force_build: bool = False
    ) -> ImagePlan: ...

    async def ensure_image(
        self,
        task: Task,
        base_image_map: Mapping[str, str] | None = None,
        *,
        plan: ImagePlan | None = None,
        force_build: bool = False,
    ) -> ImageOutcome: ...

    async def local_images(self, refs: Sequence[str]) -> LocalImages | None: ...


class Reaper(Protocol):
    """What reap, resume and `reclaim_dead` need: the trial sandboxes still there, and their
    removal. A `Backend` is one; so is a cluster's set of nodes."""

    async def find_leftovers(
        self, *, owner: str | None = None, job: str | None = None
    ) -> list[Leftover]: ...

    async def remove_leftovers(self, leftovers: list[Leftover]) -> int: ...


class Backend(ABC):
    """Creates sandboxes and the images they run. One instance serves many trials."""

    name: str = "backend"

    async def capabilities(self) -> Capabilities:
        """What this backend's sandboxes can have (network modes, GPUs, the host's cpus and
        memory). Async: a backend may ask its engine (once, keeping only an answer)."""
        return Capabilities()

    async def local_images(self, refs: Sequence[str]) -> LocalImages | None:
        """Which of `refs` the engine that builds images lacks (a build would pull them), and
        what it holds; None (the default) when this backend cannot say (its images are not
        real)."""
        return None

    @abstractmethod
    async def plan_image(
        self, task: Task, base_image_map: Mapping[str, str], *, force_build: bool = False
    ) -> ImagePlan:
        """How the task's image would be made, without making it (its tag is known).

        A task's prebuilt `docker_image` is used when there is one (the backend may fetch it
        now); `force_build` builds environment/Dockerfile instead (a `TaskError` when the task
        has none). The two ways never share a tag.
        """

    @abstractmethod
    async def ensure_image(
        self,
        task: Task,
        base_image_map: Mapping[str, str] | None = None,
        *,
        plan: ImagePlan | None = None,
        force_build: bool = False,
    ) -> ImageOutcome:
        """The task's image, made at most once however many trials ask at the same time.
        `force_build` is as in `plan_image` (and ignored when `plan` is given)."""

    @abstractmethod
    async def create_sandbox(self, spec: SandboxSpec) -> Sandbox:
        """A started sandbox; a cancel or error at any point leaves nothing behind."""

    async def start_services(self, spec: ServicesSpec) -> Services:
        """A trial's Compose services started and healthy on its own network, before its
        main sandbox (`sandbox/services.py`); a cancel or error leaves nothing behind. The
        default: this backend runs none, so the task cannot be run here."""
        raise TaskError(
            f"{spec.compose.path}: the {self.name} backend does not run Docker Compose "
            "services; run the task on the docker backend"
        )

    @abstractmethod
    async def find_leftovers(
        self, *, owner: str | None = None, job: str | None = None
    ) -> list[Leftover]:
        """Trial sandboxes that still exist, optionally only one owner's or one job's."""

    @abstractmethod
    async def remove_leftovers(self, leftovers: list[Leftover]) -> int:
        """Remove these sandboxes; returns how many were removed."""
