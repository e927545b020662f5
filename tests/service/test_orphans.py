"""The orphan timer (`orphan_timeout_sec`, `serve --orphan-timeout`): a live rollout whose id
nobody submitted, polled or long-polled for the timeout is cancelled, its status saying why;
a polled one lives on, a long poll or wait in progress holds it, and without a timeout
nothing is ever cancelled. The timer's logic on a stepped clock; the engine and the HTTP
routes on the fake backend, each rollout held in its agent by a gate."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator import TrialEngine, TrialResult
from orchestrator.common.ids import trial_id_for
from orchestrator.service.orphans import OrphanWatch, orphan_reason
from orchestrator.service.rollouts import RolloutRequest, RolloutStatus
from tests.service.conftest import RetentionClock, open_app
from tests.service.test_cancel_dispositions import HeldBackend, engine_on

TIMEOUT = 120.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_the_timer_expires_what_nobody_asked_about_once_and_only_that() -> None:
    clock, cancelled = Clock(), []
    watch = OrphanWatch(TIMEOUT, clock, lambda rid, why: cancelled.append((rid, why)))
    try:
        for rollout_id in ("idle", "polled", "held"):
            watch.track(rollout_id)
        clock.now = 100.0
        watch.touch("polled")
        with watch.held("held"):
            clock.now = 119.9
            assert watch.sweep() == []
            clock.now = 120.0
            assert watch.sweep() == ["idle"]
            clock.now = 10_000.0
            assert watch.expired() == ["polled"]  # "held" is watched throughout
        assert watch.expired() == ["polled"]  # the poll's end touched "held"
        clock.now += TIMEOUT
        assert sorted(watch.sweep()) == ["held", "polled"]
        clock.now += 10 * TIMEOUT
        assert watch.sweep() == []  # each judged once
        assert [rid for rid, _ in cancelled] == ["idle", "polled", "held"]
        assert {why for _, why in cancelled} == {orphan_reason(TIMEOUT)}

        done = RolloutStatus(rollout_id="idle", status="cancelled")
        assert watch.settled("idle", done).error == orphan_reason(TIMEOUT)
        scored = RolloutStatus(rollout_id="polled", status="success", reward=1.0)
        assert watch.settled("polled", scored) == scored  # it was finishing: its own outcome
        watch.touch("idle")  # forgotten once settled
        assert watch.expired() == []
    finally:
        await watch.aclose()


async def test_without_a_timeout_nothing_expires() -> None:
    clock = Clock()
    watch = OrphanWatch(None, clock, lambda rid, why: pytest.fail("expired"))
    watch.track("r")
    clock.now = 1e12
    assert watch.sweep() == []


@pytest.mark.parametrize("timeout", [0.0, -1.0])
def test_a_timeout_must_be_positive(timeout: float) -> None:
    with pytest.raises(ValueError, match="orphan_timeout_sec must be more than 0"):
        OrphanWatch(timeout, time.monotonic, lambda rid, why: None)


async def until_live(engine: TrialEngine, count: int) -> None:
    """Until `count` rollouts are live (read without asking about any id)."""
    deadline = time.monotonic() + 10
    while engine.live_count != count:
        assert time.monotonic() < deadline, f"{engine.live_count} live, expected {count}"
        await asyncio.sleep(0.01)


def written(status: RolloutStatus) -> TrialResult:
    assert status.trial_dir is not None
    return TrialResult.model_validate_json((Path(status.trial_dir) / "result.json").read_text())


async def test_the_engine_cancels_the_unwatched_through_the_abort_and_keeps_the_watched(
    tmp_path: Path,
) -> None:
    backend = HeldBackend()
    gates = {rid: backend.hold(rid, "agent") for rid in ("idle", "polled", "long-polled")}
    clock = RetentionClock()
    engine = engine_on(tmp_path, backend, orphan_timeout_sec=TIMEOUT, clock=clock)
    try:
        for rollout_id in gates:
            await engine.submit(RolloutRequest(rollout_id=rollout_id))
        for gate in gates.values():
            await gate.until_reached()  # each agent runs in its sandbox
        clock.offset += 100
        assert engine.status("polled").status == "running"
        long_poll = asyncio.create_task(engine.watch("long-polled", 25))
        await asyncio.sleep(0)  # the long poll is parked
        clock.offset += 30

        await until_live(engine, 2)

        idle = engine.status("idle")
        assert (idle.status, idle.error) == ("cancelled", orphan_reason(TIMEOUT))
        assert orphan_reason(TIMEOUT) in written(idle).warnings
        assert written(idle).agent.termination == "aborted"
        left = {item.trial for item in await backend.find_leftovers()}
        assert trial_id_for("idle") not in left  # its sandbox went with the abort
        assert {engine.status(r).status for r in ("polled", "long-polled")} == {"running"}
        assert not long_poll.done()

        clock.offset += 1000  # "polled" was last asked about 1000 s ago; the long poll holds

        await until_live(engine, 1)
        assert engine.status("polled").error == orphan_reason(TIMEOUT)
        assert not long_poll.done()
        assert engine.status("long-polled").status == "running"
    finally:
        backend.open_all()
        await engine.shutdown(drain_sec=0)


async def test_over_http_a_rollout_nobody_asks_about_is_cancelled_saying_why(
    tmp_path: Path,
) -> None:
    backend = HeldBackend()
    backend.hold("forgotten", "agent")
    backend.hold("watched", "agent")
    engine = engine_on(tmp_path, backend, orphan_timeout_sec=0.5)
    app = open_app(engine)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:

            async def long_polls() -> Any:
                """Long polls on "watched", one after another, until it settles."""
                while True:
                    doc = (await client.get("/rollouts/watched", params={"wait": 2})).json()
                    if doc["finished_at"] is not None:
                        return doc

            for rollout_id in ("forgotten", "watched"):
                answer = await client.post("/rollouts", json={"rollout_id": rollout_id})
                assert answer.status_code == 202, answer.text
            watching = asyncio.create_task(long_polls())
            deadline = time.monotonic() + 30
            while (await client.get("/healthz")).json()["live"] != 1:
                assert time.monotonic() < deadline, "the forgotten rollout was not cancelled"
                await asyncio.sleep(0.05)

            doc = (await client.get("/rollouts/forgotten")).json()
            assert doc["status"] == "cancelled"
            assert "orphaned: nobody submitted, polled or long-polled it for 0.5 s" in doc["error"]
            assert not watching.done()
            assert (await client.get("/rollouts/watched")).json()["status"] == "running"
            cancel = await client.post("/rollouts/cancel", json={"ids": ["watched"]})
            assert cancel.json()["dispositions"] == {"watched": "cancelled_running"}
            last = await asyncio.wait_for(watching, 30)
            assert (last["status"], last["error"]) == ("cancelled", None)  # the caller's cancel
    finally:
        backend.open_all()
        await engine.shutdown(drain_sec=0)


def test_serve_refuses_an_orphan_timeout_that_is_not_positive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli import main

    task = tmp_path / "task"  # refused before the task is read
    assert main(["serve", "--task", str(task), "--orphan-timeout", "0"]) == 1
    said = capsys.readouterr()
    assert "--orphan-timeout must be more than 0 seconds" in said.out + said.err
