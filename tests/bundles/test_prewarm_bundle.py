"""`trialbox prewarm --bundle`: the image a bundle trial uses (the task's, with the bundle's
dependencies in its venv) built ahead, on the real engine with the example bundle; a second
prewarm and the bundle trial that follows build nothing. A task the bundle cannot run is a
failed row while the others build; with --ray it is refused.

Whether anything was built is read from the engine's own events: every build, even one its
cache answers whole, ends by tagging the image, so no `tag` event for a tag means no build."""

from __future__ import annotations

import asyncio
import re
import shutil
import time
import uuid
from pathlib import Path

import docker
import pytest

from container_runtime import paths
from orchestrator import ModelConfig, TrialConfig, TrialResult, load_task, run_trial
from orchestrator.backends import build_backend
from orchestrator.backends.fake import FakeBackend
from orchestrator.bundles import build_bundle
from orchestrator.cli import main
from orchestrator.service.prewarm import PrewarmError, prewarm
from orchestrator.trials.bundle_agent import BundleAgent
from tests.bundles.test_bundle_agent import write_project
from tests.conftest import BASE_IMAGE, EXAMPLES, OFFICIAL_IMAGE, write_task
from tests.support.standin import Reply, StandIn

EXAMPLE = EXAMPLES / "qa-bundle"
MAPPING = ["--base-image", f"{OFFICIAL_IMAGE}={BASE_IMAGE}"]


class TagWatch:
    """The tags the engine gave our images from now on (other sessions may build theirs on the
    same engine: only the tags asked about count)."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.since = time.time()

    def tagged(self, *tags: str) -> list[str]:
        events = self.client.events(
            since=f"{self.since - 0.5:.6f}", until=f"{time.time() + 0.5:.6f}",
            filters={"type": "image", "event": "tag"}, decode=True,
        )  # fmt: skip
        return [name for e in events if (name := e["Actor"]["Attributes"].get("name", "")) in tags]


@pytest.fixture
def example_task(tmp_path: Path) -> Path:
    """The example's task with a line of its own in its Dockerfile, so that its image, and the
    bundle's on top of it, are this test's to build (none exists before it)."""
    task = tmp_path / "tasks" / "qa"
    shutil.copytree(EXAMPLE / "task", task)
    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + f"ENV TRIALBOX_TEST_RUN={uuid.uuid4().hex}\n")
    return task


def prewarmed(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, str]:
    """(tag, status) of the one image `trialbox prewarm ARGV` reports."""
    assert main(["prewarm", *argv]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    rows = re.findall(r"(trialbox-env:[0-9a-f]+)\s*│\s*qa\s*│\s*(built|cached|failed)", out)
    assert len(rows) == 1, out
    return rows[0]


def test_prewarm_builds_the_image_a_bundle_trial_uses_and_nothing_twice(
    config: TrialConfig, docker_client: docker.DockerClient, example_task: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("COLUMNS", "300")  # the table's tags whole
    wheel = build_bundle(EXAMPLE / "project", cache=tmp_path / "bundles")
    backend = build_backend(config.backend, config.limits)
    plan = backend.plan_image(load_task(example_task), config.base_image_map)
    task_tag = asyncio.run(plan).tag  # the task's own image (the CLI runs its own loops)

    first = TagWatch(docker_client)
    tag, status = prewarmed(capsys, str(example_task), "--bundle", str(wheel), *MAPPING)

    assert status == "built"
    assert tag != task_tag  # the bundle's image, FROM the task's
    assert set(first.tagged(tag, task_tag)) == {tag, task_tag}
    imports = f"{paths.RUNTIME_PYTHON} -c 'import openai; print(openai.__name__)'"
    ran = docker_client.containers.run(tag, ["sh", "-c", imports], remove=True, network_mode="none")
    assert ran.decode().strip() == "openai"  # the bundle's dependencies are in the venv

    second = TagWatch(docker_client)
    assert prewarmed(capsys, str(example_task), "--bundle", str(wheel), *MAPPING) == (
        tag, "cached",
    )  # fmt: skip
    assert second.tagged(tag, task_tag) == []

    trial = TagWatch(docker_client)
    agent = BundleAgent.load(wheel, config_file=EXAMPLE / "config.json")

    async def bundle_trial() -> TrialResult:
        async with StandIn(Reply(content="Paris")) as upstream:
            model = ModelConfig(name="policy", base_url=upstream.base_url, api_key="sk-pw-7d1e")
            offline = config.model_copy(update={"no_internet": True, "model": model})
            return await run_trial(example_task, agent, metadata={"label": "Paris"}, config=offline)

    result = asyncio.run(bundle_trial())
    assert (result.status, result.reward, result.error) == ("success", 1.0, None)
    assert result.image_tag == tag  # the image prewarm built
    assert trial.tagged(tag, task_tag) == []  # and the trial built nothing


async def test_a_task_the_bundle_cannot_run_is_a_failed_row_and_the_others_still_build(
    tmp_path: Path,
) -> None:
    wheel = build_bundle(write_project(tmp_path / "plain", grader=False), cache=tmp_path / "b")
    graded = write_task(tmp_path / "tasks", "graded")
    ungraded = write_task(tmp_path / "tasks", "ungraded")
    shutil.rmtree(ungraded / "tests")

    with pytest.raises(PrewarmError) as caught:
        await prewarm([graded, ungraded], backend=FakeBackend(), agent=BundleAgent.load(wheel))

    rows = {row.tasks[0]: row for row in caught.value.rows}
    assert rows["graded"].status == "built"
    assert (rows["ungraded"].status, rows["ungraded"].tag) == ("failed", None)
    assert f"{ungraded / 'tests' / 'test.sh'}: missing, and bundle tiny-flow" in str(
        rows["ungraded"].error
    )


def test_a_bundle_with_a_cluster_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = write_task(tmp_path / "tasks", "qa")
    code = main(["prewarm", str(task), "--bundle", str(tmp_path / "b.whl"), "--ray", "auto"])
    assert code == 1
    assert "--bundle with a cluster (--ray, or $TRIALBOX_RAY): not supported" in (
        capsys.readouterr().out
    )
