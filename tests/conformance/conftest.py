"""The backends under test: every test in this folder runs once per backend.

A new backend joins the suite with one entry in `BACKENDS`: a function that returns the
backend and the owner its sandboxes carry (and that asks for whatever fixtures it needs).
The Docker entry is marked `docker`, so `pytest -m "not docker"` runs the fake alone on a
machine without an engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from orchestrator.backends.fake import FakeBackend
from orchestrator.common.ids import new_id
from orchestrator.sandbox import Backend, Sandbox, SandboxSpec
from orchestrator.tasks.task import load_task
from tests.conftest import BASE_IMAGE_MAP, EXAMPLES, TEST_OWNER


def _fake(request: pytest.FixtureRequest) -> tuple[Backend, str]:
    return FakeBackend(), TEST_OWNER


def _docker(request: pytest.FixtureRequest) -> tuple[Backend, str]:
    config = request.getfixturevalue("config")  # checks the engine and the base image
    from orchestrator.backends.docker.backend import DockerBackend

    return DockerBackend(config.limits), config.owner


BACKENDS = [
    pytest.param(_fake, id="fake"),
    pytest.param(_docker, id="docker", marks=pytest.mark.docker),
]


@dataclass
class BackendUnderTest:
    """A backend, an image of examples/hello-oracle on it, and a job id for this test."""

    backend: Backend
    image: str
    owner: str
    job_id: str

    def spec(self, **changes: Any) -> SandboxSpec:
        fields: dict[str, Any] = {
            "image": self.image,
            "trial_id": new_id("conformance"),
            "job_id": self.job_id,
            "owner": self.owner,
        }
        return SandboxSpec(**(fields | changes))

    @contextlib.asynccontextmanager
    async def sandbox(self, **changes: Any) -> AsyncIterator[Sandbox]:
        """A sandbox that is destroyed when the block ends, however it ends."""
        sandbox = await self.backend.create_sandbox(self.spec(**changes))
        try:
            yield sandbox
        finally:
            await sandbox.destroy()


async def _under_test(request: pytest.FixtureRequest) -> BackendUnderTest:
    made: Callable[[pytest.FixtureRequest], tuple[Backend, str]] = request.param
    chosen, owner = made(request)
    built = await chosen.ensure_image(load_task(EXAMPLES / "hello-oracle"), BASE_IMAGE_MAP)
    return BackendUnderTest(chosen, built.tag, owner, new_id("job-conformance"))


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest) -> BackendUnderTest:
    return await _under_test(request)


async def wait_until(check: Callable[[], Any], *, within: float = 30.0) -> None:
    """Poll an async `check` until it returns true; fail after `within` seconds."""
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.02)
