"""Plain status reads answered ahead of the routing (service/fast_status.py): which requests
are taken, and that the answer is the route's own, status, headers and bytes, for each kind of
status document and both spellings of the route. On the fake backend, through httpx's ASGI
transport; the route's answer is asked for with `?wait=0` (no long poll, never taken)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.gateway.record import Usage
from orchestrator.service import fast_status
from orchestrator.service.engine import TrialEngine
from orchestrator.service.fast_status import plain_status_read
from orchestrator.service.rollouts import RetriedAttempt, RolloutStatus
from orchestrator.service.server import create_app
from tests.conftest import write_task
from tests.jobs.helpers import fake_config


def scope(path: str, method: str = "GET", query: bytes = b"", **extra: Any) -> dict[str, Any]:
    return {
        "type": "http", "method": method, "path": path, "query_string": query,
        "root_path": "", "headers": [(b"host", b"t")], **extra,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("request_scope", "taken"),
    [
        (scope("/rollouts/tenant-a::r1"), "tenant-a::r1"),
        (scope("/rollout/tenant-a::r1/status"), "tenant-a::r1"),
        (scope("/rollouts/a.b_c@d-e:f"), "a.b_c@d-e:f"),
        (scope("/rollouts/r1", query=b"wait=5"), None),  # a long poll
        (scope("/rollouts/r1", query=b"wait=0"), None),
        (scope("/rollouts/r1", method="HEAD"), None),
        (scope("/rollouts/r1", method="POST"), None),
        (scope("/rollouts/-r1"), None),  # not the id grammar: the route's 422
        (scope("/rollouts/" + "r" * 129), None),
        (scope("/rollouts/r1/"), None),
        (scope("/rollouts/r1/trajectory"), None),
        (scope("/rollouts"), None),
        (scope("/rollout/r1"), None),
        (scope("/sessions/r1"), None),
        (scope("/rollouts/r1", headers=[(b"content-length", b"3")]), None),
        (scope("/rollouts/r1", headers=[(b"transfer-encoding", b"chunked")]), None),
        (scope("/rollouts/r1", root_path="/api"), None),
        ({"type": "websocket", "path": "/rollouts/r1"}, None),
    ],
)
def test_which_requests_are_plain_status_reads(request_scope: Any, taken: str | None) -> None:
    assert plain_status_read(request_scope) == taken


Answers = Callable[[str], Any]


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[TrialEngine]:
    task = write_task(tmp_path / "tasks", "task")
    made = TrialEngine(config=fake_config(tmp_path), task=task, agent="nop", n_concurrent=1)
    yield made
    await made.shutdown(drain_sec=0)


@pytest.fixture
async def client(engine: TrialEngine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine, drain_sec=0))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as made:
        yield made


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids whose answer the fast path encoded."""
    seen: list[str] = []
    encode = fast_status.document_bytes

    def recording(status: RolloutStatus) -> bytes:
        seen.append(status.rollout_id)
        return encode(status)

    monkeypatch.setattr(fast_status, "document_bytes", recording)
    return seen


async def assert_same_answers(client: httpx.AsyncClient, taken: list[str], rollout_id: str) -> None:
    routed = await client.get(f"/rollouts/{rollout_id}", params={"wait": 0})
    assert taken == [], "a read with a query string went to the fast path"
    assert routed.status_code == 200, routed.text
    for path in (f"/rollouts/{rollout_id}", f"/rollout/{rollout_id}/status"):
        fast = await client.get(path)
        assert taken == [rollout_id], path
        taken.clear()
        assert (fast.status_code, fast.headers.raw, fast.content) == (
            routed.status_code, routed.headers.raw, routed.content,
        )  # fmt: skip


async def test_the_answer_is_the_routes_for_each_engine_state(
    engine: TrialEngine, client: httpx.AsyncClient, taken: list[str]
) -> None:
    submitted = await client.post("/rollouts", json={"rollout_id": "fs::done"})
    assert submitted.status_code == 202, submitted.text
    await engine.wait("fs::done")
    cancelled = await client.post("/rollouts/cancel", json={"ids": ["fs::never"]})
    assert cancelled.json() == {"dispositions": {"fs::never": "not_found"}}
    for rollout_id, status in [
        ("fs::done", "success"), ("fs::never", "cancelled"), ("fs::unknown", "unknown"),
    ]:  # fmt: skip
        assert (await client.get(f"/rollouts/{rollout_id}")).json()["status"] == status
        taken.clear()
        await assert_same_answers(client, taken, rollout_id)


DOCUMENTS = [
    RolloutStatus(rollout_id="d::queued", status="queued"),
    RolloutStatus(
        rollout_id="d::retried", status="running", attempt=3,
        retried=[
            RetriedAttempt(trial_id="d__1", trial_dir="/jobs/j/d__1", error_type="SandboxError",
                           error="the sandbox was lost"),
            RetriedAttempt(trial_id="d__2"),
        ],
    ),
    RolloutStatus(rollout_id="d::grading", status="grading"),
    RolloutStatus(
        rollout_id="d::scored", status="success", reward=0.75,
        rewards={"reward": 0.75, "style": 1.0, "tiny": 1e-12}, trial_dir="/jobs/j/d",
        finished_at=datetime(2026, 12, 6, 21, 4, 5, 678901, tzinfo=UTC),
        usage=Usage(calls=3, prompt_tokens=1200, completion_tokens=345), model_limit="max_turns",
    ),
    RolloutStatus(
        rollout_id="d::failed", status="failure", error='exit 1: "quoted", ünïcode, \\ and \n',
        error_category="agent", finished_at=datetime(2026, 1, 1, tzinfo=UTC),
    ),
]  # fmt: skip


@pytest.mark.parametrize("document", DOCUMENTS, ids=[d.rollout_id for d in DOCUMENTS])
async def test_the_answer_is_the_routes_for_each_kind_of_document(
    engine: TrialEngine,
    client: httpx.AsyncClient,
    taken: list[str],
    monkeypatch: pytest.MonkeyPatch,
    document: RolloutStatus,
) -> None:
    monkeypatch.setattr(engine, "status", lambda rollout_id: document)
    await assert_same_answers(client, taken, document.rollout_id)


async def test_what_is_not_a_plain_read_is_the_routes(
    client: httpx.AsyncClient, taken: list[str]
) -> None:
    assert (await client.get("/rollouts/-bad")).status_code == 422
    assert (await client.get("/rollouts/r1", params={"wait": 99})).status_code == 422
    slash = await client.get("/rollouts/r1/")
    assert (slash.status_code, slash.headers["location"]) == (307, "http://t/rollouts/r1")
    assert taken == []
