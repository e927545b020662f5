"""The Ray backend: whole trials placed on the cluster's nodes (`placement`), images warmed
and leftovers found on every node (`nodes`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from orchestrator.backends.ray.config import RayBackendConfig
from orchestrator.backends.ray.fleet import Fleet
from orchestrator.backends.ray.nodes import NodeBackend
from orchestrator.backends.ray.parcels import Packer
from orchestrator.backends.ray.placement import RayPlacement
from orchestrator.common.errors import SandboxLostError
from orchestrator.common.limits import Limits
from orchestrator.sandbox import (
    Backend,
    Capabilities,
    ImageOutcome,
    ImagePlan,
    Leftover,
    Sandbox,
    SandboxSpec,
)
from orchestrator.sandbox.placement import Placement
from orchestrator.tasks.task import Task


class RayBackend(Backend):
    """Trials on the nodes of a Ray cluster, each node's engine driven by its own actor."""

    name = "ray"

    def __init__(self, config: RayBackendConfig, limits: Limits | None = None) -> None:
        self.config = config
        self.limits = limits or Limits()
        self.fleet = Fleet(config, self.limits)
        self.packer = Packer()
        self._placement = RayPlacement(config, self.fleet, self.packer)

    @property
    def placement(self) -> Placement:
        return self._placement

    async def capabilities(self) -> Capabilities:
        """Each node's trial checks its task against its own engine; from here, only what
        a node's engine offers in general is known."""
        return Capabilities(network_modes=frozenset({"none", "bridge", "host"}), host_mounts=True)

    async def nodes(self) -> list[NodeBackend]:
        """Every alive node that may run trials, as a backend of its own."""
        found = await self.fleet.nodes()
        if not found:
            labels = self.config.node_labels
            raise SandboxLostError(
                "no node of the Ray cluster may run trials: none is alive"
                + (f" with the labels {labels} (ray start --labels)" if labels else "")
            )
        hosts = await asyncio.gather(*(self.fleet.host(node["NodeID"]) for node in found))
        return [NodeBackend(host, self.fleet, self.packer) for host in hosts]

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

    async def create_sandbox(self, spec: SandboxSpec) -> Sandbox:
        raise RuntimeError(
            "the Ray backend runs whole trials on its nodes: run them through TrialEngine, "
            "run_job or trialbox run/serve --ray (run_trial runs its trial in this process)"
        )

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
