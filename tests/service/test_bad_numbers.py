"""Bad numbers at the HTTP edge (issue 18, item 8): NaN, Infinity and 1e999 are 422s naming
the field, never a 500 nor a null the upstream reads as its default. Fake backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from orchestrator.backends.fake import FakeBackend
from orchestrator.gateway.settings import ModelConfig
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


# -- sampling keys: a checked set, with a named pass-through ---------------------------------


@pytest.fixture
async def model_client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """A server whose engine has model settings, letting `guided_json` through unchecked."""
    task = write_task(tmp_path / "tasks", "task")
    model = ModelConfig(
        name="policy", base_url="http://127.0.0.1:9/v1", extra_sampling_keys=["guided_json"]
    )
    engine = TrialEngine(
        config=fake_config(tmp_path, model=model), task=task, agent="nop",
        backend=FakeBackend(QUICK),
    )  # fmt: skip
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        yield http
    await engine.shutdown(drain_sec=0)


async def submit_sampling(http: httpx.AsyncClient, sampling: dict[str, object]) -> httpx.Response:
    return await http.post("/rollouts", json={"rollout_id": "r1", "model": {"sampling": sampling}})


@pytest.mark.parametrize(("typo", "meant"), [("top_kk", "top_k"), ("temprature", "temperature")])
async def test_an_unknown_sampling_key_is_a_422_naming_it_and_its_likely_key(
    model_client: httpx.AsyncClient, typo: str, meant: str
) -> None:
    response = await submit_sampling(model_client, {typo: 5})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail.startswith(f"model.sampling.{typo}: ")
    assert f"did you mean {meant}?" in detail and "--extra-sampling-key" in detail
    assert (await model_client.get("/rollouts/r1")).json()["status"] == "unknown", "not queued"


async def test_a_key_no_one_could_mean_gets_no_guess(model_client: httpx.AsyncClient) -> None:
    response = await submit_sampling(model_client, {"frobnicate": 1})
    assert response.status_code == 422
    assert "did you mean" not in response.json()["detail"]


async def test_vllm_keys_are_known_and_a_named_pass_through_key_is_sent_as_given(
    model_client: httpx.AsyncClient,
) -> None:
    sampling = {"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "stop": ["</answer>"],
                "chat_template_kwargs": {"enable_thinking": False},
                "guided_json": {"type": "object"}}  # fmt: skip
    response = await submit_sampling(model_client, sampling)
    assert response.status_code == 202, response.text


@pytest.mark.parametrize(
    ("key", "value"),
    [("top_k", -5), ("min_p", 1.5), ("repetition_penalty", 0), ("min_tokens", -1),
     ("logit_bias", {"50256": 101}), ("stop_token_ids", ["eos"])],
)  # fmt: skip
async def test_a_vllm_key_out_of_range_is_a_422_naming_it(
    model_client: httpx.AsyncClient, key: str, value: object
) -> None:
    response = await submit_sampling(model_client, {key: value})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][:4] == ["body", "model", "sampling", key]


@pytest.mark.parametrize(
    "fragment",
    ['{"guided_json": {"x": NaN}}', '{"guided_json": [1e999]}',
     '{"chat_template_kwargs": {"t": -Infinity}}'],
)  # fmt: skip
async def test_a_pass_through_or_json_valued_key_still_refuses_non_finite_numbers(
    model_client: httpx.AsyncClient, fragment: str
) -> None:
    response = await model_client.post(
        "/rollouts", content=body(f'"model": {{"sampling": {fragment}}}'),
        headers={"content-type": "application/json"},
    )  # fmt: skip
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"][:3] == ["body", "model", "sampling"]
    assert "finite" in error["msg"] or "NaN" in error["msg"]
