"""`--ray ADDRESS` and `--registry HOST:PORT`: the same command, its trials placed on the
nodes of a Ray cluster (each node's Docker engine runs their sandboxes).

On `run`, `serve`, `prewarm` and `reap`; `TRIALBOX_RAY` is the default address, and with a
cluster `TRIALBOX_REGISTRY` the default registry (`add_ray_options`, `ray_config`).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.sandbox.backend_config import RayBackendConfig
    from orchestrator.trials.config import TrialConfig

# The same variables `trialbox run` reads through its settings: prewarm, serve and reap go to
# the cluster a user exported for run, not quietly to the local engine. The registry variable
# counts only with a cluster (the scripts read it too, to start a local registry).
RAY_ENV, REGISTRY_ENV = "TRIALBOX_RAY", "TRIALBOX_REGISTRY"


def add_ray_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Ray cluster (the ray extra: pip install 'trialbox[ray]')")
    group.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=os.environ.get(RAY_ENV) or None,
        help="place trials on the nodes of this Ray cluster ('auto', HOST:PORT or "
        "ray://HOST:10001): each runs on a node with room for its cpus and memory, in that "
        f"node's Docker engine (docs/cluster.md; default: ${RAY_ENV})",
    )
    group.add_argument(
        "--registry",
        metavar="HOST:PORT",
        help="with --ray: a registry the nodes share task images through (built once, pushed, "
        "pulled elsewhere by their content-hash tag); without it each node builds its own "
        f"(default with a cluster: ${REGISTRY_ENV})",
    )


def ray_config(args: Any, node: Any = None, *, environment: bool = True) -> RayBackendConfig | None:
    """The cluster `--ray` names (None without it); `node` is what each node runs. `args`:
    argparse's namespace, or `trialbox run`'s settings (where a job file or TRIALBOX_RAY and
    TRIALBOX_REGISTRY may have given them). `environment=False`: the flags alone (a resumed
    job reads no variables)."""
    from orchestrator.sandbox.backend_config import DockerBackendConfig, RayBackendConfig

    address, registry = getattr(args, "ray", None), getattr(args, "registry", None)
    if address is None:
        if registry is not None:
            also = f" (or ${RAY_ENV})" if environment else ""
            raise ValueError(f"--registry: only with --ray ADDRESS{also}")
        return None
    if registry is None and environment:
        registry = os.environ.get(REGISTRY_ENV) or None
    return RayBackendConfig(address=address, registry=registry, node=node or DockerBackendConfig())


def on_cluster(config: TrialConfig, args: Any) -> TrialConfig:
    """`config` with its trials placed on the cluster `--ray` names, if it names one."""
    backend = config.backend
    cluster = ray_config(args, backend if backend.type in ("docker", "fake") else None)
    return config if cluster is None else config.model_copy(update={"backend": cluster})
