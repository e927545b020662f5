"""Shared by the job tests: fake-backend configs, task folders, and a backend whose sandbox
creation fails (an infra error) for the trials a test picks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator import Limits, TrialConfig, TrialResult
from orchestrator.backends.fake import FakeBackend
from orchestrator.common.errors import SandboxError
from orchestrator.sandbox import Sandbox, SandboxSpec
from tests.conftest import write_task

QUICK = Limits(stop_term_grace_sec=0.5, stop_kill_grace_sec=0.5)
NO_REWARD = "#!/bin/sh\necho looked but wrote nothing\n"


def fake_config(tmp_path: Path, **changes: Any) -> TrialConfig:
    fields: dict[str, Any] = {"jobs_dir": tmp_path / "jobs", "backend": {"type": "fake"}}
    return TrialConfig(**(fields | {"limits": QUICK} | changes))


def make_tasks(tmp_path: Path, *names: str, **kwargs: Any) -> list[Path]:
    return [write_task(tmp_path / "tasks", name, **kwargs) for name in names]


class FlakyBackend(FakeBackend):
    """A fake backend whose engine "fails the create" (SandboxError: infra) for each trial
    `fails(trial_id)` picks; the others run as usual."""

    def __init__(self, fails: Callable[[str], bool], **kwargs: Any) -> None:
        super().__init__(QUICK, **kwargs)
        self.fails = fails
        self.refused: list[str] = []

    async def create_sandbox(self, spec: SandboxSpec) -> Sandbox:
        if self.fails(spec.trial_id):
            self.refused.append(spec.trial_id)
            raise SandboxError(f"create {spec.trial_id}: injected fault (the engine failed)")
        return await super().create_sandbox(spec)


def on_disk(result: TrialResult) -> bytes:
    return (Path(result.trial_dir) / "result.json").read_bytes()
