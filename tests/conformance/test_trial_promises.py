"""The promises a trial makes, kept through `run_trial` on every backend: the label hidden from
the agent, a reward the agent wrote reset before the verifier runs, a timed-out agent still
verified, a cancel leaving no sandbox and a cancelled result, and credentials scrubbed from
every collected file.

Agents are `command:` agents and verifiers plain test.sh, in the fake shell's vocabulary, so
the same trial runs on the fake and in a real container; limits are the defaults.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator import TrialConfig, TrialResult, run_trial
from orchestrator.backends import build_backend
from orchestrator.backends.fake import FakeBackend
from orchestrator.common.ids import new_id
from orchestrator.common.scrub import REDACTED
from orchestrator.sandbox import Backend, Sandbox, SandboxSpec
from tests.conformance.conftest import wait_until
from tests.conftest import ensure_task_image, write_task

SECRET = "sk-conformance-secret-5150"
LABEL = {"answer": "LABEL-c0nf-91d2"}


def _fake(request: pytest.FixtureRequest, tmp_path: Path) -> TrialConfig:
    return TrialConfig(jobs_dir=tmp_path / "jobs", backend={"type": "fake"})


def _docker(request: pytest.FixtureRequest, tmp_path: Path) -> TrialConfig:
    config: TrialConfig = request.getfixturevalue("config")  # the engine and the base image
    return config


@dataclass
class TrialsUnderTest:
    """One backend (kept for the whole test, so its sandboxes can be looked up), its config,
    and the sandboxes it made."""

    backend: Backend
    config: TrialConfig
    tmp_path: Path
    made: list[Sandbox]

    async def task(self, name: str, **kwargs: Any) -> Path:
        """A task folder whose image is ready (the Docker image cache is shared by the suite)."""
        folder = write_task(self.tmp_path / "tasks", name, **kwargs)
        if not isinstance(self.backend, FakeBackend):
            await ensure_task_image(self.config, folder)
        return folder

    async def run(self, task: Path, agent: str, **kwargs: Any) -> TrialResult:
        return await run_trial(task, agent, config=self.config, backend=self.backend, **kwargs)


@pytest.fixture(
    params=[
        pytest.param(_fake, id="fake"),
        pytest.param(_docker, id="docker", marks=pytest.mark.docker),
    ]
)
def trials(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> TrialsUnderTest:
    made_config: Callable[[pytest.FixtureRequest, Path], TrialConfig] = request.param
    config = made_config(request, tmp_path)
    backend = build_backend(config.backend, config.limits)
    made: list[Sandbox] = []
    create = backend.create_sandbox

    async def create_and_keep(spec: SandboxSpec) -> Sandbox:
        sandbox = await create(spec)
        made.append(sandbox)
        return sandbox

    monkeypatch.setattr(backend, "create_sandbox", create_and_keep)
    return TrialsUnderTest(backend, config, tmp_path, made)


def collected(result: TrialResult, relative: str) -> str:
    return (Path(result.trial_dir) / "logs" / relative).read_text()


async def test_the_label_reaches_the_verifier_but_never_the_agent(trials: TrialsUnderTest) -> None:
    task = await trials.task(
        "label",
        test_sh="#!/bin/sh\ncat /tests/label.json > /logs/verifier/label-seen.txt\n"
        "echo 1 > /logs/verifier/reward.txt\n",
    )
    agent = "command:cat /tests/label.json"

    result = await trials.run(task, agent, metadata={"label": LABEL})

    assert (result.status, result.reward) == ("success", 1.0), result.error
    assert json.loads(collected(result, "verifier/label-seen.txt")) == LABEL
    said = collected(result, "agent/stderr.txt")
    assert "label.json: No such file or directory" in said  # the agent's cat found nothing
    agent_logs = [p for p in (Path(result.trial_dir) / "logs" / "agent").rglob("*") if p.is_file()]
    assert agent_logs
    for path in agent_logs:
        assert LABEL["answer"].encode() not in path.read_bytes(), f"{path} holds the label"


async def test_a_reward_the_agent_wrote_is_reset_before_the_verifier(
    trials: TrialsUnderTest,
) -> None:
    task = await trials.task(
        "forged-reward",
        test_sh="#!/bin/sh\ncat /app/forged > /logs/verifier/agent-forged.txt\n",  # no reward
    )
    agent = "command:echo 1 > /logs/verifier/reward.txt && echo yes > /app/forged"

    result = await trials.run(task, agent)

    assert collected(result, "verifier/agent-forged.txt") == "yes\n"  # the forgery was written
    assert result.agent.exit_code == 0
    assert result.reward != 1.0
    assert result.status != "success"


async def test_an_agent_past_its_timeout_is_still_verified(trials: TrialsUnderTest) -> None:
    task = await trials.task(
        "slow-agent",
        task_toml="[agent]\ntimeout_sec = 1\n",
        test_sh="#!/bin/sh\ncat /app/started > /logs/verifier/started.txt\n"
        "echo 1 > /logs/verifier/reward.txt\n",
    )

    result = await trials.run(task, "command:echo started > /app/started; sleep 120")

    assert result.agent.termination == "timeout"
    assert (result.status, result.reward) == ("success", 1.0), result.error
    assert collected(result, "verifier/started.txt") == "started\n"
    assert result.timings.agent < 60


async def test_a_cancel_while_the_agent_runs_leaves_nothing(trials: TrialsUnderTest) -> None:
    task = await trials.task("cancelled")
    job_id = new_id("job-conformance")
    running = asyncio.ensure_future(
        trials.run(task, "command:echo up > /app/up; sleep 120", job_id=job_id)
    )

    async def agent_is_running() -> bool:
        if running.done():
            return True  # fails below with the trial's own outcome
        return bool(trials.made) and (await trials.made[0].exec("cat /app/up")).exit_code == 0

    try:
        await wait_until(agent_is_running, within=120)
        assert not running.done(), running.result()
    finally:
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    [trial_dir] = list((trials.config.jobs_dir / job_id).glob("*"))
    result = TrialResult.model_validate_json((trial_dir / "result.json").read_text())
    assert result.status == "cancelled"
    assert await trials.backend.find_leftovers(job=job_id) == []
    gone = await trials.made[0].health()
    assert (gone.exists, gone.running) == (False, False)


async def test_a_credential_the_agent_prints_is_in_no_collected_file(
    trials: TrialsUnderTest,
) -> None:
    task = await trials.task("leaky")
    trials.config = trials.config.model_copy(update={"credentials": {"MY_API_KEY": SECRET}})
    agent = (
        'command:echo "key=$MY_API_KEY"; echo "err=$MY_API_KEY" >&2; '
        'echo "$MY_API_KEY" > /logs/artifacts/key.txt'
    )

    result = await trials.run(task, agent)

    assert (result.status, result.reward) == ("success", 1.0), result.error
    files = [p for p in Path(result.trial_dir).rglob("*") if p.is_file()]
    assert Path(result.trial_dir) / "result.json" in files
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), f"{path} holds the secret"
    assert collected(result, "agent/stdout.txt") == f"key={REDACTED}\n"  # it was printed
    assert collected(result, "artifacts/key.txt") == f"{REDACTED}\n"
