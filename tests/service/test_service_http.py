"""The rollout service over HTTP: admission (202 / 429), status, cancel, validation, auth.

Each test drives `create_app` in its own event loop through httpx's ASGI transport and talks
to the real Docker engine. Long rollouts are `command:sleep 60` (always cancelled), quick
ones `nop` on the example task, whose image is cached.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from orchestrator import TrialConfig
from orchestrator.service.server import create_app
from tests.service.conftest import (
    GATE,
    HELD,
    HELLO,
    LONG,
    TERMINAL,
    MakeEngine,
    RetentionClock,
    held_test_sh,
    open_app,
    open_gate,
    our_container_names,
    until_sandbox_up,
)

RETENTION_SEC = 600.0  # stepped over with the retention clock, never waited for


def client_for(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


async def submit(client: httpx.AsyncClient, rollout_id: str, **fields: Any) -> httpx.Response:
    return await client.post("/rollouts", json={"rollout_id": rollout_id, **fields})


async def accepted(client: httpx.AsyncClient, rollout_id: str, **fields: Any) -> None:
    response = await submit(client, rollout_id, **fields)
    assert response.status_code == 202, response.text
    assert response.json() == {"rollout_id": rollout_id, "status": "queued"}


async def status_of(client: httpx.AsyncClient, rollout_id: str) -> dict[str, Any]:
    response = await client.get(f"/rollouts/{rollout_id}")
    assert response.status_code == 200, response.text
    return response.json()


async def until_status(
    client: httpx.AsyncClient,
    rollout_id: str,
    wanted: set[str],
    within: float = 30.0,
    seen: list[str] | None = None,
) -> dict[str, Any]:
    """Poll the status document until its status is one of `wanted` (bounded); each new
    status read on the way is appended to `seen`.

    A terminal status counts once it is settled (has finished_at): a live document says
    `grading` until the result is written, and only then the outcome.
    """
    deadline = time.monotonic() + within
    while True:
        doc = await status_of(client, rollout_id)
        if seen is not None and (not seen or seen[-1] != doc["status"]):
            seen.append(doc["status"])
        settled = doc["status"] not in TERMINAL or doc["finished_at"] is not None
        if doc["status"] in wanted and settled:
            return doc
        if time.monotonic() > deadline:
            raise AssertionError(f"{rollout_id} is still {doc['status']!r}; wanted {wanted}")
        await asyncio.sleep(0.05)


async def cancel(client: httpx.AsyncClient, body: dict[str, Any], **headers: str) -> dict[str, str]:
    response = await client.post("/rollouts/cancel", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["dispositions"]


# -- admission -------------------------------------------------------------------------------


async def test_full_queue_answers_429_with_retry_after_and_accepts_once_a_slot_frees(
    make_engine: MakeEngine, config: TrialConfig, docker_client: docker.DockerClient
) -> None:
    engine = make_engine(n_concurrent=1, max_queue_depth=1)
    async with client_for(open_app(engine)) as client:
        await accepted(client, "adm-a", agent=LONG)
        await until_status(client, "adm-a", {"running"})
        await until_sandbox_up(docker_client, engine, "adm-a")
        await accepted(client, "adm-b", agent=LONG)  # waits: the queue is now at its depth

        full = await submit(client, "adm-c")
        assert full.status_code == 429, full.text
        retry_after = int(full.headers["Retry-After"])
        assert 1 <= retry_after <= 300
        assert full.json()["retry_after"] == retry_after
        assert (await status_of(client, "adm-c"))["status"] == "unknown"  # not admitted
        health = (await client.get("/healthz")).json()
        assert (health["live"], health["waiting"], health["max_queue_depth"]) == (2, 1, 1)

        assert await cancel(client, {"ids": ["adm-a"]}) == {"adm-a": "cancelled_running"}
        assert (await until_status(client, "adm-a", TERMINAL))["status"] == "cancelled"
        await until_status(client, "adm-b", {"running"})
        await until_sandbox_up(docker_client, engine, "adm-b")

        await accepted(client, "adm-c")  # a slot freed: the same request is accepted now
        assert await cancel(client, {"all": True}) == {
            "adm-b": "cancelled_running",
            "adm-c": "cancelled_queued",
        }
        for rollout_id in ("adm-b", "adm-c"):
            assert (await until_status(client, rollout_id, TERMINAL))["status"] == "cancelled"
    assert our_container_names(docker_client, config) == []


async def test_submit_answers_409_for_an_id_in_flight_and_422_for_a_bad_request(
    make_engine: MakeEngine, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    engine = make_engine()
    async with client_for(open_app(engine)) as client:
        await accepted(client, "dup-1", agent=LONG)
        await until_sandbox_up(docker_client, engine, "dup-1")
        duplicate = await submit(client, "dup-1")
        assert duplicate.status_code == 409, duplicate.text
        assert (await submit(client, "bad-task", task=str(tmp_path / "nowhere"))).status_code == 422
        assert (await submit(client, "bad-agent", agent="telepathy")).status_code == 422
        assert (await submit(client, "both", task=str(HELLO), task_id="x")).status_code == 422
        assert (await submit(client, "extra", colour="blue")).status_code == 422
        assert await cancel(client, {"ids": ["dup-1"]}) == {"dup-1": "cancelled_running"}
        await until_status(client, "dup-1", TERMINAL)


# -- status ----------------------------------------------------------------------------------


async def test_status_goes_queued_running_grading_success_then_unknown_after_retention(
    make_engine: MakeEngine,
    make_task: Callable[..., Path],
    docker_client: docker.DockerClient,
    retention_clock: RetentionClock,
) -> None:
    # Each step is held until the test has seen it: the agent waits at GATE, the verifier at
    # a gate of its own, and the retention window ends when the clock is stepped past it.
    verifier_gate = "/tmp/trialbox-test-verify"
    held_verifier = make_task("held-verifier", test_sh=held_test_sh(verifier_gate))
    engine = make_engine(n_concurrent=1, retention_sec=RETENTION_SEC)
    async with client_for(open_app(engine)) as client:
        await accepted(client, "life-blocker", agent=LONG)
        await until_status(client, "life-blocker", {"running"})
        await until_sandbox_up(docker_client, engine, "life-blocker")
        await accepted(client, "life-1", task=str(held_verifier), agent=HELD)
        seen: list[str] = []
        await until_status(client, "life-1", {"queued"}, seen=seen)
        assert await cancel(client, {"ids": ["life-blocker"]}) == {
            "life-blocker": "cancelled_running"
        }

        await until_status(client, "life-1", {"running"}, seen=seen)
        await until_sandbox_up(docker_client, engine, "life-1")
        await open_gate(docker_client, "life-1", GATE)  # the agent ends
        await until_status(client, "life-1", {"grading"}, seen=seen)
        await open_gate(docker_client, "life-1", verifier_gate)  # the verifier scores
        doc = await until_status(client, "life-1", TERMINAL, seen=seen)
        assert seen == ["queued", "running", "grading", "success"]
        assert doc["reward"] == 1.0 and doc["rewards"] == {"reward": 1.0}
        assert doc["error"] is None and doc["finished_at"] is not None
        assert Path(doc["trial_dir"], "result.json").is_file()
        assert (await status_of(client, "life-blocker"))["status"] == "cancelled"

        retention_clock.offset = RETENTION_SEC / 2  # well inside the window: still kept
        assert await status_of(client, "life-1") == doc
        retention_clock.offset = RETENTION_SEC + 1  # past it: both are forgotten
        assert (await status_of(client, "life-1"))["status"] == "unknown"
        assert (await status_of(client, "life-blocker"))["status"] == "unknown"


async def test_a_rollout_without_a_reward_ends_failure_with_its_error_then_expires(
    make_engine: MakeEngine, make_task: Callable[..., Path], retention_clock: RetentionClock
) -> None:
    no_reward = make_task("no-reward", test_sh="#!/bin/sh\necho 'forgot the reward'\n")
    engine = make_engine(retention_sec=RETENTION_SEC)
    async with client_for(open_app(engine)) as client:
        await accepted(client, "fail-1", task=str(no_reward))
        doc = await until_status(client, "fail-1", TERMINAL)
        assert doc["status"] == "failure"
        assert doc["reward"] is None and doc["rewards"] == {}
        assert doc["error"] and doc["error_category"] == "validation"
        retention_clock.offset = RETENTION_SEC + 1
        assert (await status_of(client, "fail-1"))["status"] == "unknown"


async def test_an_unknown_id_is_unknown(make_engine: MakeEngine) -> None:
    async with client_for(open_app(make_engine())) as client:
        assert await status_of(client, "never-submitted") == {
            "rollout_id": "never-submitted",
            "status": "unknown",
            "reward": None,
            "rewards": {},
            "error": None,
            "error_category": None,
            "trial_dir": None,
            "finished_at": None,
            "usage": None,
            "model_limit": None,
            "attempt": 1,
            "retried": [],
        }


# -- cancel ----------------------------------------------------------------------------------


async def test_cancel_by_prefix_ids_and_all_gives_the_right_dispositions_and_leaves_nothing(
    make_engine: MakeEngine, config: TrialConfig, docker_client: docker.DockerClient
) -> None:
    engine = make_engine(n_concurrent=1)
    async with client_for(open_app(engine)) as client:
        for rollout_id in ("tenant-a::r1", "tenant-a::r2", "tenant-b::r1"):
            await accepted(client, rollout_id, agent=LONG)
        await until_status(client, "tenant-a::r1", {"running"})
        await until_sandbox_up(docker_client, engine, "tenant-a::r1")

        assert await cancel(client, {"prefix": "tenant-a::"}) == {
            "tenant-a::r1": "cancelled_running",
            "tenant-a::r2": "cancelled_queued",
        }
        await until_status(client, "tenant-b::r1", {"running"})  # the freed slot is used
        await until_sandbox_up(docker_client, engine, "tenant-b::r1")
        for rollout_id in ("tenant-a::r1", "tenant-a::r2"):
            assert (await until_status(client, rollout_id, TERMINAL))["status"] == "cancelled"

        assert await cancel(client, {"ids": ["tenant-b::r1", "ghost", "tenant-a::r1"]}) == {
            "tenant-b::r1": "cancelled_running",
            "ghost": "not_found",
            "tenant-a::r1": "not_found",  # already over
        }
        assert (await until_status(client, "tenant-b::r1", TERMINAL))["status"] == "cancelled"
        assert await cancel(client, {"prefix": "tenant-"}) == {}

        await accepted(client, "all-1", agent=LONG)
        await accepted(client, "all-2", agent=LONG)
        await until_status(client, "all-1", {"running"})
        await until_sandbox_up(docker_client, engine, "all-1")
        assert await cancel(client, {"all": True}) == {
            "all-1": "cancelled_running",
            "all-2": "cancelled_queued",
        }
        for rollout_id in ("all-1", "all-2"):
            assert (await until_status(client, rollout_id, TERMINAL))["status"] == "cancelled"
        assert (await client.get("/healthz")).json()["live"] == 0
    assert our_container_names(docker_client, config) == []


async def test_cancelling_a_finished_rollout_is_not_found_and_keeps_its_outcome(
    make_engine: MakeEngine,
) -> None:
    engine = make_engine()
    async with client_for(open_app(engine)) as client:
        await accepted(client, "done-1")
        done = await until_status(client, "done-1", TERMINAL)
        assert done["status"] == "success"
        assert await cancel(client, {"ids": ["done-1"]}) == {"done-1": "not_found"}
        assert await cancel(client, {"ids": ["done-1"]}) == {"done-1": "not_found"}  # repeatable
        assert await cancel(client, {"prefix": "done-"}) == {}
        assert await cancel(client, {"all": True}) == {}
        assert await status_of(client, "done-1") == done


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"all": False},
        {"ids": ["x"], "prefix": "x"},
        {"prefix": "x", "all": True},
        {"ids": [], "all": True},
        {"ids": ["x"], "prefix": "x", "all": True},
        {"prefix": ""},
        {"session_id": "s", "prefix": "x"},
        {"colour": "blue"},
    ],
    ids=["none", "all-false", "ids+prefix", "prefix+all", "ids+all", "three", "empty-prefix",
         "session+prefix", "unknown-field"],
)  # fmt: skip
async def test_cancel_needs_exactly_one_selector(
    make_engine: MakeEngine, body: dict[str, Any]
) -> None:
    async with client_for(open_app(make_engine())) as client:
        response = await client.post("/rollouts/cancel", json=body)
        assert response.status_code == 422, response.text


async def test_cancel_with_an_empty_id_list_is_a_valid_no_op(make_engine: MakeEngine) -> None:
    async with client_for(open_app(make_engine())) as client:
        assert await cancel(client, {"ids": []}) == {}


# -- rollout id validation -------------------------------------------------------------------

BAD_IDS = ["a/b", "a b", " lead", "x" * 129, "", "-dash-first", "tab\there", "new\nline"]


@pytest.mark.parametrize("bad_id", BAD_IDS)
async def test_submit_refuses_a_malformed_rollout_id(make_engine: MakeEngine, bad_id: str) -> None:
    engine = make_engine()
    async with client_for(open_app(engine)) as client:
        response = await submit(client, bad_id)
        assert response.status_code == 422, response.text
        assert engine.live_count == 0


@pytest.mark.parametrize("bad_id", BAD_IDS)
async def test_cancel_refuses_malformed_ids(make_engine: MakeEngine, bad_id: str) -> None:
    async with client_for(open_app(make_engine())) as client:
        response = await client.post("/rollouts/cancel", json={"ids": ["ok-id", bad_id]})
        assert response.status_code == 422, response.text


async def test_cancel_refuses_an_id_with_a_trailing_newline(make_engine: MakeEngine) -> None:
    async with client_for(open_app(make_engine())) as client:
        response = await client.post("/rollouts/cancel", json={"ids": ["abc\n"]})
        assert response.status_code == 422, response.text


async def test_status_refuses_malformed_ids_and_accepts_the_longest_valid_one(
    make_engine: MakeEngine,
) -> None:
    async with client_for(open_app(make_engine())) as client:
        assert (await client.get("/rollouts/" + "x" * 129)).status_code == 422
        assert (await client.get("/rollouts/a%20b")).status_code == 422
        assert (await client.get("/rollouts/-x")).status_code == 422
        assert (await client.get("/rollouts/a/b")).status_code in (404, 422)  # never a status
        longest = "x" * 128
        assert (await status_of(client, longest))["status"] == "unknown"
        assert (await status_of(client, "t-a::r.1@x_y"))["status"] == "unknown"


async def test_the_longest_valid_id_with_every_allowed_character_runs(
    make_engine: MakeEngine,
) -> None:
    rollout_id = "T0-a::b.c@d_e" + "z" * (128 - 13)
    assert len(rollout_id) == 128
    async with client_for(open_app(make_engine())) as client:
        await accepted(client, rollout_id)
        assert (await until_status(client, rollout_id, TERMINAL))["status"] == "success"


# -- admin token -----------------------------------------------------------------------------


async def test_admin_token_guards_cancel_all(
    make_engine: MakeEngine, docker_client: docker.DockerClient
) -> None:
    engine = make_engine()
    app = open_app(engine, admin_token="  s3cret-token \n")
    async with client_for(app) as client:
        await accepted(client, "guarded-1", agent=LONG)
        await until_status(client, "guarded-1", {"running"})
        await until_sandbox_up(docker_client, engine, "guarded-1")

        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": "Bearer s3cret-tokenX"},
            {"Authorization": "Basic s3cret-token"},
            {"Authorization": "s3cret-token"},
            {"Authorization": "Bearer   "},
        ):
            refused = await client.post("/rollouts/cancel", json={"all": True}, headers=headers)
            assert refused.status_code == 401, (headers, refused.text)
        assert (await status_of(client, "guarded-1"))["status"] == "running"  # untouched

        # With a token configured, selecting by ids or prefix needs one too.
        for body in ({"ids": ["other"]}, {"prefix": "other-"}):
            refused = await client.post("/rollouts/cancel", json=body)
            assert refused.status_code == 401, (body, refused.text)

        assert await cancel(client, {"all": True}, Authorization="Bearer s3cret-token") == {
            "guarded-1": "cancelled_running"
        }
        assert (await until_status(client, "guarded-1", TERMINAL))["status"] == "cancelled"
        # The scheme is case-insensitive and the given token is stripped too.
        assert await cancel(client, {"all": True}, Authorization="bearer  s3cret-token ") == {}


async def test_without_an_admin_token_cancel_all_is_open(make_engine: MakeEngine) -> None:
    async with client_for(open_app(make_engine(), admin_token="   ")) as client:
        assert await cancel(client, {"all": True}) == {}


async def test_a_default_server_offers_only_its_agent_and_its_tasks(make_engine) -> None:
    """Requests cannot make the server read host paths: no task paths, no other agents."""

    async with client_for(create_app(make_engine())) as client:
        by_path = await submit(client, "by-path", task=str(HELLO))
        assert by_path.status_code == 422
        assert "task paths" in by_path.text
        other = await submit(client, "other-agent", agent="workflow:/etc/passwd:X")
        assert other.status_code == 422
        assert "not offered" in other.text
        await accepted(client, "default-agent")
        await until_status(client, "default-agent", {"success"})
