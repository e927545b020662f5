"""The errors of bundles: a bundle that cannot be built or run is `validation` (it says nothing
about the agent's work, and retrying cannot help), an index the host cannot reach is `infra`.

`BundleError` and `DependencyError` are `AgentSpecError`s; `DependencyDownloadError` is the
`infra` one.
"""

from __future__ import annotations

from orchestrator.common.errors import AgentSpecError, TrialboxError


class BundleError(AgentSpecError):
    """A bundle cannot be built or used; the message names the project, wheel or field at
    fault and says what to do."""


class DependencyError(BundleError):
    """A bundle's dependency cannot be had for the image's Python: no version of it has a
    wheel for that CPython and platform, or its requirements conflict."""


class DependencyDownloadError(TrialboxError):
    """The host could not download a bundle's dependencies (the package index did not
    answer): nothing is wrong with the bundle, retry."""
