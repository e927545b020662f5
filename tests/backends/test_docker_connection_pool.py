"""The engine's client keeps one connection pool for its unix socket, whatever the request's
URL (`backends/docker/api.py` `_one_pool`): the SDK's own adapter made a pool per URL, each with
every slot filled, and closed one whenever it held more than 25. Calls on many containers and
execs still answer, and reuse the one pool."""

from __future__ import annotations

import docker

from orchestrator.backends.docker.api import docker_client
from tests.conftest import BASE_IMAGE, TEST_OWNER


def test_every_url_on_the_engines_socket_shares_one_pool(
    docker_ready: docker.DockerClient,
) -> None:
    api = docker_client().api
    adapter = api.get_adapter(api.base_url)
    inspects = [f"{api.base_url}/v1.41/containers/{name}/json?size=1" for name in "abc"]
    starts = [f"{api.base_url}/v1.41/exec/{name}/start" for name in ("e1", "e2")]
    assert len({id(adapter.get_connection(url)) for url in inspects + starts}) == 1

    container = docker_client().containers.run(
        BASE_IMAGE, "sleep 60", detach=True, labels={"trialbox.owner": TEST_OWNER}
    )
    try:
        before = len(adapter.pools)
        for n in range(30):  # more execs than the SDK kept pools for
            result = container.exec_run(["sh", "-c", f"echo {n}"])
            assert (result.exit_code, result.output) == (0, f"{n}\n".encode())
        assert len(adapter.pools) == before
    finally:
        container.remove(force=True)
