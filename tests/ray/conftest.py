"""The cluster the `ray` tests run on, all on this machine: a Ray cluster of two nodes made
with Ray's own test utilities (`ray.cluster_utils.Cluster`), whose head drives the system's
Docker engine and whose second node drives a second `dockerd` started here, plus the local
registry that `scripts/ensure-registry.sh` starts. Everything binds to 127.0.0.1.

Each test leaves no trial container on either engine (checked after it); at the end the
cluster and the second engine are stopped, its state removed, and the images the session
pushed to the registry deleted. Ray is imported only by these fixtures, so the rest of the
suite runs without it.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator import TrialConfig
from orchestrator.executors.node_trial import SCRATCH_ENV, close_node_gateway
from orchestrator.sandbox.backend_config import RayBackendConfig
from tests.conftest import (
    BASE_IMAGE,
    BASE_IMAGE_MAP,
    TEST_OWNER,
    our_containers,
    remove_trial_container,
)
from tests.ray.second_dockerd import SecondDockerd

# Ray's own switch to the loopback address (read when Ray is imported): the cluster, the
# drivers the tests start and their workers all bind to 127.0.0.1.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

REGISTRY = os.environ.get("TRIALBOX_REGISTRY", "127.0.0.1:5000")
NODE_CPUS = 2
NODE_MEMORY = 4 * 1024**3
# A trial that holds a whole node: two at once land on two nodes, whatever Ray prefers.
WHOLE_NODE_TOML = "[environment]\ncpus = 2\nmemory_mb = 512\n"
HALF_NODE_TOML = "[environment]\ncpus = 1\nmemory_mb = 512\n"


def _registry_tags(repository: str = "trialbox-env") -> set[str]:
    try:
        url = f"http://{REGISTRY}/v2/{repository}/tags/list"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return set(json.load(answer).get("tags") or [])
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return set()
        raise


def registry_has(tag: str) -> bool:
    repository, _, name = tag.rpartition(":")
    return name in _registry_tags(repository)


def _owner_of(repository: str, name: str) -> str | None:
    """The `trialbox.owner` label of a pushed image (its config blob), or None."""
    accept = "application/vnd.docker.distribution.manifest.v2+json"
    url = f"http://{REGISTRY}/v2/{repository}/manifests/{name}"
    try:
        request = urllib.request.Request(url, headers={"Accept": accept})
        with urllib.request.urlopen(request, timeout=10) as r:
            config = json.load(r)["config"]["digest"]
        blob = f"http://{REGISTRY}/v2/{repository}/blobs/{config}"
        with urllib.request.urlopen(blob, timeout=10) as r:
            labels = json.load(r).get("config", {}).get("Labels") or {}
    except (OSError, KeyError, ValueError):
        return None
    owner = labels.get("trialbox.owner")
    return owner if isinstance(owner, str) else None


def _delete_from_registry(repository: str, name: str) -> None:
    url = f"http://{REGISTRY}/v2/{repository}/manifests/{name}"
    accept = "application/vnd.docker.distribution.manifest.v2+json"
    head = urllib.request.Request(url, method="HEAD", headers={"Accept": accept})
    with urllib.request.urlopen(head, timeout=10) as r:
        digest = r.headers["Docker-Content-Digest"]
    delete = urllib.request.Request(f"http://{REGISTRY}/v2/{repository}/manifests/{digest}")
    delete.method = "DELETE"
    urllib.request.urlopen(delete, timeout=10).close()


@pytest.fixture(autouse=True)
async def _node_gateway_closed() -> AsyncIterator[None]:
    """Placed trials without Ray run on the test's own loop, whose node gateway
    (`executors/node_trial.py`, one per process and loop) closes with the test."""
    yield
    await close_node_gateway()


@pytest.fixture(scope="session")
def registry() -> Iterator[str]:
    """The local registry answers; the tags this session pushed are deleted at its end."""
    try:
        before = _registry_tags()
    except OSError as exc:
        pytest.fail(
            f"no registry answers on {REGISTRY} ({exc}); start it with "
            "scripts/ensure-registry.sh and rerun",
            pytrace=False,
        )
    yield REGISTRY
    for name in _registry_tags() - before:
        # Another test run sharing the registry pushes too: delete only what this one built.
        if _owner_of("trialbox-env", name) == TEST_OWNER:
            _delete_from_registry("trialbox-env", name)


@pytest.fixture(scope="session")
def second_engine(docker_ready: docker.DockerClient) -> Iterator[tuple[str, docker.DockerClient]]:
    """(DOCKER_HOST, client) of a second dockerd holding the base image; stopped at the end."""
    system_bridge = Path("/sys/class/net/docker0")
    had_bridge = system_bridge.exists()
    engine = SecondDockerd()
    try:
        client = engine.start()
        engine.load_image(BASE_IMAGE)
        yield engine.host, client
        client.close()
    finally:
        engine.stop()
    assert not engine.root.exists(), f"the second dockerd's state was left at {engine.root}"
    assert system_bridge.exists() or not had_bridge, "the system engine's docker0 went"


@dataclass
class TwoEngines:
    """The cluster under test and what its nodes drive."""

    cluster: Any  # ray.cluster_utils.Cluster
    address: str
    first: docker.DockerClient
    second: docker.DockerClient
    first_host: str
    second_host: str
    scratch: Path

    def config(self, tmp_path: Path, **changes: Any) -> TrialConfig:
        """Trials on this cluster, through the registry, without a network."""
        backend = RayBackendConfig(registry=REGISTRY, health_interval_sec=1.0)
        fields: dict[str, Any] = {
            "jobs_dir": tmp_path / "jobs", "owner": TEST_OWNER, "backend": backend,
            "base_image_map": BASE_IMAGE_MAP, "no_internet": True,
        }  # fmt: skip
        return TrialConfig(**(fields | changes))

    def add_node(self, docker_host: str) -> Any:
        """One more node driving `docker_host` (removed by the test that added it)."""
        return self.cluster.add_node(
            num_cpus=NODE_CPUS, memory=NODE_MEMORY, env_vars=self._env(docker_host)
        )

    def _env(self, docker_host: str) -> dict[str, str]:
        return {"DOCKER_HOST": docker_host, SCRATCH_ENV: str(self.scratch)}


@pytest.fixture(scope="session")
def two_engines(
    docker_ready: docker.DockerClient,
    second_engine: tuple[str, docker.DockerClient],
    registry: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[TwoEngines]:
    """A two-node Ray cluster: the head drives the system's engine, the other node the
    second dockerd. Ray binds to 127.0.0.1 only."""
    import ray
    from ray.cluster_utils import Cluster

    first_host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    second_host, second = second_engine
    scratch = tmp_path_factory.mktemp("node-scratch")
    cluster = Cluster()
    engines = TwoEngines(cluster, "", docker_ready, second, first_host, second_host, scratch)
    try:
        cluster.add_node(num_cpus=NODE_CPUS, memory=NODE_MEMORY, env_vars=engines._env(first_host))
        engines.add_node(second_host)
        engines.address = cluster.address
        ray.init(address=cluster.address, namespace="trialbox-tests", log_to_driver=False)
        yield engines
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(autouse=True)
def nothing_left_on_the_second_engine(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each `ray` test: no trial container of ours on the second engine either (the
    first is checked by the suite's own leak check)."""
    if request.node.get_closest_marker("ray") is None:
        yield
        return
    _, client = request.getfixturevalue("second_engine")
    yield
    left = our_containers(client)
    for container in left:
        remove_trial_container(container)
    assert not left, f"trial containers were left on the second engine: {[c.name for c in left]}"
