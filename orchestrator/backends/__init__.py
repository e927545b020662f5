"""Where sandboxes run. Each backend is a subpackage with a light `config` module (a pydantic
model with a `type` literal and a lazy `build`) and the implementation behind it.

A new backend is one subpackage here and one member of `BackendConfig`.
"""

from typing import Annotated

from pydantic import Field

from orchestrator.backends.docker.config import DockerBackendConfig
from orchestrator.backends.fake.config import FakeBackendConfig
from orchestrator.backends.ray.config import RayBackendConfig

BackendConfig = Annotated[
    DockerBackendConfig | FakeBackendConfig | RayBackendConfig, Field(discriminator="type")
]

__all__ = ["BackendConfig", "DockerBackendConfig", "FakeBackendConfig", "RayBackendConfig"]
