"""How a trial config chooses the fake backend (tests, and trying trialbox without an engine):
`FakeBackendConfig` (`type="fake"`), re-exported beside the backend it chooses. The model lives
in `orchestrator/sandbox/backend_config.py`, a layer `trials/` may import;
`orchestrator.backends.build_backend` makes the `FakeBackend` it names (importing the rest).
"""

from orchestrator.sandbox.backend_config import FakeBackendConfig

__all__ = ["FakeBackendConfig"]
