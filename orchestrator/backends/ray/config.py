"""How a trial config chooses a Ray cluster. Importing this does not import `ray` or
`docker`, nor does `import orchestrator` (tests/test_lazy_imports.py holds both).

A cluster is not a sandbox backend: `executors.base.executor_for` reads this config and runs
the trials on its nodes (`executors/ray/`). It stays in `TrialConfig.backend`'s union so job
files and config.json keep their format (`backend = {type = "ray", ...}`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.backends.docker.config import DockerBackendConfig
from orchestrator.backends.fake.config import FakeBackendConfig
from orchestrator.common.limits import Limits

if TYPE_CHECKING:
    from orchestrator.sandbox.backend import Backend


class RayBackendConfig(BaseModel):
    """Place each trial on a node of a Ray cluster with room for its cpus and memory; the
    node's own engine runs its sandbox (each node's DOCKER_HOST, else its default socket)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["ray"] = "ray"
    address: str | None = Field(
        None,
        description="The cluster, as ray.init takes it ('auto', 'HOST:PORT', "
        "'ray://HOST:10001'); None: the cluster this process is connected to, else 'auto'.",
    )
    namespace: str = Field("trialbox", description="The Ray namespace of the node actors.")
    node: DockerBackendConfig | FakeBackendConfig = Field(
        default_factory=DockerBackendConfig,
        discriminator="type",
        description="What each node runs sandboxes with: its Docker engine (the default), or "
        "the fake backend (tests of the cluster's own behaviour).",
    )
    registry: str | None = Field(
        None,
        description="HOST:PORT[/PREFIX] of a registry the nodes share: an image built on one "
        "node is pushed there and pulled by the others by its content-hash tag. None: each "
        "node builds what it needs, once.",
    )
    node_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Only nodes with these Ray labels run trials (`ray start --labels`), e.g. "
        "{'trialbox': 'docker'} where only some nodes have Docker.",
    )
    health_interval_sec: float = Field(
        5.0, gt=0, description="How often each node's engine is asked whether it answers."
    )
    cancel_grace_sec: float = Field(
        120.0,
        gt=0,
        description="How long a cancelled trial may take to tear down on its node and send "
        "its result back before it is given up as lost.",
    )

    def build(self, limits: Limits) -> Backend:
        """Always refused, with a `ValueError` (typed as the union's other members are): a
        cluster makes no sandbox here. Its trials run whole on its nodes, through an
        executor (`executors.base.executor_for`: TrialEngine, run_job, trialbox run/serve
        --ray); `run_trial` runs its trial in this process, on a sandbox backend."""
        raise ValueError(
            "a Ray cluster is not a sandbox backend: its trials run on its nodes through "
            "TrialEngine, run_job or trialbox run/serve --ray (run_trial runs its trial in this "
            "process: give it a docker or fake backend)"
        )
