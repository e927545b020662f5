"""What `trialbox run` and `trialbox reap` print and do, read from their real output."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from orchestrator import TrialConfig, run_trial_sync
from tests.conftest import EXAMPLES, TEST_OWNER, write_task
from tests.scenarios.helpers import MAPPING, row_of, trialbox

pytestmark = pytest.mark.docker


def containers_of(client: docker.DockerClient, owner: str) -> list:
    return client.containers.list(
        ignore_removed=True,
        all=True,
        filters={"label": ["trialbox.trial", f"trialbox.owner={owner}"]},
    )


@pytest.fixture
def two_owners(docker_client: docker.DockerClient) -> Iterator[tuple[str, str]]:
    """Two owners of this session that the leak check does not know: removed here, always."""
    owners = (f"{TEST_OWNER}-reaped", f"{TEST_OWNER}-spared")
    yield owners
    for owner in owners:
        for container in containers_of(docker_client, owner):
            try:
                container.remove(force=True, v=True)
            except docker.errors.NotFound:
                pass


def test_reap_by_owner_lists_and_removes_that_owners_leftover_and_spares_another_owners(
    config: TrialConfig, docker_client: docker.DockerClient, two_owners: tuple[str, str]
) -> None:
    reaped_owner, spared_owner = two_owners
    kept: dict[str, str] = {}
    for owner in two_owners:
        left = config.model_copy(update={"owner": owner, "keep_containers": True})
        result = run_trial_sync(EXAMPLES / "hello-oracle", "nop", config=left)
        assert result.error is None, result.error
        [container] = containers_of(docker_client, owner)
        kept[owner] = container.name

    done = trialbox("reap", "--owner", reaped_owner)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 trial container(s)" in done.stdout
    row = row_of(done.stdout, kept[reaped_owner])
    assert row[0] == kept[reaped_owner] and row[2] == reaped_owner
    assert kept[spared_owner] not in done.stdout
    assert "removed 1 container(s)" in done.stdout
    assert containers_of(docker_client, reaped_owner) == []
    assert [c.name for c in containers_of(docker_client, spared_owner)] == [kept[spared_owner]]


def test_run_summary_table_shows_each_tasks_status_and_reward(
    docker_ready: object, tmp_path: Path
) -> None:
    dataset = tmp_path / "dataset"
    write_task(dataset, "quarter", test_sh="#!/bin/sh\necho 0.25 > /logs/verifier/reward.txt\n")
    write_task(dataset, "unscored", test_sh="#!/bin/sh\necho 'no reward written'\n")

    done = trialbox(
        "run", str(dataset), "--agent", "nop", "--jobs-dir", str(tmp_path / "jobs"), *MAPPING
    )

    assert done.returncode == 0, done.stdout + done.stderr
    _trial, status, reward, agent, error, _seconds = row_of(done.stdout, "quarter__")
    assert (status, reward, agent, error) == ("success", "0.25", "exited (0)", "")
    _trial, status, reward, agent, error, _seconds = row_of(done.stdout, "unscored__")
    assert (status, reward, agent) == ("failure", "-", "exited (0)")
    assert error.startswith("validation: ") and "reward" in error
    assert "2 trials, 1 failure, 1 success, mean reward 0.125" in done.stdout
