"""How a trial config chooses the fake backend (tests, and trying trialbox without an engine).

`FakeBackendConfig` is `type="fake"`; its `build()` imports the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.common.limits import Limits

if TYPE_CHECKING:
    from orchestrator.backends.fake.backend import FakeBackend


class FakeBackendConfig(BaseModel):
    """Sandboxes that live in memory: no engine, no image builds, scripted commands."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["fake"] = "fake"

    def build(self, limits: Limits) -> FakeBackend:
        from orchestrator.backends.fake.backend import FakeBackend

        return FakeBackend(limits=limits)
