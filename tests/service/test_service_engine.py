"""The TrialEngine behind the service: limits, shutdown, the abort hook, callbacks.

Everything runs against the real Docker engine. Long rollouts are `command:sleep 60` (always
cancelled), quick ones `nop` / `oracle` on the example task, whose image is cached.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from docker.models.containers import ContainerCollection

from orchestrator import TrialConfig
from orchestrator.service.abort import abort
from orchestrator.service.engine import TrialEngine
from orchestrator.service.rollouts import EngineClosed, RolloutRequest, RolloutStatus
from tests.conftest import remove_trial_container
from tests.service.conftest import (
    HELD,
    LONG,
    TERMINAL,
    MakeEngine,
    open_app,
    open_gate,
    our_container_names,
    until_sandbox_up,
)

# The drain of the shutdown test: the held rollout is let go as the shutdown begins and has
# this long to be verified and written (about a second on an idle machine).
DRAIN_SEC = 8.0


async def until_status(
    engine: TrialEngine, rollout_id: str, wanted: set[str], within: float = 30.0
) -> RolloutStatus:
    """Poll until the status is one of `wanted`; a terminal one counts once it is settled."""
    deadline = time.monotonic() + within
    while True:
        doc = engine.status(rollout_id)
        settled = doc.status not in TERMINAL or doc.finished_at is not None
        if doc.status in wanted and settled:
            return doc
        if time.monotonic() > deadline:
            raise AssertionError(f"{rollout_id} is still {doc.status!r}; wanted {wanted}")
        await asyncio.sleep(0.05)


async def until(condition: Callable[[], bool], what: str, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


# -- limits ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{"max_queue_depth": 0}, {"max_queue_depth": -1}, {"n_concurrent": 0}],
    ids=["depth-0", "depth-negative", "no-slots"],
)
def test_engine_refuses_limits_that_could_never_admit_work(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        TrialEngine(**kwargs)


def test_engine_accepts_a_queue_depth_of_one_or_no_bound() -> None:
    assert TrialEngine(max_queue_depth=1).max_queue_depth == 1
    assert TrialEngine(max_queue_depth=None).max_queue_depth is None


# -- shutdown --------------------------------------------------------------------------------


async def test_shutdown_drains_quick_rollouts_then_aborts_the_rest(
    make_engine: MakeEngine, config: TrialConfig, docker_client: docker.DockerClient
) -> None:
    engine = make_engine(n_concurrent=2)
    app = open_app(engine, drain_sec=DRAIN_SEC)
    transport = httpx.ASGITransport(app=app)

    async def let_the_quick_one_end_once_shutdown_began() -> None:
        await until(lambda: engine.closed, "the shutdown to begin", within=120)
        await open_gate(docker_client, "quick-1")

    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        async with app.router.lifespan_context(app):
            for rollout_id, agent in (("quick-1", HELD), ("long-1", LONG)):
                body = {"rollout_id": rollout_id, "agent": agent}
                assert (await client.post("/rollouts", json=body)).status_code == 202
            await until_sandbox_up(docker_client, engine, "quick-1")
            await until_sandbox_up(docker_client, engine, "long-1")
            # Held at its gate, the quick one can only end during the drain.
            assert engine.status("quick-1").status == "running"
            releaser = asyncio.ensure_future(let_the_quick_one_end_once_shutdown_began())
        # Leaving the lifespan shut the engine down: drained, then aborted.
        await releaser
        quick = engine.status("quick-1")
        long = engine.status("long-1")
        assert (quick.status, quick.reward) == ("success", 0.0)
        assert long.status == "cancelled"
        assert long.trial_dir is not None
        written = json.loads(Path(long.trial_dir, "result.json").read_text())
        assert written["status"] == "cancelled"
        assert written["agent"]["termination"] == "aborted"
        assert engine.closed and engine.live_count == 0

        refused = await client.post("/rollouts", json={"rollout_id": "too-late"})
        assert refused.status_code == 503, refused.text
    with pytest.raises(EngineClosed):
        await engine.submit(RolloutRequest(rollout_id="too-late"))
    assert our_container_names(docker_client, config) == []


# -- the abort hook --------------------------------------------------------------------------


async def test_abort_of_one_scope_leaves_the_other_scope_running(
    make_engine: MakeEngine, config: TrialConfig, docker_client: docker.DockerClient
) -> None:
    engine = make_engine(n_concurrent=3, agent=LONG)
    for rollout_id in ("scope-a::1", "scope-a::2", "scope-b::1"):
        await engine.submit(RolloutRequest(rollout_id=rollout_id))
    for rollout_id in ("scope-a::1", "scope-a::2", "scope-b::1"):
        await until_sandbox_up(docker_client, engine, rollout_id)

    # A trainer calls the hook from its own thread.
    dispositions = await asyncio.to_thread(abort, "scope-a::")
    assert dispositions == {"scope-a::1": "cancelled_running", "scope-a::2": "cancelled_running"}
    for rollout_id in ("scope-a::1", "scope-a::2"):
        assert (await until_status(engine, rollout_id, TERMINAL)).status == "cancelled"
    assert engine.status("scope-b::1").status == "running"
    assert engine.live_count == 1

    assert await engine.cancel(ids=["scope-b::1"]) == {"scope-b::1": "cancelled_running"}
    assert engine.status("scope-b::1").status == "cancelled"  # cancel waited for the teardown
    assert our_container_names(docker_client, config) == []


async def test_abort_by_session_id_stops_only_that_session(
    make_engine: MakeEngine, config: TrialConfig, docker_client: docker.DockerClient
) -> None:
    engine = make_engine(n_concurrent=2, agent=LONG)
    await engine.submit(RolloutRequest(rollout_id="step7-x", session_id="sess-1"))
    await engine.submit(RolloutRequest(rollout_id="step7-y", session_id="sess-2"))
    await until_sandbox_up(docker_client, engine, "step7-x")
    await until_sandbox_up(docker_client, engine, "step7-y")

    assert abort("no-such-scope") == {}
    # Called on the engine's own loop thread, the hook cancels in place.
    assert abort("sess-1") == {"step7-x": "cancelled_running"}
    assert (await until_status(engine, "step7-x", TERMINAL)).status == "cancelled"
    assert engine.status("step7-y").status == "running"

    assert await engine.cancel(session_id="sess-2") == {"step7-y": "cancelled_running"}
    assert engine.status("step7-y").status == "cancelled"
    assert our_container_names(docker_client, config) == []


def test_abort_needs_a_scope() -> None:
    with pytest.raises(ValueError):
        abort("")


# -- callbacks -------------------------------------------------------------------------------


class Receiver:
    """A tiny callback endpoint: records (path, body); answers 500 once for `fail_once`."""

    def __init__(self) -> None:
        self.received: list[tuple[str, bytes]] = []
        self.fail_once: set[str] = set()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    receiver.received.append((self.path, body))
                    failing = self.path in receiver.fail_once
                    receiver.fail_once.discard(self.path)
                self.send_response(500 if failing else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def paths(self) -> list[str]:
        with self.lock:
            return [path for path, _ in self.received]

    def bodies(self, path: str) -> list[bytes]:
        with self.lock:
            return [body for p, body in self.received if p == path]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    endpoint = Receiver()
    endpoint.thread.start()
    yield endpoint
    endpoint.server.shutdown()
    endpoint.server.server_close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_a_failing_callback_endpoint_does_not_lose_the_result(
    make_engine: MakeEngine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="orchestrator.service.callbacks")
    dead = f"http://127.0.0.1:{closed_port()}"
    engine = make_engine(agent="oracle")
    await engine.submit(
        RolloutRequest(
            rollout_id="cb-dead",
            workflow_complete_url=f"{dead}/workflow",
            grader_complete_url=f"{dead}/grader",
        )
    )
    result = await engine.wait("cb-dead")
    assert (result.status, result.reward) == ("success", 1.0)
    status = await until_status(engine, "cb-dead", TERMINAL)
    assert (status.status, status.reward, status.error) == ("success", 1.0, None)

    # The delivery is retried a bounded number of times, then given up with a log line.
    def gave_up() -> bool:
        return any(
            "grader_complete for cb-dead" in r.getMessage() and "attempt 3 of 3" in r.getMessage()
            for r in caplog.records
        )

    await until(gave_up, "the third failed grader_complete delivery")
    assert engine.status("cb-dead").status == "success"


async def test_a_working_callback_endpoint_hears_both_events_and_a_redelivery_is_identical(
    make_engine: MakeEngine, receiver: Receiver
) -> None:
    receiver.fail_once.add("/grader")  # the first grader_complete delivery gets a 500
    engine = make_engine(agent="oracle")
    await engine.submit(
        RolloutRequest(
            rollout_id="cb-live",
            workflow_complete_url=receiver.url("/workflow"),
            grader_complete_url=receiver.url("/grader"),
        )
    )
    assert (await engine.wait("cb-live")).reward == 1.0
    await until(lambda: len(receiver.bodies("/grader")) >= 2, "the grader_complete redelivery")

    assert receiver.paths() == ["/workflow", "/grader", "/grader"]
    (workflow_body,) = receiver.bodies("/workflow")
    first, again = receiver.bodies("/grader")
    workflow = json.loads(workflow_body)
    assert workflow["event"] == "workflow_complete"
    assert (workflow["rollout_id"], workflow["status"], workflow["reward"]) == (
        "cb-live",
        "grading",
        None,
    )
    grader = json.loads(first)
    assert grader["event"] == "grader_complete"
    assert (grader["rollout_id"], grader["status"]) == ("cb-live", "success")
    assert (grader["reward"], grader["rewards"], grader["error"]) == (1.0, {"reward": 1.0}, None)
    assert again == first  # the very same bytes...
    assert json.loads(again)["delivery_id"] == grader["delivery_id"]  # ...so it can be deduped
    assert grader["delivery_id"] != workflow["delivery_id"]


async def test_shutdown_delivers_the_callbacks_of_rollouts_that_ended_in_the_drain(
    make_engine: MakeEngine, receiver: Receiver
) -> None:
    engine = make_engine()
    await engine.submit(
        RolloutRequest(rollout_id="cb-drain", grader_complete_url=receiver.url("/grader"))
    )
    await engine.shutdown(drain_sec=30)
    assert engine.status("cb-drain").status == "success"
    assert receiver.paths() == ["/grader"]


# -- bugs found in the status and cancel paths ----------------------------------------------


async def test_a_terminal_status_always_carries_its_outcome(make_engine: MakeEngine) -> None:
    engine = make_engine(agent="oracle")
    await engine.submit(RolloutRequest(rollout_id="race-1"))
    premature: list[RolloutStatus] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        doc = engine.status("race-1")
        if doc.status in TERMINAL:
            if doc.finished_at is not None:
                break
            premature.append(doc)
        await asyncio.sleep(0)  # look at every step of the loop
    assert engine.status("race-1").reward == 1.0
    assert premature == []


async def test_a_rollout_cancelled_before_its_runner_started_is_settled(
    make_engine: MakeEngine,
) -> None:
    engine = make_engine()
    await engine.submit(RolloutRequest(rollout_id="early-1"))
    assert engine.cancel_nowait(ids=["early-1"]) == {"early-1": "cancelled_queued"}
    assert (await until_status(engine, "early-1", TERMINAL)).status == "cancelled"
    assert engine.live_count == 0


async def test_a_cancel_while_the_container_is_being_created_leaves_no_container(
    make_engine: MakeEngine,
    config: TrialConfig,
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
    container_watch: Any,
) -> None:
    # The real engine creates the container; the call is held until the cancel is in, so the
    # cancel lands while the create is under way.
    creating, let_create_go = threading.Event(), threading.Event()
    original = ContainerCollection.create

    def held_create(self: ContainerCollection, *args: Any, **kwargs: Any) -> Any:
        creating.set()
        let_create_go.wait(60)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ContainerCollection, "create", held_create)
    engine = make_engine(agent=LONG, job_id=container_watch.job_id)
    await engine.submit(RolloutRequest(rollout_id="mid-create"))
    try:
        await until(creating.is_set, "the container create call", within=60)
        assert engine.cancel_nowait(ids=["mid-create"]) == {"mid-create": "cancelled_running"}
    finally:
        let_create_go.set()
    assert (await until_status(engine, "mid-create", TERMINAL)).status == "cancelled"
    assert len(container_watch.created()) == 1  # the window was hit: a container was made
    leaked = our_container_names(docker_client, config)
    for name in leaked:  # removed here, so the autouse leak check reports only this test
        remove_trial_container(docker_client.containers.get(name))
    assert leaked == []
