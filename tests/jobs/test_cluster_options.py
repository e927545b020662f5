"""`--ray ADDRESS` and `--registry` as the other options of `trialbox run`: from a job file and
from TRIALBOX_RAY / TRIALBOX_REGISTRY, the command line winning; a registry without a cluster
refused where it was given (ignored when only the environment gives it); both allowed with
--resume; prewarm, serve and reap reading the same variables; and a run whose job file names
the cluster really placing its trials there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import build_parser
from orchestrator.cli.cluster import on_cluster
from orchestrator.cli.common import config_of
from orchestrator.cli.run import _given
from orchestrator.cli.settings import env_name, load_settings, resume_overrides
from orchestrator.sandbox.backend_config import RayBackendConfig
from orchestrator.trials.config import TrialConfig
from tests.jobs.helpers import make_tasks


def given(*argv: str) -> dict[str, object]:
    return _given(build_parser().parse_args(["run", *argv]))


def cluster_of(settings: object) -> RayBackendConfig:
    """The backend `trialbox run` would place its trials with."""
    backend = on_cluster(config_of(settings), settings).backend
    assert isinstance(backend, RayBackendConfig), backend
    return backend


def test_the_cluster_comes_from_the_command_line_the_environment_or_a_job_file(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job.toml"
    job.write_text('ray = "ray://head:10001"\nregistry = "file.test:5000"\nbackend = "fake"\n')
    env = {"TRIALBOX_RAY": "env-head:6379", "TRIALBOX_REGISTRY": "env.test:5000"}
    assert (env_name("ray"), env_name("registry")) == ("TRIALBOX_RAY", "TRIALBOX_REGISTRY")

    from_file = cluster_of(load_settings({}, job, {}))
    from_env = cluster_of(load_settings({}, job, env))
    flags = given("--ray", "auto", "--registry", "cli.test:5000")
    from_flags = cluster_of(load_settings(flags, job, env))

    assert (from_file.address, from_file.registry) == ("ray://head:10001", "file.test:5000")
    assert from_file.node.type == "fake"  # each node runs what --backend names
    assert (from_env.address, from_env.registry) == ("env-head:6379", "env.test:5000")
    assert (from_flags.address, from_flags.registry) == ("auto", "cli.test:5000")
    assert config_of(load_settings({}, None, {})).backend.type == "docker"  # no cluster: local


def test_a_registry_alone_is_refused_where_given_or_ignored_from_the_environment(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("registry: file.test:5000\n")
    with pytest.raises(ValueError, match=rf"^{job}: registry: a registry is where a Ray cluster"):
        load_settings({}, job, {})
    # $TRIALBOX_REGISTRY alone (the scripts read it too, to start a registry) counts only
    # with a cluster: without one the run is local, as if it were not set.
    alone = load_settings({}, None, {"TRIALBOX_REGISTRY": "env.test:5000"})
    assert alone.registry is None and config_of(alone).backend.type == "docker"
    with pytest.raises(ValueError, match=r"^--registry: .*or leave the registry out"):
        load_settings(given("--registry", "cli.test:5000"), None, {})
    # A cluster from any place goes with a registry from any other.
    mixed = cluster_of(load_settings({}, job, {"TRIALBOX_RAY": "auto"}))
    assert (mixed.address, mixed.registry) == ("auto", "file.test:5000")


def test_a_resumed_job_may_name_its_cluster_anew() -> None:
    assert resume_overrides(given("--ray", "auto", "--registry", "cli.test:5000")) == {
        "ray": "auto", "registry": "cli.test:5000",
    }  # fmt: skip


@pytest.mark.ray
def test_a_run_whose_job_file_names_the_cluster_places_its_trials_there(tmp_path: Path) -> None:
    """A real Ray cluster (`ray = "local"`: one started for this run alone), its node running
    the fake backend; the registry comes from the environment."""
    make_tasks(tmp_path, "a")
    job = tmp_path / "job.toml"
    job.write_text(
        'path = "tasks"\njobs_dir = "jobs"\nbackend = "fake"\nagent = "nop"\nray = "local"\n'
    )
    env = os.environ | {"TRIALBOX_REGISTRY": "registry.example.test:5000"}
    env.pop("TRIALBOX_RAY", None)

    ran = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", "-c", str(job), "--json"],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip

    assert ran.returncode == 0, ran.stderr
    job_result = json.loads(ran.stdout)
    (trial,) = job_result["trials"]
    assert trial["status"] == "success"
    assert trial["node"] is not None and trial["node"]["engine"] == "fake"  # ran on the node
    saved = json.loads((Path(job_result["job_dir"]) / "config.json").read_text())
    backend = RayBackendConfig.model_validate(saved["trial_config"]["backend"])
    assert (backend.address, backend.registry) == ("local", "registry.example.test:5000")
    assert (saved["options"]["ray"], saved["options"]["registry"]) == (
        "local", "registry.example.test:5000",
    )  # fmt: skip


@pytest.mark.parametrize("command", ["prewarm", "serve", "reap"])
def test_the_other_commands_go_to_the_cluster_the_environment_names(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = [str(tmp_path)] if command == "prewarm" else []
    monkeypatch.setenv("TRIALBOX_RAY", "env-head:6379")
    monkeypatch.setenv("TRIALBOX_REGISTRY", "env.test:5000")
    from_env = build_parser().parse_args([command, *path])
    flags = build_parser().parse_args([command, *path, "--ray", "auto"])
    assert (from_env.ray, flags.ray) == ("env-head:6379", "auto")  # the command line wins
    cluster = on_cluster(config_of(from_env) if command != "reap" else TrialConfig(), from_env)
    assert isinstance(cluster.backend, RayBackendConfig)
    assert cluster.backend.address == "env-head:6379"
    if command != "reap":
        assert cluster.backend.registry == "env.test:5000"

    monkeypatch.delenv("TRIALBOX_RAY")  # the registry variable alone: local, as if unset
    alone = build_parser().parse_args([command, *path])
    assert on_cluster(TrialConfig(), alone).backend.type == "docker"
