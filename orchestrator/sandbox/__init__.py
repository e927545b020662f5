"""The seam between a trial and where it runs: what a sandbox and a backend must do.

The trial, the agents, prewarm and reap talk only to these interfaces; each backend
(`orchestrator.backends.docker`, `orchestrator.backends.fake`, …) implements them. Prewarm
needs only an `ImageMaker` and reap only a `Reaper`, which a cluster's nodes are too. The
configs that choose a backend (`BackendConfig`, the union `TrialConfig.backend` holds) are
`backend_config`'s, here because `trials/` may import this layer and no backend.
"""

from orchestrator.sandbox.backend import (
    Backend,
    ImageMaker,
    ImageOutcome,
    ImagePlan,
    Leftover,
    LocalImages,
    Reaper,
)
from orchestrator.sandbox.protocol import (
    Capabilities,
    ExecResult,
    Health,
    Healthcheck,
    ImageDefaults,
    Sandbox,
)
from orchestrator.sandbox.spec import (
    LABEL_JOB,
    LABEL_OWNER,
    LABEL_TRIAL,
    Mount,
    SandboxSpec,
    sandbox_name,
)

__all__ = [
    "LABEL_JOB",
    "LABEL_OWNER",
    "LABEL_TRIAL",
    "Backend",
    "Capabilities",
    "ExecResult",
    "Health",
    "Healthcheck",
    "ImageDefaults",
    "ImageMaker",
    "ImageOutcome",
    "ImagePlan",
    "Leftover",
    "LocalImages",
    "Mount",
    "Reaper",
    "Sandbox",
    "SandboxSpec",
    "sandbox_name",
]
