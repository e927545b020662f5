"""The fake backend: a trial's phases with no engine, in milliseconds.

Images are content-hash tags (nothing is built), sandboxes live in memory, trialbox's own
commands are answered by kind and the task's text runs through a few words of sh or a test's
handler; the engine's account of a sandbox (an OOM, a kill from outside) is one argument
away. Failing engine calls are `backends/faults.py`'s wrapper, over this backend or any.
It keeps the Docker backend's contract where trialbox relies on it: single-flight "builds"
("built" once, "cached" after), one sandbox name per trial, a refused network mode, and
leftovers found and removed by owner and job. Unlike Docker's labels, which any process can
list, a fake backend only knows the sandboxes it made itself.

`FakeBackend` is the package's backend, exported with `FakeSandbox` and the scripting names on
first use (`backends/fake/__init__.py`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from orchestrator.backends.fake.images import FakeImage, plan_image
from orchestrator.backends.fake.sandbox import FakeSandbox
from orchestrator.backends.fake.script import Handler
from orchestrator.backends.fake.users import DEFAULT_USERS, Identity
from orchestrator.common.errors import SandboxConflictError, SandboxError, SandboxNotFoundError
from orchestrator.common.limits import Limits
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
from orchestrator.tasks.task import Task


class FakeBackend(Backend):
    """Sandboxes in memory. One instance serves many trials; the tests' scripting hooks
    (`agent`, `verifier`, and `health`: the engine's account from the start) apply to every
    sandbox it makes."""

    name = "fake"

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        agent: Handler | None = None,
        verifier: Handler | None = None,
        health: Health | None = None,
        network_modes: frozenset[str] = frozenset({"none", "bridge"}),
        users: tuple[Identity, ...] = DEFAULT_USERS,
        build_sec: float = 0.0,
        cpus: float | None = None,
        memory_mb: int | None = None,
        runtime: RuntimeState = "present",
        image_warnings: tuple[str, ...] = (),
    ) -> None:
        self.limits = limits or Limits()
        self.agent, self.verifier, self.health = agent, verifier, health
        self.users = users
        self.build_sec = build_sec  # how long a "build" takes, to make single-flight visible
        self.builds = 0  # how many builds ran
        # What every ImageOutcome says about the runtime venv and what it warns; a test may
        # set them (e.g. runtime="absent": an image with no python3) before a trial.
        self.runtime: RuntimeState = runtime
        self.image_warnings = image_warnings
        self.created: list[FakeSandbox] = []  # every sandbox made, removed or not
        self._capabilities = Capabilities(
            network_modes=network_modes, cpus=cpus, memory_mb=memory_mb
        )
        self._images: dict[str, FakeImage] = {}
        self._building: dict[str, asyncio.Future[None]] = {}
        self._present: set[FakeSandbox] = set()  # by identity: a pooled one is renamed

    async def capabilities(self) -> Capabilities:
        return self._capabilities

    # -- images -------------------------------------------------------------------------------

    async def plan_image(
        self, task: Task, base_image_map: Mapping[str, str], *, force_build: bool = False
    ) -> FakeImage:
        return await plan_image(task, base_image_map, force_build=force_build)

    async def _build(self, plan: FakeImage) -> None:
        self.builds += 1
        await asyncio.sleep(self.build_sec)
        self._images[plan.tag] = plan

    async def ensure_image(
        self,
        task: Task,
        base_image_map: Mapping[str, str] | None = None,
        *,
        plan: ImagePlan | None = None,
        force_build: bool = False,
    ) -> ImageOutcome:
        """The image of `task`: "built" the first time its tag is asked for, "cached" after,
        and "cached" for whoever joined a build in flight (as the Docker backend reports);
        its `runtime` and `warnings` are the backend's `runtime` and `image_warnings`."""
        if plan is not None and not isinstance(plan, FakeImage):
            raise TypeError(f"the fake backend cannot use a {type(plan).__name__}")
        plan = plan or await self.plan_image(task, base_image_map or {}, force_build=force_build)
        started = time.monotonic()
        about = {"runtime": self.runtime, "warnings": list(self.image_warnings)}
        if plan.tag in self._images:
            return ImageOutcome(tag=plan.tag, status="cached", seconds=0.0, **about)
        building = self._building.get(plan.tag)
        joined = building is not None and building.get_loop() is asyncio.get_running_loop()
        if building is None or not joined:
            building = self._building[plan.tag] = asyncio.ensure_future(self._build(plan))
            building.add_done_callback(lambda done: self._forget_build(plan.tag, done))
        await asyncio.shield(building)
        return ImageOutcome(
            tag=plan.tag, status="cached" if joined else "built",
            seconds=time.monotonic() - started, **about,
        )  # fmt: skip

    def _forget_build(self, tag: str, done: asyncio.Future[None]) -> None:
        if self._building.get(tag) is done:
            del self._building[tag]

    # -- sandboxes ----------------------------------------------------------------------------

    async def create_sandbox(self, spec: SandboxSpec) -> Sandbox:
        what = f"create a sandbox from {spec.image}"
        if spec.network_mode not in self._capabilities.network_modes:
            offered = ", ".join(sorted(self._capabilities.network_modes))
            raise SandboxError(
                f"{what}: network mode {spec.network_mode!r} is not offered by the "
                f"{self.name} backend (it offers: {offered})"
            )
        if spec.gpus and not self._capabilities.gpus:
            raise SandboxError(f"{what}: the {self.name} backend has no GPUs")
        await asyncio.sleep(0)
        image = self._images.get(spec.image)
        if image is None:
            raise SandboxNotFoundError(f"{what}: not found (no such image in this backend)")
        if any(present.name == spec.name for present in self._present):
            raise SandboxConflictError(f"{what}: conflict: the name {spec.name} is in use")
        sandbox = FakeSandbox(
            spec, image, capabilities=self._capabilities, limits=self.limits,
            agent=self.agent, verifier=self.verifier, health=self.health, users=self.users,
            on_removed=self._removed,
        )  # fmt: skip
        sandbox.has_runtime = self.runtime != "absent"
        self._present.add(sandbox)
        self.created.append(sandbox)
        return sandbox

    def _removed(self, sandbox: FakeSandbox) -> None:
        self._present.discard(sandbox)

    # -- leftovers ----------------------------------------------------------------------------

    async def find_leftovers(
        self, *, owner: str | None = None, job: str | None = None
    ) -> list[Leftover]:
        spec_of = [s.spec for s in self._present]
        return [
            Leftover(
                name=spec.name,
                trial=spec.trial_id,
                job=spec.job_id,
                owner=spec.owner,
                state="running",
                jobs_dir=spec.jobs_dir,
                creator=spec.creator,
            )
            for spec in spec_of
            if (owner is None or spec.owner == owner) and (job is None or spec.job_id == job)
        ]

    async def remove_leftovers(self, leftovers: list[Leftover]) -> int:
        removed = 0
        for leftover in leftovers:
            sandbox = next((s for s in self._present if s.name == leftover.name), None)
            if sandbox is not None:  # gone meanwhile otherwise
                sandbox.remove_now()
                removed += 1
        return removed
