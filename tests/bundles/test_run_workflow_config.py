"""`trialbox run --workflow-config FILE`: a bundle trial's workflow gets the file's JSON object
(in a real container, offline), the job's config.json names the file for a resume, and what
cannot work is refused before anything runs: no bundle agent, a config given twice, a file
that holds no JSON object."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.bundles import build_bundle
from orchestrator.cli import main
from orchestrator.cli.settings import load_settings
from tests.bundles.test_bundle_trials import OWN_TEST, write_project
from tests.conftest import BASE_IMAGE, OFFICIAL_IMAGE, MakeTask, write_task


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The echo bundle: its workflow writes "v1" plus workflow_config["suffix"] to
    /app/answer.txt, which the task's own verifier compares with the label."""
    root = tmp_path_factory.mktemp("echo")
    return build_bundle(write_project(root / "project", "v1"), cache=root / "bundles")


def workflow_config(tmp_path: Path, text: str = '{"suffix": "-configured"}') -> Path:
    path = tmp_path / "workflow.json"
    path.write_text(text)
    return path


def test_every_trials_workflow_gets_the_files_object(
    docker_ready: object, wheel: Path, make_task: MakeTask, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    task = make_task("echo", test_sh=OWN_TEST)
    config = workflow_config(tmp_path)

    code = main([
        "run", str(task), "--agent", f"bundle:{wheel}", "--workflow-config", str(config),
        "--attempts", "2", "--label", "v1-configured", "--no-internet",
        "--base-image", f"{OFFICIAL_IMAGE}={BASE_IMAGE}", "--jobs-dir", str(tmp_path / "jobs"),
        "--json",
    ])  # fmt: skip

    out = capsys.readouterr()
    assert code == 0, out.err
    job = json.loads(out.out)
    assert [(t["status"], t["reward"]) for t in job["trials"]] == [("success", 1.0)] * 2
    for trial in job["trials"]:
        given = Path(trial["trial_dir"]) / "logs" / "agent" / "workflow_config.json"
        assert json.loads(given.read_text()) == {"suffix": "-configured"}
    saved = json.loads((Path(job["job_dir"]) / "config.json").read_text())
    assert saved["agent"] == f"bundle:{wheel}?config={config}"  # a resume reads it again
    assert saved["options"]["workflow_config"] == str(config)


def test_a_job_file_and_the_environment_give_it_too(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    job = tmp_path / "conf" / "job.toml"
    job.write_text('agent = "bundle:project"\nworkflow_config = "workflow.json"\n')

    from_file = load_settings({}, job, {})
    from_env = load_settings({}, job, {"TRIALBOX_WORKFLOW_CONFIG": "/elsewhere/w.json"})

    conf = tmp_path / "conf"
    assert from_file.workflow_config == conf / "workflow.json"  # next to the file
    # The bundle too: every path in a job file is relative to the file.
    assert from_file.agent_spec() == f"bundle:{conf / 'project'}?config={conf / 'workflow.json'}"
    assert from_env.workflow_config == Path("/elsewhere/w.json")


def test_a_bundle_spec_in_a_job_file_is_read_relative_to_the_file(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("agent: bundle:dist/flow.whl?config=cfg/flow.json\n")
    spec = load_settings({}, job, {}).agent
    assert spec == f"bundle:{tmp_path / 'dist/flow.whl'}?config={tmp_path / 'cfg/flow.json'}"
    job.write_text("agent: bundle:/abs/flow.whl\n")
    assert load_settings({}, job, {}).agent == "bundle:/abs/flow.whl"  # absolute stays
    given_here = load_settings({"agent": "bundle:project"}, job, {})
    assert given_here.agent == "bundle:project"  # the command line's is the caller's own


def test_without_a_bundle_agent_it_is_refused_naming_where_it_was_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = write_task(tmp_path / "tasks", "plain")
    config = workflow_config(tmp_path)

    code = main(["run", str(task), "--backend", "fake", "--workflow-config", str(config)])

    assert code == 1
    out = capsys.readouterr().out
    assert "--workflow-config: a workflow config is for a bundle's workflow" in out
    assert "the agent is 'oracle': give --agent bundle:WHEEL_OR_PROJECT" in out
    assert not (tmp_path / "jobs").exists()  # nothing ran
    job = tmp_path / "job.yaml"
    job.write_text(f"agent: nop\nworkflow_config: {config}\n")
    with pytest.raises(ValueError, match=rf"^{job}: workflow_config: a workflow config is for"):
        load_settings({}, job, {})
    with pytest.raises(ValueError, match=r"^\$TRIALBOX_WORKFLOW_CONFIG: a workflow config"):
        load_settings({}, None, {"TRIALBOX_WORKFLOW_CONFIG": str(config)})


def test_a_config_given_twice_is_refused(tmp_path: Path) -> None:
    config = workflow_config(tmp_path)
    given = {"agent": f"bundle:project?config={config}", "workflow_config": config}
    with pytest.raises(ValueError, match=r"--workflow-config: the agent .* names its workflow"):
        load_settings(given, None, {})


@pytest.mark.parametrize("text", ['["a", "b"]', '"brief"', "{not json"])
def test_a_file_without_a_json_object_is_refused_naming_the_file(
    wheel: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    task = write_task(tmp_path / "tasks", "echo", test_sh=OWN_TEST)
    config = workflow_config(tmp_path, text)

    code = main([
        "run", str(task), "--backend", "fake", "--agent", f"bundle:{wheel}",
        "--workflow-config", str(config), "--jobs-dir", str(tmp_path / "jobs"),
    ])  # fmt: skip

    assert code == 1
    out = capsys.readouterr().out
    assert f"{config}: the workflow config" in out
    assert "must be a JSON object" in out or "cannot be read as JSON" in out
    assert not (tmp_path / "jobs").exists()  # refused before the job started
