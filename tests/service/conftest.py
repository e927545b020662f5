"""Helpers shared by the service tests: engines on the example task, container probes, and
waits on states (a status, a running sandbox), never on sleeps."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator import TrialConfig
from orchestrator.common.ids import trial_id_for
from orchestrator.sandbox import sandbox_name
from orchestrator.service import engine as engine_module
from orchestrator.service.engine import TrialEngine
from orchestrator.service.ttl_cache import TtlCache
from tests.conftest import TEST_OWNER, ensure_task_image

HELLO = Path(__file__).resolve().parents[2] / "examples" / "hello-oracle"
LONG = "command:sleep 60"
TERMINAL = {"success", "failure", "cancelled"}
MakeEngine = Callable[..., TrialEngine]

# A quick rollout held at a gate inside its sandbox until the test opens it (`open_gate`),
# so "it is still running when X happens" is a state the test makes, not a race it hopes for.
GATE = "/tmp/trialbox-test-gate"
HELD = f"command:until [ -e {GATE} ]; do sleep 0.05; done"


def held_test_sh(gate: str = GATE) -> str:
    """A verifier that waits at `gate`, then scores 1: the rollout stays `grading` until the
    test opens it."""
    return (
        f"#!/bin/sh\nuntil [ -e {gate} ]; do sleep 0.05; done\necho 1 > /logs/verifier/reward.txt\n"
    )


@pytest.fixture
async def make_engine(config: TrialConfig) -> AsyncIterator[MakeEngine]:
    """Engines on the example task (agent nop by default); all shut down without a drain.

    The example's image is requested first, so a rollout's first phases take the time of a
    cached image whichever test runs first."""
    await ensure_task_image(config, HELLO)
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
        ignore_removed=True,
        all=True,
        filters={"label": ["trialbox.trial", f"trialbox.owner={config.owner}"]},
    )
    return [c.name for c in found]


async def until_sandbox_up(
    client: docker.DockerClient, engine: TrialEngine, rollout_id: str, within: float = 30.0
) -> None:
    """The rollout's container runs, so a cancel now is a host abort of a started agent
    (`running` is reported from the trial's first phase, before any container exists)."""
    name = sandbox_name(trial_id_for(rollout_id), engine.job_id)
    job = f"trialbox.job={engine.job_id}"

    def names() -> list[str]:
        running = client.containers.list(
            ignore_removed=True, filters={"label": job, "status": "running"}
        )
        return [c.name for c in running]

    deadline = time.monotonic() + within
    while name not in await asyncio.to_thread(names):
        status = engine.status(rollout_id)
        if status.status in TERMINAL or time.monotonic() > deadline:
            raise AssertionError(f"no running container for {rollout_id}: {status}")
        await asyncio.sleep(0.05)


async def open_gate(client: docker.DockerClient, rollout_id: str, gate: str = GATE) -> None:
    """Let a held rollout go on: create `gate` in its sandbox."""
    labels = [f"trialbox.trial={trial_id_for(rollout_id)}", f"trialbox.owner={TEST_OWNER}"]
    (container,) = await asyncio.to_thread(client.containers.list, filters={"label": labels})
    done = await asyncio.to_thread(container.exec_run, ["touch", gate], user="root")
    assert done.exit_code == 0, done.output


class RetentionClock:
    """The clock of the engines' retention window: real time plus `offset`, which a test
    moves forward to make finished rollouts expire when it chooses."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


@pytest.fixture
def retention_clock(monkeypatch: pytest.MonkeyPatch) -> RetentionClock:
    """Engines made after this keep finished rollouts on this clock, so a test reads a
    finished status at leisure and then steps past the window instead of racing it."""
    clock = RetentionClock()
    monkeypatch.setattr(engine_module, "TtlCache", lambda ttl: TtlCache(ttl, clock=clock))
    return clock


def open_app(engine: TrialEngine, **kwargs: Any) -> Any:
    """An app whose requests may name the test agents and task folders by path."""
    from orchestrator.service.server import create_app

    kwargs.setdefault("agents", [LONG, HELD, "nop", "oracle"])
    kwargs.setdefault("task_paths", True)
    return create_app(engine, **kwargs)


def read_response(conn: socket.socket) -> bytes:
    """What the server sent until it closed (a reset after the answer is an end too)."""
    received = b""
    while True:
        try:
            data = conn.recv(65536)
        except ConnectionResetError:
            return received
        if not data:
            return received
        received += data
