"""The fake backend: a trial's phases with no engine, in milliseconds. It keeps the Docker
backend's contract where trialbox relies on it: single-flight "builds" ("built" once, "cached"
after), one sandbox name per trial, a refused network mode, and leftovers found and removed by
owner and job (of the sandboxes it made itself: Docker's labels any process can list).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from functools import partial

from orchestrator.backends.fake.images import FakeImage, plan_image
from orchestrator.backends.fake.sandbox import FakeSandbox
from orchestrator.backends.fake.services import FakeServices
from orchestrator.backends.fake.shell import Handler
from orchestrator.common.errors import SandboxConflictError, SandboxError, SandboxNotFoundError
from orchestrator.common.limits import Limits
from orchestrator.common.offload import run_blocking
from orchestrator.common.single_flight import SingleFlight
from orchestrator.sandbox import (
    Backend,
    Capabilities,
    Health,
    ImageOutcome,
    ImagePlan,
    Leftover,
    Sandbox,
    SandboxSpec,
)
from orchestrator.sandbox.backend import RuntimeState
from orchestrator.sandbox.services import ServicesSpec
from orchestrator.tasks.task import Task


class FakeBackend(Backend):
    """Sandboxes in this process. One instance serves many trials; the tests' scripting hooks
    (`agent`, `verifier`, and `health`: the engine's account from the start) apply to every
    sandbox it makes, `runtime` and `image_warnings` to every image outcome (a test may set
    them, e.g. runtime="absent": an image with no python3)."""

    name = "fake"

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        agent: Handler | None = None,
        verifier: Handler | None = None,
        health: Health | None = None,
        network_modes: frozenset[str] = frozenset({"none", "bridge"}),
        build_sec: float = 0.0,
        cpus: float | None = None,
        memory_mb: int | None = None,
        runtime: RuntimeState = "present",
    ) -> None:
        self.limits = limits or Limits()
        self.agent, self.verifier, self.health = agent, verifier, health
        # What the engine offers: the network modes, and the host's capacity as configured.
        self.offered = Capabilities(network_modes=network_modes, cpus=cpus, memory_mb=memory_mb)
        self.build_sec = build_sec  # how long a "build" takes, to make single-flight visible
        self.builds = 0  # how many builds ran
        self.services: list[FakeServices] = []  # each trial's Compose services, in order
        self.runtime: RuntimeState = runtime
        self.image_warnings: tuple[str, ...] = ()
        self.created: list[FakeSandbox] = []  # every sandbox made, removed or not
        self._images: dict[str, FakeImage] = {}
        self._building = SingleFlight()

    async def capabilities(self) -> Capabilities:
        return self.offered

    # -- images -------------------------------------------------------------------------------

    async def plan_image(
        self, task: Task, base_image_map: Mapping[str, str], *, force_build: bool = False
    ) -> FakeImage:
        return await run_blocking(plan_image, task, base_image_map, force_build)

    async def ensure_image(
        self,
        task: Task,
        base_image_map: Mapping[str, str] | None = None,
        *,
        plan: ImagePlan | None = None,
        force_build: bool = False,
    ) -> ImageOutcome:
        """The image of `task`: "built" the first time its tag is asked for, "cached" after,
        and "cached" for whoever joined a build in flight (as the Docker backend reports)."""
        if plan is not None and not isinstance(plan, FakeImage):
            raise TypeError(f"the fake backend cannot use a {type(plan).__name__}")
        plan = plan or await self.plan_image(task, base_image_map or {}, force_build=force_build)
        started = time.monotonic()
        known = plan.tag in self._images or self._building.running(plan.tag)
        if plan.tag not in self._images:
            await asyncio.shield(self._building(plan.tag, partial(self._build, plan)))
        return ImageOutcome(
            tag=plan.tag, status="cached" if known else "built",
            seconds=time.monotonic() - started, runtime=self.runtime,
            warnings=list(self.image_warnings),
        )  # fmt: skip

    async def _build(self, plan: FakeImage) -> None:
        self.builds += 1
        await asyncio.sleep(self.build_sec)
        self._images[plan.tag] = plan

    # -- sandboxes ----------------------------------------------------------------------------

    async def create_sandbox(self, spec: SandboxSpec) -> Sandbox:
        what = f"create a sandbox from {spec.image}"
        if spec.network_mode not in self.offered.network_modes:
            raise SandboxError(
                f"{what}: network mode {spec.network_mode!r} is not offered by the {self.name} "
                f"backend (it offers: {', '.join(sorted(self.offered.network_modes))})"
            )
        await asyncio.sleep(0)
        image = self._images.get(spec.image)
        if image is None:
            raise SandboxNotFoundError(f"{what}: not found (no such image in this backend)")
        if any(sandbox.name == spec.name for sandbox in self.present()):
            raise SandboxConflictError(f"{what}: conflict: the name {spec.name} is in use")
        sandbox = FakeSandbox(spec, image, self)
        self.created.append(sandbox)
        return sandbox

    def present(self) -> list[FakeSandbox]:
        """The sandboxes made here and not removed (by identity: a pooled one is renamed)."""
        return [sandbox for sandbox in self.created if sandbox.present]

    # -- leftovers ----------------------------------------------------------------------------

    async def start_services(self, spec: ServicesSpec) -> FakeServices:
        self.services.append(FakeServices(spec))  # nothing runs (`services.py`)
        return self.services[-1]

    async def find_leftovers(
        self, *, owner: str | None = None, job: str | None = None
    ) -> list[Leftover]:
        found = []
        for spec in (sandbox.spec for sandbox in self.present()):
            if (owner is None or spec.owner == owner) and (job is None or spec.job_id == job):
                found.append(Leftover(
                    name=spec.name, trial=spec.trial_id, job=spec.job_id, owner=spec.owner,
                    state="running", jobs_dir=spec.jobs_dir, creator=spec.creator,
                ))  # fmt: skip
        return found

    async def remove_leftovers(self, leftovers: list[Leftover]) -> int:
        names = {leftover.name for leftover in leftovers}
        doomed = [sandbox for sandbox in self.present() if sandbox.name in names]
        for sandbox in doomed:  # those gone meanwhile are not counted
            sandbox.remove_now()
        return len(doomed)
