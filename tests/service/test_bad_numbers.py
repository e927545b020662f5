"""Bad numbers at the HTTP edge (issue 18, item 8): NaN, Infinity and 1e999 are 422s naming
the field, never a 500 nor a null the upstream reads as its default. Fake backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from orchestrator.backends.fake import FakeBackend
from orchestrator.service.engine import TrialEngine
from orchestrator.service.server import create_app
from tests.conftest import write_task
from tests.jobs.helpers import QUICK, fake_config


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    task = write_task(tmp_path / "tasks", "task")
    engine = TrialEngine(
        config=fake_config(tmp_path), task=task, agent="nop", backend=FakeBackend(QUICK)
    )
    app = create_app(engine)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        yield http
    await engine.shutdown(drain_sec=0)


def body(fragment: str) -> bytes:
    return ('{"rollout_id": "r1", ' + fragment + "}").encode()


@pytest.mark.parametrize(
    ("fragment", "loc"),
    [
        (
            '"model": {"sampling": {"temperature": NaN}}',
            ["body", "model", "sampling", "temperature"],
        ),
        ('"model": {"sampling": {"top_p": Infinity}}', ["body", "model", "sampling", "top_p"]),
        (
            '"model": {"sampling": {"temperature": 1e999}}',
            ["body", "model", "sampling", "temperature"],
        ),
        ('"metadata": {"label": Infinity}', ["body", "metadata"]),
        (
            '"metadata": {"x": [1, {"y": -Infinity}]}',
            ["body", "metadata"],
        ),
    ],
)
async def test_a_non_finite_number_is_a_422_naming_its_field(
    client: httpx.AsyncClient, fragment: str, loc: list[object]
) -> None:
    response = await client.post(
        "/rollouts", content=body(fragment), headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == loc
    assert "finite" in error["msg"] or "Infinity" in error["msg"]


@pytest.mark.parametrize(("key", "value"), [("n", -3), ("temperature", 2.5), ("top_p", 0)])
async def test_a_sampling_value_out_of_range_is_a_422_naming_it(
    client: httpx.AsyncClient, key: str, value: float
) -> None:
    sampling = {"sampling": {key: value}}
    response = await client.post("/rollouts", json={"rollout_id": "r1", "model": sampling})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "model", "sampling", key]


async def test_a_non_finite_wait_is_a_422(client: httpx.AsyncClient) -> None:
    response = await client.get("/rollouts/r1", params={"wait": "nan"})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["query", "wait"]
