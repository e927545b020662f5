"""Where a trial's sandboxes come from, as a config says it: `BackendConfig`, the union
discriminated on `type` that `TrialConfig.backend` holds, and its members:
`DockerBackendConfig` (`type="docker"`, the default), `FakeBackendConfig` (`type="fake"`) and
`RayBackendConfig` (`type="ray"`, a cluster; not a sandbox backend: its trials run whole on
its nodes, through `executors/ray/`, and `node` names the backend each node makes sandboxes
with).

Why in `sandbox/`: `trials/` owns `TrialConfig` and may import no backend, and no import runs
upward (docs/architecture.md, section 1), so the choice lives in the layer below both that
holds what it chooses between, the `Backend` interface. These are plain pydantic models that
import nothing of ours, so choosing a backend loads none (tests/test_lazy_imports.py), and
none can make what it names: `orchestrator.backends.build_backend(config, limits)` does that
(above this layer, importing the backend it names when called), and `executors.base.
executor_for` runs a cluster's trials. `orchestrator/backends/docker/config.py` and
`ray/config.py` re-export theirs where they have always been, and job files and config.json
keep their format (`backend = {type = "ray", ...}`).

A new backend is one member here and one case in `build_backend`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class DockerBackendConfig(BaseModel):
    """Run sandboxes as containers of the local engine (`DOCKER_HOST`, else the default
    socket)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["docker"] = "docker"


class FakeBackendConfig(BaseModel):
    """Sandboxes that live in memory: no engine, no image builds, scripted commands (tests,
    and trying trialbox without an engine)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["fake"] = "fake"


class RayBackendConfig(BaseModel):
    """Place each trial on a node of a Ray cluster with room for its cpus and memory; the
    node's own engine runs its sandbox (each node's DOCKER_HOST, else its default socket).
    No sandbox is made here: `build_backend` refuses it, and `executor_for` runs its trials on
    the nodes (TrialEngine, run_job, trialbox run/serve --ray)."""

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


BackendConfig = Annotated[
    DockerBackendConfig | FakeBackendConfig | RayBackendConfig, Field(discriminator="type")
]

__all__ = ["BackendConfig", "DockerBackendConfig", "FakeBackendConfig", "RayBackendConfig"]
