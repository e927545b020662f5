"""A trial cancelled at any moment leaves no container behind, and says it was cancelled.

The sweep cancels trials of a cached image after growing delays, from before the trial
exists (the task still loading) through materialize, image, start and the agent's launch,
to the agent at work. Each cancel is checked the moment the cancelled await returns:
teardown must be finished by then, not merely scheduled. Which phase a delay hit is read
from what the trial left: no folder at all, or its `result.json` (the last phase with a
timing, and the relay's account of the abort). A loaded machine moves the phases in time, so
no delay is tied to a phase; the sweep as a whole must have hit a cancel before the
container existed and one while the agent ran, and it goes on with longer delays until the
agent is reached.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator import TrialConfig, TrialResult, run_trial
from orchestrator.backends.docker.backend import DockerBackend
from orchestrator.sandbox import ImageOutcome
from tests.conftest import EXAMPLES, ContainerWatch, ensure_task_image, our_containers

HELLO = EXAMPLES / "hello-oracle"
DELAYS = [0.0, 0.01, 0.03, 0.06, 0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 0.8, 1.2, 2.0]
LONGEST_DELAY = 30.0  # the tail grows to this at most while the agent was never reached
PHASES = ("materialize", "image", "start", "agent", "verify")
BEFORE_CONTAINER = {"before the trial", "materialize", "image"}
AGENT_RUNNING = "agent running"


def phase_hit(result: TrialResult) -> str:
    """The phase the cancel landed in: the last one with a timing (a cancelled phase keeps
    the time it ran), the agent's split by whether the relay found its group at work."""
    timed = [phase for phase in PHASES if getattr(result.timings, phase) > 0]
    assert timed, f"a trial with a result.json timed no phase: {result.timings}"
    last = timed[-1]
    if last != "agent":
        return last
    # "group quiesced": the relay found the agent's leader in the sandbox and stopped its
    # group; anything else means the cancel came while the agent was being launched.
    return AGENT_RUNNING if result.agent.detail == "group quiesced" else "agent launch"


async def cancel_after(
    delay: float, config: TrialConfig, client: docker.DockerClient, number: int
) -> str:
    """Start a trial, cancel it after `delay` seconds, check what it left; the phase hit."""
    watch = ContainerWatch(client)
    trial = asyncio.ensure_future(
        run_trial(
            HELLO, "command:sleep 60", config=config, trial_id=f"c{number}", job_id=watch.job_id
        )
    )
    await asyncio.sleep(delay)
    trial.cancel()
    with pytest.raises(asyncio.CancelledError):
        await trial
    where = f"cancel after {delay} s"
    assert our_containers(client) == [], where

    job_dir = Path(config.jobs_dir).resolve() / watch.job_id
    results = list(job_dir.glob("*/result.json"))
    if not results:
        # The trial writes its result.json whenever it ran at all, so none means the cancel
        # came before it: no trial folder may exist, and no container was ever created.
        assert not job_dir.exists(), f"{where}: a trial folder without a result.json"
        assert watch.created() == [], f"{where}: a container without a trial"
        return "before the trial"
    [result_file] = results
    result = TrialResult.model_validate_json(result_file.read_text())
    assert result.status == "cancelled", f"{where}: {result.status}"
    assert result.finished_at is not None and result.reward is None, where
    phase = phase_hit(result)
    created = watch.created()
    if phase in BEFORE_CONTAINER:
        assert created == [], f"{where}: cancelled in {phase}, yet a container was created"
    if phase in ("agent launch", AGENT_RUNNING):
        assert len(created) == 1, f"{where}: the agent's phase without its container"
        assert result.agent.termination == "aborted", f"{where}: {result.agent}"
    if phase == AGENT_RUNNING:
        assert result.agent.stop_sec > 0, f"{where}: {result.agent}"
    return phase


async def test_cancels_swept_from_before_the_container_to_the_running_agent_leave_nothing(
    config: TrialConfig, docker_client: docker.DockerClient
) -> None:
    await ensure_task_image(config, HELLO)  # a cached image: the phases are the trial's own
    hit: dict[float, str] = {}
    delays = list(DELAYS)
    while delays:
        delay = delays.pop(0)
        hit[delay] = await cancel_after(delay, config, docker_client, len(hit))
        if not delays and AGENT_RUNNING not in hit.values() and delay < LONGEST_DELAY:
            delays.append(min(delay * 2, LONGEST_DELAY))

    sweep = ", ".join(f"{delay} s: {phase}" for delay, phase in hit.items())
    print(f"the sweep hit: {sweep}")
    assert BEFORE_CONTAINER & set(hit.values()), f"no cancel came before the container: {sweep}"
    assert AGENT_RUNNING in hit.values(), f"no cancel came while the agent ran: {sweep}"


class _ImageGate(DockerBackend):
    """The Docker backend, with the image phase held until the test lets it go."""

    def __init__(self, config: TrialConfig) -> None:
        super().__init__(config.limits)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def ensure_image(self, *args: Any, **kwargs: Any) -> ImageOutcome:
        self.entered.set()
        await self.release.wait()
        return await super().ensure_image(*args, **kwargs)


async def test_a_trial_cancelled_before_its_agent_ran_says_the_agent_never_ran(
    config: TrialConfig, container_watch: ContainerWatch
) -> None:
    gate = _ImageGate(config)
    trial = asyncio.ensure_future(
        run_trial(HELLO, "nop", config=config, job_id=container_watch.job_id, backend=gate)
    )
    await asyncio.wait_for(gate.entered.wait(), 60)  # the trial is in its image phase
    trial.cancel()
    with pytest.raises(asyncio.CancelledError):
        await trial

    [result_file] = (config.jobs_dir.resolve() / container_watch.job_id).glob("*/result.json")
    result = TrialResult.model_validate_json(result_file.read_text())
    assert result.status == "cancelled"
    assert result.timings.image > 0 and result.timings.start == 0
    assert container_watch.created() == []
    assert result.agent.termination is None, result.agent
