"""Every sandbox is made with a disk limit: the task's storage_mb (Harbor's 10240 when it
says none), clipped to `Limits.storage_max_mb` with a warning; the backend holds it
(Docker: backends/docker/storage.py, tests/faults/test_storage_limit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import Limits, TrialConfig, run_trial
from orchestrator.backends.fake import FakeBackend
from tests.conftest import write_task


async def made_with(
    tmp_path: Path, task_toml: str | None, limits: Limits
) -> tuple[int | None, list[str]]:
    task = write_task(tmp_path / "tasks", "disk", task_toml=task_toml)
    config = TrialConfig(jobs_dir=tmp_path / "jobs", backend={"type": "fake"}, limits=limits)
    backend = FakeBackend(limits)
    result = await run_trial(task, "nop", config=config, backend=backend)
    (sandbox,) = backend.created
    return sandbox.spec.storage_mb, result.warnings


@pytest.mark.parametrize(
    ("task_toml", "expected"),
    [
        (None, 10240),
        ("[environment]\nstorage_mb = 50\n", 50),
        ('[environment]\nstorage = "1G"\n', 1024),
    ],
)
async def test_the_sandbox_gets_the_task_s_storage_mb(
    tmp_path: Path, task_toml: str | None, expected: int
) -> None:
    storage_mb, warnings = await made_with(tmp_path, task_toml, Limits())
    assert storage_mb == expected
    assert not [w for w in warnings if "storage_mb" in w], warnings


async def test_limits_storage_max_mb_clips_a_task_that_asks_more_with_a_warning(
    tmp_path: Path,
) -> None:
    storage_mb, warnings = await made_with(tmp_path, None, Limits(storage_max_mb=300))
    assert storage_mb == 300
    assert [w for w in warnings if "storage_mb = 10240 MiB clipped to" in w], warnings
