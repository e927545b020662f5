"""How a trial config chooses the Docker backend. Importing this does not import `docker`, nor
does `import orchestrator` (tests/test_lazy_imports.py holds both); `build()` does.

`DockerBackendConfig` is `type="docker"`, the default of `TrialConfig.backend`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.common.limits import Limits

if TYPE_CHECKING:
    from orchestrator.backends.docker.backend import DockerBackend


class DockerBackendConfig(BaseModel):
    """Run sandboxes as containers of the local engine (`DOCKER_HOST`, else the default
    socket)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["docker"] = "docker"

    def build(self, limits: Limits) -> DockerBackend:
        """The backend, made when first needed (the Docker SDK is imported only then)."""
        from orchestrator.backends.docker.backend import DockerBackend

        return DockerBackend(limits)
