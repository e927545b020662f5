"""An agent that runs trialbox's Python runtime on an image that has none is the task's
fault (`validation`), said before the agent starts; agents that need only `sh` still run."""

from __future__ import annotations

from pathlib import Path

from orchestrator import TrialConfig, run_trial
from orchestrator.backends.fake.backend import FakeBackend
from orchestrator.trials.config import TrialConfig as Config
from tests.conftest import BASE_IMAGE, MakeTask, write_task

FLOW = "from container_runtime import AgentWorkflow\n\nclass Flow(AgentWorkflow):\n    pass\n"


def workflow(tmp_path: Path) -> str:
    source = tmp_path / "flow.py"
    source.write_text(FLOW)
    return f"workflow:{source}:Flow"


async def test_a_workflow_on_an_image_without_python_is_refused_before_any_container(
    config: TrialConfig, make_task: MakeTask, no_python: str, container_watch, tmp_path: Path
) -> None:
    task = make_task("no-python-flow", dockerfile=f"FROM {no_python}\n")

    result = await run_trial(task, workflow(tmp_path), config=config, job_id=container_watch.job_id)

    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("validation", "image")
    assert result.error.type == "RuntimeMissingError"
    assert "runs trialbox's Python runtime" in result.error.message
    assert "CPython >= 3.9" in result.error.message
    assert container_watch.created() == []


async def test_a_task_that_removes_its_python3_is_refused_before_the_agent(
    config: TrialConfig, make_task: MakeTask, tmp_path: Path
) -> None:
    # The base has python3 (so the venv is linked to it), then the task's own step removes it.
    dockerfile = f"FROM {BASE_IMAGE}\nRUN rm -f /usr/bin/python3*\n"
    task = make_task("python-removed", dockerfile=dockerfile)

    result = await run_trial(task, workflow(tmp_path), config=config)

    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("validation", "start")
    assert result.error.type == "RuntimeMissingError"
    assert result.agent.termination is None  # the agent never started


async def test_the_fake_refuses_a_workflow_where_the_image_has_no_runtime(
    tmp_path: Path,
) -> None:
    task = write_task(tmp_path / "tasks", "fake-no-python")
    backend = FakeBackend(runtime="absent")
    config = Config(backend={"type": "fake"}, jobs_dir=tmp_path / "jobs")

    refused = await run_trial(task, workflow(tmp_path), config=config, backend=backend)
    nop = await run_trial(task, "nop", config=config, backend=backend)

    assert refused.error is not None
    assert (refused.error.category, refused.error.type) == ("validation", "RuntimeMissingError")
    assert len(backend.created) == 1  # only the nop trial got a sandbox
    assert nop.error is None and nop.reward == 1.0
