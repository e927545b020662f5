"""`RayBackendConfig` (`type="ray"`: a cluster), re-exported where it has always been. The model
lives in `orchestrator/sandbox/backend_config.py`, a layer `trials/` may import. Importing this
does not import `ray` or `docker` (tests/test_lazy_imports.py).

A cluster is not a sandbox backend: `executors.base.executor_for` reads this config and runs
the trials on its nodes (`executors/ray/`); `build_backend` refuses it.
"""

from orchestrator.sandbox.backend_config import RayBackendConfig

__all__ = ["RayBackendConfig"]
