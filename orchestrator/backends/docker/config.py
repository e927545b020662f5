"""`DockerBackendConfig` (`type="docker"`, the default of `TrialConfig.backend`), re-exported
beside the backend it chooses. The model lives in `orchestrator/sandbox/backend_config.py`, a
layer `trials/` may import; `orchestrator.backends.build_backend` makes the `DockerBackend` it
names. Importing this does not import `docker` (tests/test_lazy_imports.py).
"""

from orchestrator.sandbox.backend_config import DockerBackendConfig

__all__ = ["DockerBackendConfig"]
