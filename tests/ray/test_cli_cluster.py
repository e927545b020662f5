"""`trialbox prewarm|run|reap --ray ADDRESS`: each its own driver process on the cluster.
Prewarm shows each node; run places its trials on both engines; reap searches every node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BASE_IMAGE, OFFICIAL_IMAGE, TEST_OWNER, write_task
from tests.ray.conftest import REGISTRY, WHOLE_NODE_TOML, TwoEngines
from tests.ray.test_cluster import DOCKERFILE


def trialbox(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


@pytest.mark.ray
def test_prewarm_run_and_reap_reach_every_node(two_engines: TwoEngines, tmp_path: Path) -> None:
    task = write_task(tmp_path / "tasks", "cli", dockerfile=DOCKERFILE, task_toml=WHOLE_NODE_TOML)
    cluster = ["--ray", two_engines.address]
    mapping = ["--base-image", f"{OFFICIAL_IMAGE}={BASE_IMAGE}"]

    warmed = trialbox("prewarm", str(task), *cluster, "--registry", REGISTRY, *mapping)
    assert warmed.returncode == 0, warmed.stderr + warmed.stdout
    assert warmed.stdout.count("images on 127.0.0.1") == 2, warmed.stdout
    assert two_engines.first_host in warmed.stdout and two_engines.second_host in warmed.stdout

    ran = trialbox(
        "run", str(task), "--agent", "nop", "--attempts", "2", "-n", "2", "--no-internet",
        "--jobs-dir", str(tmp_path / "jobs"), "--json", *cluster, "--registry", REGISTRY,
        *mapping,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    trials = json.loads(ran.stdout)["trials"]
    assert {t["node"]["engine"] for t in trials} == {
        two_engines.first_host,
        two_engines.second_host,
    }

    reaped = trialbox("reap", "--owner", TEST_OWNER, "--dry-run", *cluster)
    assert reaped.returncode == 0, reaped.stderr
    assert "0 trial container(s)" in reaped.stdout


def test_registry_without_a_cluster_is_refused(tmp_path: Path) -> None:
    task = write_task(tmp_path / "tasks", "alone")
    refused = trialbox("prewarm", str(task), "--registry", REGISTRY)
    assert refused.returncode == 1
    assert "--registry: only with --ray ADDRESS" in refused.stdout + refused.stderr
