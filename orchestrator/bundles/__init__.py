"""Workflow bundles: a user's rollout project as a wheel whose dependencies are baked into the
task image's runtime venv, offline, and whose own code each trial adds (docs/bundles.md).

`build_bundle` and `inspect_bundle` are the interface; the agent that runs a bundle is
`orchestrator.trials.bundle_agent.BundleAgent` (`--agent bundle:WHEEL_OR_PROJECT`).
"""

from __future__ import annotations

from orchestrator.bundles.build import build_bundle
from orchestrator.bundles.errors import BundleError, DependencyDownloadError, DependencyError
from orchestrator.bundles.info import BundleInfo, inspect_bundle

__all__ = [
    "BundleError",
    "BundleInfo",
    "DependencyDownloadError",
    "DependencyError",
    "build_bundle",
    "inspect_bundle",
]
