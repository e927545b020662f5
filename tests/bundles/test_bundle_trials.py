"""Bundles in real containers with no network: the example project (the real `openai` client
from PyPI, through the model gateway to the stand-in), a code-only change that builds no image,
a dependency with no wheel for the image's Python, refused before any container, and a server
whose rollouts run a bundle."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import docker
import httpx
import pytest

from orchestrator import ModelConfig, TrialConfig, TrialEngine, run_trial
from orchestrator.backends.docker import images as images_module
from orchestrator.backends.docker.images import BuildPlan
from orchestrator.bundles import build_bundle, inspect_bundle
from orchestrator.service.server import create_app
from orchestrator.trials.bundle_agent import BundleAgent
from tests.conftest import EXAMPLES, MakeTask
from tests.support.standin import Reply, StandIn

pytestmark = pytest.mark.docker

EXAMPLE = EXAMPLES / "qa-bundle"
UPSTREAM_KEY = "sk-upstream-bundle-5c1e9a7f3b"


def offline(config: TrialConfig) -> TrialConfig:
    return config.model_copy(update={"no_internet": True})


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tags of the images this process builds from now on (other sessions may be building
    on the same engine: the engine's image list cannot tell whose a build was)."""
    built: list[str] = []
    real = images_module._build_blocking

    def counted(plan: BuildPlan, labels: dict[str, str]) -> list[str]:
        built.append(plan.tag)
        return real(plan, labels)

    monkeypatch.setattr(images_module, "_build_blocking", counted)
    return built


async def test_the_example_bundle_answers_through_openai_offline_and_its_grader_scores(
    config: TrialConfig, tmp_path: Path
) -> None:
    wheel = build_bundle(EXAMPLE / "project", cache=tmp_path / "bundles")
    assert "openai>=1.0" in inspect_bundle(wheel).requirements
    agent = BundleAgent.load(wheel, config_file=EXAMPLE / "config.json")
    async with StandIn(Reply(content="Paris")) as upstream:
        model = ModelConfig(name="policy", base_url=upstream.base_url, api_key=UPSTREAM_KEY)
        result = await run_trial(
            EXAMPLE / "task", agent, metadata={"label": "Paris"},
            config=offline(config).model_copy(update={"model": model}),
        )  # fmt: skip
    assert (result.status, result.reward, result.error) == ("success", 1.0, None)
    (request,) = upstream.chat_requests()
    system, user = request.body["messages"]
    assert system["content"] == "Answer with the city's name only."  # config.json, from the host
    assert user["content"] == (EXAMPLE / "task" / "instruction.md").read_text()
    assert request.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"  # added by the gateway
    trial = Path(result.trial_dir)
    generated = (trial / "task" / "tests" / "test.sh").read_text()
    assert "/opt/trialbox/bundle/bin/qa-bundle-grade" in generated  # the task has no tests/
    output = json.loads((trial / "logs" / "agent" / "container_result.json").read_text())
    assert output["output"] == {"answer": "Paris"}
    assert json.loads((trial / "logs" / "agent" / "trajectory.json").read_text())["steps"]


PROJECT = {
    "pyproject.toml": (
        '[project]\nname = "echo-bundle"\nversion = "0.1.0"\ndependencies = ["six>=1.16"]\n'
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[tool.trialbox]\nworkflow = "echo_bundle.flow:Echo"\n'
    ),
    "echo_bundle/__init__.py": "",
    "echo_bundle/flow.py": (
        "from pathlib import Path\n\nimport six\n\n"
        "from container_runtime import AgentWorkflow\n\n\n"
        "class Echo(AgentWorkflow):\n"
        "    async def run(self, ctx):\n"
        '        suffix = ctx.workflow_config.get("suffix", "")\n'
        '        Path("/app/answer.txt").write_text(six.text_type("VERSION") + suffix)\n'
    ),  # returns nothing: fine
}
# The task's own verifier (the bundle has no grader): the answer must be the label.
OWN_TEST = (
    '#!/bin/sh\nif [ "$(cat /app/answer.txt)" = "$(tr -d \'"\' < /tests/label.json)" ]; '
    "then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
)


def write_project(root: Path, version: str) -> Path:
    for name, text in PROJECT.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("VERSION", version))
    return root


async def test_a_code_only_change_runs_again_without_building_an_image(
    config: TrialConfig, make_task: MakeTask, tmp_path: Path, docker_client: docker.DockerClient,
    builds: list[str],
) -> None:  # fmt: skip
    task = make_task("echo", test_sh=OWN_TEST)
    project = write_project(tmp_path / "project", "v1")
    first_wheel = build_bundle(project, cache=tmp_path / "bundles")
    assert build_bundle(project, cache=tmp_path / "bundles") == first_wheel  # not built again
    first = await run_trial(
        task, BundleAgent.load(first_wheel), config=offline(config), metadata={"label": "v1"}
    )
    assert (first.status, first.reward, first.error) == ("success", 1.0, None)
    image_id = docker_client.images.get(first.image_tag).id
    builds.clear()

    write_project(project, "v2")
    second_wheel = build_bundle(project, cache=tmp_path / "bundles")
    assert second_wheel != first_wheel
    second = await run_trial(
        task, BundleAgent.load(second_wheel), config=offline(config), metadata={"label": "v2"}
    )
    assert (second.status, second.reward, second.error) == ("success", 1.0, None)  # v2 ran
    assert second.image_tag == first.image_tag
    assert builds == []  # no image was built for it
    assert docker_client.images.get(second.image_tag).id == image_id


async def test_a_dependency_without_a_wheel_for_the_images_python_fails_before_any_container(
    config: TrialConfig, make_task: MakeTask, tmp_path: Path, container_watch
) -> None:
    project = write_project(tmp_path / "project", "v1")
    pyproject = project / "pyproject.toml"
    # PyYAML 5.4.1 has Linux wheels for CPython 3.6 to 3.9 only; the image has 3.11.
    pyproject.write_text(pyproject.read_text().replace('"six>=1.16"', '"six", "pyyaml==5.4.1"'))
    agent = BundleAgent.load(build_bundle(project, cache=tmp_path / "bundles"))
    task = make_task("echo", test_sh=OWN_TEST)
    result = await run_trial(task, agent, config=config, job_id=container_watch.job_id)
    assert result.status == "failure"
    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("validation", "image")
    assert "pyyaml==5.4.1" in result.error.message
    assert "CPython 3.11" in result.error.message
    assert container_watch.created() == []


async def test_a_server_started_with_a_bundle_runs_it_per_rollout_over_http(
    config: TrialConfig, make_task: MakeTask, tmp_path: Path
) -> None:
    """As `trialbox serve --bundle PROJECT --workflow-config FILE` sets it up."""
    settings = tmp_path / "config.json"
    settings.write_text('{"suffix": "-served"}')
    project = write_project(tmp_path / "project", "v1")
    agent = BundleAgent.load(
        build_bundle(project, cache=tmp_path / "bundles"), config_file=settings
    )
    task = make_task("echo", test_sh=OWN_TEST)
    engine = TrialEngine(config=offline(config), agent=agent.spec, task=task)
    transport = httpx.ASGITransport(app=create_app(engine))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            body = {"rollout_id": "bundle-1", "metadata": {"label": "v1-served"}}
            assert (await client.post("/rollouts", json=body)).status_code == 202
            async with asyncio.timeout(120):
                doc: dict = {}
                while doc.get("finished_at") is None:
                    doc = (await client.get("/rollouts/bundle-1", params={"wait": 25})).json()
    finally:
        await engine.shutdown(drain_sec=0)
    assert (doc["status"], doc["reward"], doc["error"]) == ("success", 1.0, None)
