"""`serve --max-retries N` / `TrialEngine(max_retries=N)`: a rollout whose trial ends in infra
is run again under the same rollout id before its status reports, every try kept on disk in
its own folder (the earlier ones' result.json saying `superseded_by`), the status saying which
try it is and why the earlier ones failed; only infra is retried, and a cancel reaches
whichever try is running. The fake backend: its engine "fails the create" of the trials a test
picks, and holds the others at a gate where a test needs them held.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator import TrialEngine, TrialResult
from orchestrator.common.errors import SandboxError
from orchestrator.common.ids import trial_id_for
from orchestrator.report.disk import read_job
from orchestrator.sandbox import Sandbox, SandboxSpec
from orchestrator.service.retries import Backoff
from orchestrator.service.rollouts import RolloutRequest, RolloutStatus
from tests.service.conftest import open_app
from tests.service.test_cancel_dispositions import Gate, HeldBackend, engine_on

NO_WAIT = Backoff(0, 0)


class FailingBackend(HeldBackend):
    """HeldBackend whose engine refuses to create the sandboxes of the trials `fails` picks
    (SandboxError: infra); `asked` lists every trial id a create was asked for."""

    def __init__(self, fails: Callable[[str], bool]) -> None:
        super().__init__()
        self.fails = fails
        self.asked: list[str] = []

    def hold_trial(self, trial_id: str, step: str) -> Gate:
        gate = self.gates[trial_id, step] = Gate()
        return gate

    async def create_sandbox(self, spec: SandboxSpec) -> Sandbox:
        self.asked.append(spec.trial_id)
        if self.fails(spec.trial_id):
            raise SandboxError(f"create {spec.trial_id}: injected fault (the engine failed)")
        return await super().create_sandbox(spec)


def first_and_retry(rollout_id: str, n: int) -> str:
    """The trial id of a rollout's try after `n` infra ones."""
    return trial_id_for(rollout_id if n == 0 else f"{rollout_id}.retry{n}")


async def settled(engine: TrialEngine, rollout_id: str) -> RolloutStatus:
    """Its status once it has settled (at once, when it already has)."""
    with contextlib.suppress(KeyError):  # no longer in flight
        await engine.wait(rollout_id)
    return engine.status(rollout_id)


async def run_one(
    tmp_path: Path, backend: FailingBackend, rollout_id: str, **engine_options: Any
) -> tuple[TrialEngine, RolloutStatus]:
    """Submit one rollout to a fresh engine and read its status once it has settled."""
    engine = engine_on(tmp_path, backend, retry_backoff=NO_WAIT, **engine_options)
    try:
        await engine.submit(RolloutRequest(rollout_id=rollout_id))
        return engine, await settled(engine, rollout_id)
    finally:
        await engine.shutdown(drain_sec=0)


def written(trial_dir: str | None) -> TrialResult:
    assert trial_dir is not None
    return TrialResult.model_validate_json((Path(trial_dir) / "result.json").read_text())


async def test_an_infra_try_is_rerun_under_the_same_id_and_kept_on_disk(tmp_path: Path) -> None:
    backend = FailingBackend(lambda tid: tid == trial_id_for("r1"))
    engine, status = await run_one(tmp_path, backend, "r1", max_retries=2)

    assert (status.status, status.reward, status.attempt) == ("success", 1.0, 2)
    assert backend.asked == [trial_id_for("r1"), first_and_retry("r1", 1)]
    [earlier] = status.retried
    assert earlier.trial_id == trial_id_for("r1")
    assert earlier.error_type == "SandboxError" and "injected fault" in (earlier.error or "")

    first, second = written(earlier.trial_dir), written(status.trial_dir)
    assert first.error is not None and first.error.category == "infra"
    assert first.superseded_by == second.trial_id == first_and_retry("r1", 1)
    assert first.rollout_id == second.rollout_id == "r1"
    assert second.superseded_by is None

    job = read_job(tmp_path / "jobs" / engine.job_id)  # the report counts the last try only
    assert [r.trial_id for r in job.last_results] == [second.trial_id]
    assert job.superseded_by == {first.trial_id: second.trial_id}


async def test_tries_stop_at_the_limit_and_the_last_infra_is_reported(tmp_path: Path) -> None:
    backend = FailingBackend(lambda tid: True)
    _, status = await run_one(tmp_path, backend, "r1", max_retries=2)

    assert (status.status, status.error_category, status.attempt) == ("failure", "infra", 3)
    assert backend.asked == [first_and_retry("r1", n) for n in range(3)]
    chain = [written(a.trial_dir) for a in status.retried] + [written(status.trial_dir)]
    assert [r.superseded_by for r in chain] == [
        first_and_retry("r1", 1),
        first_and_retry("r1", 2),
        None,
    ]


@pytest.mark.parametrize("max_retries", [0, 3])
async def test_a_scored_rollout_runs_once(tmp_path: Path, max_retries: int) -> None:
    backend = FailingBackend(lambda tid: False)
    _, status = await run_one(tmp_path, backend, "ok", max_retries=max_retries)
    assert (status.status, status.attempt, status.retried) == ("success", 1, [])
    assert backend.asked == [trial_id_for("ok")]
    assert written(status.trial_dir).superseded_by is None


async def test_an_unhealthy_sandbox_is_the_tasks_and_not_retried(tmp_path: Path) -> None:
    backend = FailingBackend(lambda tid: False)
    backend.unready = True
    _, status = await run_one(tmp_path, backend, "sick", max_retries=3)
    assert status.status == "failure" and status.error_category != "infra"
    assert (status.attempt, backend.asked) == (1, [trial_id_for("sick")])


async def test_a_cancel_reaches_the_retry_that_is_running(tmp_path: Path) -> None:
    backend = FailingBackend(lambda tid: tid == trial_id_for("r1"))
    gate = backend.hold_trial(first_and_retry("r1", 1), "agent")
    engine = engine_on(tmp_path, backend, max_retries=3, retry_backoff=NO_WAIT)
    try:
        await engine.submit(RolloutRequest(rollout_id="r1"))
        await gate.until_reached()  # the second try's agent runs
        assert engine.status("r1").attempt == 2
        assert await engine.cancel(ids=["r1"]) == {"r1": "cancelled_running"}
        status = engine.status("r1")
    finally:
        backend.open_all()
        await engine.shutdown(drain_sec=0)
    assert (status.status, status.attempt) == ("cancelled", 2)
    assert backend.asked == [trial_id_for("r1"), first_and_retry("r1", 1)]  # no third
    assert written(status.trial_dir).agent.termination == "aborted"
    assert {item.trial for item in await backend.find_leftovers()} == set()


async def test_a_cancel_while_waiting_to_retry_ends_on_the_infra_try(tmp_path: Path) -> None:
    """Between tries the last one is finishing: the cancel answers `finishing`, its own infra
    outcome stands, and no further try starts (the long backoff ends at once)."""
    backend = FailingBackend(lambda tid: True)
    engine = engine_on(tmp_path, backend, max_retries=3, retry_backoff=Backoff(600, 600))
    try:
        await engine.submit(RolloutRequest(rollout_id="r1"))
        deadline = time.monotonic() + 10
        while not (backend.asked and engine.status("r1").status == "grading"):
            assert time.monotonic() < deadline, "the first try never failed"
            await asyncio.sleep(0.01)
        assert await engine.cancel(ids=["r1"]) == {"r1": "finishing"}
        status = await asyncio.wait_for(settled(engine, "r1"), 10)
    finally:
        await engine.shutdown(drain_sec=0)
    assert (status.status, status.error_category, status.attempt) == ("failure", "infra", 1)
    assert backend.asked == [trial_id_for("r1")]


async def test_the_status_document_says_the_try_over_http(tmp_path: Path) -> None:
    backend = FailingBackend(lambda tid: tid == trial_id_for("r1"))
    engine = engine_on(tmp_path, backend, max_retries=1, retry_backoff=NO_WAIT)
    transport = httpx.ASGITransport(app=open_app(engine))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://trialbox") as client:
            assert (await client.post("/rollouts", json={"rollout_id": "r1"})).status_code == 202
            await engine.wait("r1")
            doc: dict[str, Any] = (await client.get("/rollouts/r1")).json()
    finally:
        await engine.shutdown(drain_sec=0)
    assert (doc["status"], doc["attempt"]) == ("success", 2)
    assert [(a["trial_id"], a["error_type"]) for a in doc["retried"]] == [
        (trial_id_for("r1"), "SandboxError")
    ]


def test_a_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="max_retries must be 0 or more"):
        TrialEngine(max_retries=-1)


def test_serve_refuses_a_negative_max_retries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli import main

    assert main(["serve", "--task", str(tmp_path / "task"), "--max-retries", "-1"]) == 1
    said = capsys.readouterr()
    assert "--max-retries must be 0 or more" in said.out + said.err


async def test_a_rollout_id_of_the_longest_kind_is_retried_too(tmp_path: Path) -> None:
    longest = "r" * 128  # a valid trial id as it is: its retry's cannot just add a suffix
    backend = FailingBackend(lambda tid: tid == trial_id_for(longest))
    _, status = await run_one(tmp_path, backend, longest, max_retries=1)
    assert (status.status, status.attempt) == ("success", 2)
    assert backend.asked == [longest, first_and_retry(longest, 1)]
    assert len(first_and_retry(longest, 1)) <= 128
