"""Where sandboxes run: a subpackage per backend (`docker/`, `fake/`), and `build_backend`,
which makes the backend a config names.

The configs themselves (`BackendConfig`, the union `TrialConfig.backend` holds, and its
members) live in `orchestrator/sandbox/backend_config.py`, a layer `trials/` may import; they
are re-exported here (and Docker's and Ray's in their `config.py`). `build_backend(config,
limits)` imports only the backend it makes, when called, so importing this package loads
none. A Ray cluster (`RayBackendConfig`) is not a sandbox backend: it is refused here, and
`executors.base.executor_for` runs its trials on its nodes.

A new backend is one subpackage here, one member of `BackendConfig` and one case in
`build_backend`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_never

from orchestrator.common.limits import Limits
from orchestrator.sandbox.backend_config import (
    BackendConfig,
    DockerBackendConfig,
    FakeBackendConfig,
    RayBackendConfig,
)

if TYPE_CHECKING:
    from orchestrator.sandbox.backend import Backend


def build_backend(config: BackendConfig, limits: Limits) -> Backend:
    """The backend `config` names, made now (its engine's SDK imported only then).

    A `RayBackendConfig` is refused with a `ValueError`: a cluster makes no sandbox here. Its
    trials run whole on its nodes, through an executor (`executors.base.executor_for`:
    TrialEngine, run_job, trialbox run/serve --ray); `run_trial` runs its trial in this
    process, on a sandbox backend."""
    match config:
        case DockerBackendConfig():
            from orchestrator.backends.docker.backend import DockerBackend

            return DockerBackend(limits)
        case FakeBackendConfig():
            from orchestrator.backends.fake.backend import FakeBackend

            return FakeBackend(limits=limits)
        case RayBackendConfig():
            raise ValueError(
                "a Ray cluster is not a sandbox backend: its trials run on its nodes through "
                "TrialEngine, run_job or trialbox run/serve --ray (run_trial runs its trial in "
                "this process: give it a docker or fake backend)"
            )
    assert_never(config)  # a new member of `BackendConfig` without its case fails mypy here


__all__ = [
    "BackendConfig",
    "DockerBackendConfig",
    "FakeBackendConfig",
    "RayBackendConfig",
    "build_backend",
]
