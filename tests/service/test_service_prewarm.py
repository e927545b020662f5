"""Prewarm: each distinct image is built once, a second prewarm builds nothing, failures are
reported together (and stop the server from starting). Builds are real: each Dockerfile
carries a unique `RUN echo <uuid>` line, and the images are removed afterwards (forced)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import docker.errors
import httpx
import pytest

from orchestrator import TrialConfig
from orchestrator.service.engine import TrialEngine
from orchestrator.service.prewarm import PrewarmError, PrewarmRow, prewarm
from orchestrator.service.server import create_app
from orchestrator.tasks.task import Task, load_task
from tests.conftest import ensure_task_image

HELLO = Path(__file__).resolve().parents[2] / "examples" / "hello-oracle"
MakeTask = Callable[..., Path]


def unique_dockerfile() -> str:
    """A Dockerfile no engine has built: its `RUN echo <uuid>` really runs. It sits in a first
    stage so the final stage (and trialbox's venv block after it) comes from the layer cache,
    which keeps a real build to a few seconds."""
    return (
        f"FROM python:3.11-slim-bookworm AS marker\nRUN echo {uuid.uuid4().hex}\n"
        "FROM python:3.11-slim-bookworm\nWORKDIR /app\n"
    )


@pytest.fixture
def built_images(docker_client: docker.DockerClient) -> Iterator[list[str]]:
    """Tags to remove (forced) after the test."""
    tags: list[str] = []
    yield tags
    for tag in tags:
        try:
            docker_client.images.remove(tag, force=True)
        except docker.errors.ImageNotFound:
            pass


async def test_prewarm_builds_each_distinct_image_once_and_a_second_prewarm_builds_nothing(
    config: TrialConfig,
    make_task: MakeTask,
    docker_client: docker.DockerClient,
    built_images: list[str],
) -> None:
    shared = unique_dockerfile()
    a = make_task("pw-a", dockerfile=shared)
    b = make_task("pw-b", dockerfile=shared)  # same content as pw-a: the same image
    c = make_task("pw-c", dockerfile=unique_dockerfile())
    # paths, loaded tasks and strings are all accepted
    tasks: list[Task | str | Path] = [a, load_task(b), str(c)]

    reported: list[PrewarmRow] = []
    rows = await prewarm(tasks, base_image_map=config.base_image_map, on_done=reported.append)
    built_images.extend(r.tag for r in rows if r.tag)

    groups = {tuple(sorted(r.tasks)): r for r in rows}
    assert set(groups) == {("pw-a", "pw-b"), ("pw-c",)}
    assert [(r.status, r.error) for r in rows] == [("built", None), ("built", None)]
    tags = {r.tag for r in rows}
    assert len(tags) == 2 and all(t and t.startswith("trialbox-env:") for t in tags)
    assert sorted(reported, key=lambda r: str(r.tag)) == sorted(rows, key=lambda r: str(r.tag))
    image_ids = {tag: docker_client.images.get(tag).id for tag in tags}

    again = await prewarm(tasks, base_image_map=config.base_image_map)
    assert {tuple(sorted(r.tasks)): (r.tag, r.status) for r in again} == {
        key: (row.tag, "cached") for key, row in groups.items()
    }
    assert {tag: docker_client.images.get(tag).id for tag in tags} == image_ids


async def test_a_failing_build_raises_prewarm_error_naming_it_and_the_rest_still_build(
    config: TrialConfig,
    make_task: MakeTask,
    docker_client: docker.DockerClient,
    built_images: list[str],
) -> None:
    good = make_task("pw-good", dockerfile=unique_dockerfile())
    bad = make_task("pw-bad", dockerfile="FROM python:3.11-slim-bookworm\nRUN false\n")

    with pytest.raises(PrewarmError) as caught:
        await prewarm([good, bad], base_image_map=config.base_image_map)
    rows = caught.value.rows
    built_images.extend(r.tag for r in rows if r.tag)

    message = str(caught.value)
    assert "1 of 2" in message
    assert "pw-bad" in message and "pw-good" not in message
    outcome = {tuple(r.tasks): r for r in rows}
    assert outcome[("pw-good",)].status == "built"
    assert outcome[("pw-bad",)].status == "failed"
    assert "false" in (outcome[("pw-bad",)].error or "")  # the build log's tail is kept
    docker_client.images.get(str(outcome[("pw-good",)].tag))  # the good image exists

    # A server told to prewarm these refuses to start instead of serving without images...
    engine = TrialEngine(config=config, task=HELLO)
    app = create_app(engine, prewarm_tasks=[good, bad])
    with pytest.raises(PrewarmError, match="1 of 2"):
        async with app.router.lifespan_context(app):
            pytest.fail("the server started although an image failed to build")

    # ...and starts once they all build (here: already built).
    ready = create_app(TrialEngine(config=config, task=HELLO), prewarm_tasks=[good])
    async with ready.router.lifespan_context(ready):
        transport = httpx.ASGITransport(app=ready)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            assert (await client.get("/healthz")).json()["ok"] is True


async def test_a_task_whose_image_cannot_even_be_planned_is_reported_with_the_others(
    config: TrialConfig, make_task: MakeTask
) -> None:
    broken = make_task("pw-unreadable")
    (broken / "environment" / "Dockerfile").write_bytes(b"\xff\xfe not utf-8\n")
    await ensure_task_image(config, HELLO)  # so its row says "cached", whatever ran before

    with pytest.raises(PrewarmError) as caught:
        await prewarm([broken, HELLO], base_image_map=config.base_image_map)
    assert "1 of 2" in str(caught.value) and "pw-unreadable" in str(caught.value)
    outcome = {tuple(r.tasks): r for r in caught.value.rows}
    assert (outcome[("pw-unreadable",)].tag, outcome[("pw-unreadable",)].status) == (
        None,
        "failed",
    )
    assert outcome[("hello-oracle",)].status == "cached"


def test_prewarm_error_counts_failures_among_all_rows() -> None:
    rows = [
        PrewarmRow(tag="t:1", tasks=["x"], status="built", seconds=1.0),
        PrewarmRow(tag="t:2", tasks=["y", "z"], status="failed", seconds=1.0, error="boom\nlog"),
        PrewarmRow(tag="t:3", tasks=["w"], status="cached", seconds=0.0),
    ]
    error = PrewarmError(rows)
    assert str(error) == "1 of 3 image(s) failed to build: y, z: boom"
    assert error.rows == rows


def test_prewarm_error_survives_a_failure_without_a_message() -> None:
    row = PrewarmRow(tag=None, tasks=["quiet"], status="failed", seconds=0.0, error="")
    assert "1 of 1" in str(PrewarmError([row]))
