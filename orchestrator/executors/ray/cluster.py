"""A Ray cluster as the service uses it: whole trials placed on its nodes (`placement`,
through `PlacedExecutor`), images warmed and leftovers found on every node (`nodes`).

Not a sandbox backend: no sandbox is made from here. Each node's actor (`host.py`) owns the
node's Docker engine through the node's own backend, and the trials it runs make theirs.

`RayCluster` gives the nodes' images and leftovers (an `ImageMaker` and a `Reaper`);
`ray_executor` makes the `PlacedExecutor` on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from orchestrator.common.errors import SandboxLostError
from orchestrator.common.limits import Limits
from orchestrator.executors.placed import PlacedExecutor
from orchestrator.executors.ray.fleet import Fleet
from orchestrator.executors.ray.nodes import NodeImages
from orchestrator.executors.ray.parcels import Packer
from orchestrator.executors.ray.placement import RayPlacement
from orchestrator.sandbox import ImageOutcome, ImagePlan, Leftover, LocalImages
from orchestrator.sandbox.backend_config import RayBackendConfig
from orchestrator.tasks.task import Task
from orchestrator.trials.config import TrialConfig


class RayCluster:
    """The nodes of a Ray cluster, each node's engine driven by its own actor: where their
    trials are placed, and their images and leftovers (an `ImageMaker` and a `Reaper`)."""

    name = "ray"

    def __init__(
        self, config: RayBackendConfig, limits: Limits | None = None, *, warm_pool: int = 0
    ) -> None:
        self.config = config
        self.limits = limits or Limits()
        self.fleet = Fleet(config, self.limits, warm_pool=warm_pool)
        self.packer = Packer()
        self.placement = RayPlacement(config, self.fleet, self.packer)

    async def nodes(self) -> list[NodeImages]:
        """Every alive node that may run trials, its images and leftovers."""
        found = await self.fleet.nodes()
        if not found:
            labels = self.config.node_labels
            raise SandboxLostError(
                "no node of the Ray cluster may run trials: none is alive"
                + (f" with the labels {labels} (ray start --labels)" if labels else "")
            )
        hosts = await asyncio.gather(*(self.fleet.host(node["NodeID"]) for node in found))
        return [NodeImages(host, self.fleet, self.packer) for host in hosts]

    async def plan_image(
        self, task: Task, base_image_map: Mapping[str, str], *, force_build: bool = False
    ) -> ImagePlan:
        first = (await self.nodes())[0]
        return await first.plan_image(task, base_image_map, force_build=force_build)

    async def ensure_image(
        self,
        task: Task,
        base_image_map: Mapping[str, str] | None = None,
        *,
        plan: ImagePlan | None = None,
        force_build: bool = False,
    ) -> ImageOutcome:
        """The image on every node: with a registry the first node builds and pushes it and
        the others pull it; without one each node builds it. `plan` is ignored (each node
        plans for its own engine)."""
        first, *others = await self.nodes()
        mapping = dict(base_image_map or {})
        ask = lambda node: node.ensure_image(task, mapping, force_build=force_build)  # noqa: E731
        if self.config.registry is not None:
            outcomes = [await ask(first), *await asyncio.gather(*(ask(n) for n in others))]
        else:
            outcomes = list(await asyncio.gather(*(ask(n) for n in [first, *others])))
        built = any(o.status == "built" for o in outcomes)
        warnings = [w for o in outcomes for w in o.warnings]
        return outcomes[0].model_copy(
            update={"status": "built" if built else "cached", "warnings": warnings}
        )

    async def local_images(self, refs: Sequence[str]) -> LocalImages | None:
        """None: each node's engine holds its own images, and its trials check them."""
        return None

    async def find_leftovers(
        self, *, owner: str | None = None, job: str | None = None
    ) -> list[Leftover]:
        nodes = await self.nodes()
        found = await asyncio.gather(*(n.find_leftovers(owner=owner, job=job) for n in nodes))
        return [leftover for per_node in found for leftover in per_node]

    async def remove_leftovers(self, leftovers: list[Leftover]) -> int:
        nodes = await self.nodes()
        removed = await asyncio.gather(*(n.remove_leftovers(leftovers) for n in nodes))
        return sum(removed)


def ray_executor(config: TrialConfig, cluster: RayBackendConfig) -> PlacedExecutor:
    """Trials of `config` placed on the nodes of `cluster` (Ray connects when first used)."""
    nodes = RayCluster(cluster, config.limits, warm_pool=config.warm_pool)
    return PlacedExecutor(config, nodes.placement, images=nodes, leftovers=nodes, name="ray")
