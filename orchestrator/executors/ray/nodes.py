"""One node of the cluster seen from the driver: its images and its leftovers (an
`ImageMaker` and a `Reaper`, not a backend: it makes no sandbox), asked of the node's
actor. `trialbox prewarm --ray` warms each node through one of these (with progress per
node) and `trialbox reap --ray` cleans each node's engine.

`NodeImages` is that view of one node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.executors.ray.fleet import Fleet, Host, lost
from orchestrator.executors.ray.parcels import Packer, TaskParcel
from orchestrator.sandbox import ImageOutcome, ImagePlan, Leftover, LocalImages
from orchestrator.tasks.task import Task


@dataclass(frozen=True)
class NodePlan:
    """A node's plan: the tag the node worked out, and what to build it from."""

    tag: str
    parcel: TaskParcel
    base_image_map: tuple[tuple[str, str], ...]
    force_build: bool


class NodeImages:
    """The images and leftovers of one node's engine. Sandboxes are made only by the trials
    the node runs (placed there by `PlacedExecutor`), never from the driver."""

    def __init__(self, host: Host, fleet: Fleet, packer: Packer) -> None:
        self.host, self.fleet, self.packer = host, fleet, packer
        self.name = f"{host.info.address} ({host.info.engine})"

    async def _ask(self, method: str, *args: object) -> object:
        try:
            return await getattr(self.host.actor, method).remote(*args)
        except Exception as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None
            self.fleet.forget(self.host.node_id, f"{type(exc).__name__}: {exc}")
            raise lost(self.host.info, self.host.node_id, exc) from exc

    async def plan_image(
        self, task: Task, base_image_map: Mapping[str, str], *, force_build: bool = False
    ) -> NodePlan:
        parcel = await self.packer.parcel(task)
        mapping = dict(base_image_map)
        tag = await self._ask("plan_image", parcel, mapping, force_build)
        return NodePlan(str(tag), parcel, tuple(sorted(mapping.items())), force_build)

    async def ensure_image(
        self,
        task: Task,
        base_image_map: Mapping[str, str] | None = None,
        *,
        plan: ImagePlan | None = None,
        force_build: bool = False,
    ) -> ImageOutcome:
        if not isinstance(plan, NodePlan):
            plan = await self.plan_image(task, base_image_map or {}, force_build=force_build)
        outcome = await self._ask(
            "ensure_image", plan.parcel, dict(plan.base_image_map), plan.force_build
        )
        assert isinstance(outcome, ImageOutcome)
        return outcome

    async def local_images(self, refs: Sequence[str]) -> LocalImages | None:
        """None: the node's trials check their images against its engine themselves."""
        return None

    async def find_leftovers(
        self, *, owner: str | None = None, job: str | None = None
    ) -> list[Leftover]:
        found = await self._ask("find_leftovers", owner, job)
        assert isinstance(found, list)
        return found

    async def remove_leftovers(self, leftovers: list[Leftover]) -> int:
        mine = [item for item in leftovers if item.node in (None, self.host.node_id)]
        removed = await self._ask("remove_leftovers", mine) if mine else 0
        assert isinstance(removed, int)
        return removed
