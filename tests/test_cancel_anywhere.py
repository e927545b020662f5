"""A trial cancelled at any moment leaves no container behind, and says it was cancelled.

The delays sweep every phase of a trial of a cached image: materialize, create, start,
staging, the agent's launch and its run. The check runs the moment the cancelled await
returns: teardown must be finished by then, not merely scheduled.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import docker
import pytest

from orchestrator import TrialConfig, run_trial
from tests.conftest import EXAMPLES, our_containers

DELAYS = [0.0, 0.01, 0.03, 0.06, 0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 0.8, 1.2, 2.0]


@pytest.mark.parametrize("delay", DELAYS)
async def test_cancel_at_any_moment_leaves_nothing(
    delay: float, config: TrialConfig, docker_client: docker.DockerClient
) -> None:
    trial = asyncio.ensure_future(
        run_trial(
            EXAMPLES / "hello-oracle", "command:sleep 60", config=config, trial_id=f"c{delay}"
        )
    )
    await asyncio.sleep(delay)
    trial.cancel()
    with pytest.raises(asyncio.CancelledError):
        await trial
    assert our_containers(docker_client) == []
    results = list(Path(config.jobs_dir).glob("*/*/result.json"))
    if results:  # a cancel before materialization has no trial folder to write into
        assert json.loads(results[0].read_text())["status"] == "cancelled"
