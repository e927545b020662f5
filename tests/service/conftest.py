"""Helpers shared by the service tests: engines on the example task, container probes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator import TrialConfig
from orchestrator.common.ids import trial_id_for
from orchestrator.service.engine import TrialEngine

HELLO = Path(__file__).resolve().parents[2] / "examples" / "hello-oracle"
LONG = "command:sleep 60"
TERMINAL = {"success", "failure", "cancelled"}
MakeEngine = Callable[..., TrialEngine]


@pytest.fixture
async def make_engine(config: TrialConfig) -> AsyncIterator[MakeEngine]:
    """Engines on the example task (agent nop by default); all shut down without a drain."""
    made: list[TrialEngine] = []

    def make(**kwargs: Any) -> TrialEngine:
        kwargs.setdefault("config", config)
        kwargs.setdefault("task", HELLO)
        kwargs.setdefault("agent", "nop")
        engine = TrialEngine(**kwargs)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        await engine.shutdown(drain_sec=0)


def our_container_names(client: docker.DockerClient, config: TrialConfig) -> list[str]:
    found = client.containers.list(
        all=True, filters={"label": ["trialbox.trial", f"trialbox.owner={config.owner}"]}
    )
    return [c.name for c in found]


async def until_sandbox_up(
    client: docker.DockerClient, engine: TrialEngine, rollout_id: str, within: float = 30.0
) -> None:
    """The rollout's container runs, so a cancel now is a host abort of a started agent
    (`running` is reported from the trial's first phase, before any container exists)."""
    name = "trialbox-" + trial_id_for(rollout_id)
    job = f"trialbox.job={engine.job_id}"

    def names() -> list[str]:
        running = client.containers.list(filters={"label": job, "status": "running"})
        return [c.name for c in running]

    deadline = time.monotonic() + within
    while name not in await asyncio.to_thread(names):
        if time.monotonic() > deadline:
            raise AssertionError(f"no running container for {rollout_id}")
        await asyncio.sleep(0.05)


def open_app(engine: TrialEngine, **kwargs: Any) -> Any:
    """An app whose requests may name the test agents and task folders by path."""
    from orchestrator.service.server import create_app

    kwargs.setdefault("agents", [LONG, "nop", "oracle"])
    kwargs.setdefault("task_paths", True)
    return create_app(engine, **kwargs)
