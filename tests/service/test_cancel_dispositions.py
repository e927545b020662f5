"""A cancel's answer is a promise about how the rollout ends, and it is kept.

`cancelled_queued` and `cancelled_running` end `cancelled`; `finishing` (the trial was past its
phases: verified, or a phase failed) ends with the trial's own outcome, because its finishing
steps are shielded and a scored trial stays scored. Each test holds a rollout at a step of its
trial (a gate in the fake backend: the agent, the verifier, the copy of /logs, the sandbox's
removal), cancels it there, and reads the outcome from the status, the result and
result.json. No engine: the fake backend, milliseconds a trial.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator import TrialEngine, TrialResult
from orchestrator.backends.fake import ExecCall, FakeBackend, FakeSandbox
from orchestrator.common.ids import trial_id_for
from orchestrator.sandbox import Healthcheck, Sandbox, SandboxSpec
from orchestrator.service.rollouts import RolloutRequest
from tests.conftest import write_task
from tests.jobs.helpers import QUICK, fake_config
from tests.service.conftest import open_app

REWARD_1 = "echo 1 > /logs/verifier/reward.txt"


class Gate:
    """Where a rollout waits: `reached` once it is there, on through it once `go` is set."""

    def __init__(self) -> None:
        self.reached, self.go = asyncio.Event(), asyncio.Event()

    async def passing(self) -> None:
        self.reached.set()
        await self.go.wait()

    async def until_reached(self) -> None:
        await asyncio.wait_for(self.reached.wait(), 10)


class HeldSandbox:
    """A fake sandbox whose copy of /logs (`download`) or removal (`destroy`) waits at a
    gate: the trial is held in its finishing steps (collect, teardown)."""

    def __init__(self, inner: FakeSandbox, collect: Gate | None, teardown: Gate | None) -> None:
        self._inner, self._collect, self._teardown = inner, collect, teardown

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def download(self, path: str, dest: Path, *, file_cap: int) -> list[str]:
        if self._collect is not None:
            await self._collect.passing()
        return await self._inner.download(path, dest, file_cap=file_cap)

    async def destroy(self) -> None:
        if self._teardown is not None:
            await self._teardown.passing()
        await self._inner.destroy()


class HeldBackend(FakeBackend):
    """The fake backend, with a gate at any step of the rollouts a test picks (`hold`); the
    verifier scores 1 once through its gate. `unready`: every sandbox fails its healthcheck,
    so the trial's start phase fails (the agent never runs)."""

    def __init__(self, *, unready: bool = False) -> None:
        super().__init__(QUICK, agent=self._agent, verifier=self._verifier)
        self.gates: dict[tuple[str, str], Gate] = {}
        self.unready = unready

    def hold(self, rollout_id: str, step: str) -> Gate:
        """Hold `rollout_id` at `step`: agent, verify, collect or teardown."""
        gate = self.gates[trial_id_for(rollout_id), step] = Gate()
        return gate

    def open_all(self) -> None:
        for gate in self.gates.values():
            gate.go.set()

    async def _at(self, sandbox: FakeSandbox, step: str) -> None:
        gate = self.gates.get((sandbox.spec.trial_id, step))
        if gate is not None:
            await gate.passing()

    async def _agent(self, sandbox: FakeSandbox, call: ExecCall) -> None:
        await self._at(sandbox, "agent")

    async def _verifier(self, sandbox: FakeSandbox, call: ExecCall) -> int:
        await self._at(sandbox, "verify")
        return await call.sh(REWARD_1)

    async def create_sandbox(self, spec: SandboxSpec) -> Sandbox:
        sandbox = await super().create_sandbox(spec)
        assert isinstance(sandbox, FakeSandbox)
        if self.unready:
            sandbox.healthcheck = Healthcheck(command="exit 1", retries=1)
        collect = self.gates.get((spec.trial_id, "collect"))
        teardown = self.gates.get((spec.trial_id, "teardown"))
        if collect is None and teardown is None:
            return sandbox
        return HeldSandbox(sandbox, collect, teardown)


def engine_on(tmp_path: Path, backend: FakeBackend, **kwargs: Any) -> TrialEngine:
    task = write_task(tmp_path / "tasks", "task")
    return TrialEngine(
        config=fake_config(tmp_path), task=task, agent="nop", backend=backend, **kwargs
    )


@asynccontextmanager
async def serving(
    tmp_path: Path, backend: HeldBackend, **kwargs: Any
) -> AsyncIterator[TrialEngine]:
    """An engine on the fake backend; its gates all open before it shuts down, so a test that
    fails leaves no rollout held (a finishing one is waited for, not cancelled)."""
    engine = engine_on(tmp_path, backend, **kwargs)
    try:
        yield engine
    finally:
        backend.open_all()
        await engine.shutdown(drain_sec=0)


def outcome_of(engine: TrialEngine, result: TrialResult) -> tuple[str, float | None]:
    """The outcome, checked to be the same in the status, the result and result.json."""
    doc = engine.status(result.rollout_id or "")
    written = TrialResult.model_validate_json((Path(result.trial_dir) / "result.json").read_text())
    assert (doc.status, doc.reward) == (result.status, result.reward)
    assert (written.status, written.reward) == (result.status, result.reward)
    return result.status, result.reward


# -- too late: the trial is finishing -------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "unready", "reads", "outcome"),
    [
        # verified, /logs being copied, not yet scored: it reads grading, as while verifying
        ("collect", False, "grading", ("success", 1.0)),
        # scored, its sandbox being removed
        ("teardown", False, "grading", ("success", 1.0)),
        # its start failed (the healthcheck): it reads running, and finishes as a failure
        ("collect", True, "running", ("failure", None)),
    ],
    ids=["verified-collecting", "scored-tearing-down", "failed-collecting"],
)
async def test_a_cancel_that_finds_the_trial_finishing_answers_finishing_and_the_outcome_stands(
    tmp_path: Path, step: str, unready: bool, reads: str, outcome: tuple[str, float | None]
) -> None:
    backend = HeldBackend(unready=unready)
    gate = backend.hold("b::1", step)
    async with serving(tmp_path, backend) as engine:
        await engine.submit(RolloutRequest(rollout_id="b::1"))
        ending = asyncio.ensure_future(engine.wait("b::1"))
        await gate.until_reached()
        assert engine.status("b::1").status == reads

        assert engine.cancel_nowait(prefix="b::") == {"b::1": "finishing"}
        assert engine.cancel_nowait(ids=["b::1"]) == {"b::1": "finishing"}  # asked again
        gate.go.set()
        result = await ending

    assert outcome_of(engine, result) == outcome


# -- in time: the cancel reaches the phase ---------------------------------------------------------


@pytest.mark.parametrize(("step", "reads"), [("agent", "running"), ("verify", "grading")])
async def test_a_cancel_in_the_agent_or_the_verifier_answers_cancelled_running_and_ends_cancelled(
    tmp_path: Path, step: str, reads: str
) -> None:
    backend = HeldBackend()
    gate = backend.hold("r-1", step)  # not opened: the cancel ends it
    async with serving(tmp_path, backend) as engine:
        await engine.submit(RolloutRequest(rollout_id="r-1"))
        ending = asyncio.ensure_future(engine.wait("r-1"))
        await gate.until_reached()
        assert engine.status("r-1").status == reads

        assert engine.cancel_nowait(ids=["r-1"]) == {"r-1": "cancelled_running"}
        # Asked again (its trial is finishing now, as a cancelled one): the same answer.
        assert engine.cancel_nowait(ids=["r-1"]) == {"r-1": "cancelled_running"}
        result = await ending

    assert outcome_of(engine, result) == ("cancelled", None)
    assert not backend.created[0].present


async def test_the_new_users_prefix_cancel_answers_what_each_rollout_then_reads(
    tmp_path: Path,
) -> None:
    """The report: `POST /rollouts/cancel {"prefix": "b::"}` over 4 rollouts answered
    `cancelled_running` for one that then read `success, reward 1.0`. One each: scored and
    tearing down, in the agent, verifying, waiting for a slot."""
    backend = HeldBackend()
    gates = {
        "b::1": backend.hold("b::1", "teardown"),
        "b::2": backend.hold("b::2", "agent"),
        "b::3": backend.hold("b::3", "verify"),
    }
    async with (
        serving(tmp_path, backend, n_concurrent=3) as engine,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(open_app(engine)), base_url="http://t"
        ) as client,
    ):
        endings = {}
        for rollout_id in ("b::1", "b::2", "b::3", "b::4"):
            answer = await client.post("/rollouts", json={"rollout_id": rollout_id})
            assert answer.status_code == 202, answer.text
            endings[rollout_id] = asyncio.ensure_future(engine.wait(rollout_id))
            if rollout_id in gates:
                await gates[rollout_id].until_reached()

        answer = await client.post("/rollouts/cancel", json={"prefix": "b::"})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {
            "dispositions": {
                "b::1": "finishing",
                "b::2": "cancelled_running",
                "b::3": "cancelled_running",
                "b::4": "cancelled_queued",
            }
        }
        gates["b::1"].go.set()
        await asyncio.wait(endings.values())
        read = {i: (await client.get(f"/rollouts/{i}")).json() for i in endings}

    assert {i: (doc["status"], doc["reward"]) for i, doc in read.items()} == {
        "b::1": ("success", 1.0),
        "b::2": ("cancelled", None),
        "b::3": ("cancelled", None),
        "b::4": ("cancelled", None),
    }


# -- the boundary: a cancel at every step across the end of verification ---------------------------


def after_hops(hops: int, then: Callable[[], None]) -> None:
    """Call `then` after `hops` turns of the event loop (0: now)."""
    if hops == 0:
        then()
    else:
        asyncio.get_running_loop().call_soon(after_hops, hops - 1, then)


async def test_a_cancel_anywhere_across_the_end_of_verification_answers_how_the_rollout_ends(
    tmp_path: Path,
) -> None:
    """The verifier scores 1, and `hops` loop turns later a cancel comes: inside verification
    for small `hops`, in the finishing steps for larger ones, after the end for the largest.
    At every one the answer and the outcome agree."""
    hops_of: dict[str, int] = {}
    answers: dict[str, str] = {}
    engine: TrialEngine | None = None

    async def verifier(sandbox: FakeSandbox, call: ExecCall) -> int:
        exit_code = await call.sh(REWARD_1)
        rollout_id = next(i for i in hops_of if trial_id_for(i) == sandbox.spec.trial_id)

        def cancel() -> None:
            assert engine is not None
            answers[rollout_id] = engine.cancel_nowait(ids=[rollout_id])[rollout_id]

        after_hops(hops_of[rollout_id], cancel)
        return exit_code

    engine = engine_on(tmp_path, FakeBackend(QUICK, verifier=verifier))
    ends = {"cancelled_running": ("cancelled", None), "finishing": ("success", 1.0),
            "not_found": ("success", 1.0)}  # fmt: skip
    hops = 0
    async with engine:
        while "not_found" not in answers.values():
            assert hops < 100_000, f"the rollout outlived {hops} loop turns: {answers}"
            rollout_id = f"hops-{hops}"
            hops_of[rollout_id] = hops
            await engine.submit(RolloutRequest(rollout_id=rollout_id))
            result = await engine.wait(rollout_id)
            while rollout_id not in answers:  # noqa: ASYNC110 (a cancel after the end)
                await asyncio.sleep(0)
            answer = answers[rollout_id]
            assert outcome_of(engine, result) == ends[answer], (hops, answer)
            hops = hops + 1 if hops < 8 else hops * 3 // 2

    assert {"cancelled_running", "finishing"} <= set(answers.values()), answers


async def test_a_rollout_cancelled_while_queued_is_on_disk_as_cancelled(tmp_path: Path) -> None:
    """It never ran, yet it is a folder with its result.json (status cancelled, a warning
    saying so), so the report, `view` and `export` list it under its id."""
    from orchestrator.report.disk import read_job
    from orchestrator.report.export import rows_of

    backend = HeldBackend()
    held = backend.hold("runs", "agent")
    async with serving(tmp_path, backend, n_concurrent=1) as engine:
        await engine.submit(RolloutRequest(rollout_id="runs"))
        await held.until_reached()
        await engine.submit(RolloutRequest(rollout_id="waits"))
        assert await engine.cancel(ids=["waits"]) == {"waits": "cancelled_queued"}
        status = engine.status("waits")
        held.go.set()
        await engine.wait("runs")
        job = read_job(tmp_path / "jobs" / engine.job_id)

    assert status.status == "cancelled" and status.trial_dir is not None
    on_disk = TrialResult.model_validate_json((Path(status.trial_dir) / "result.json").read_text())
    assert (on_disk.rollout_id, on_disk.status) == ("waits", "cancelled")
    assert on_disk.warnings == ["cancelled while queued: its trial never started"]
    assert {(r.rollout_id, r.status) for r in job.last_results} == {
        ("runs", "success"),
        ("waits", "cancelled"),
    }
    assert {row.rollout_id for row in rows_of(job)} == {"runs", "waits"}
