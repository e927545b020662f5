"""Task images shared through a registry: built once, pushed, pulled elsewhere by their tag.

A task image's tag is a content hash of every build input, so the tag alone says whether an
image in the registry is the one a node needs. A node that lacks an image pulls it before
building; one that built it pushes it. Under the registry's name the image is only passing
through: it is tagged with its local name (`trialbox-env:<hash>`) and the registry's name
is removed again, so the engine holds the same tags it would hold without a registry.

Neither a failed pull nor a failed push fails a trial: without the image in the registry
the node builds it itself, and an image that could not be pushed is still there locally.
"""

from __future__ import annotations

import logging

import docker.errors

from orchestrator.backends.docker import api as docker_api
from orchestrator.common.errors import SandboxError

log = logging.getLogger(__name__)

# How the engine words "the registry has no such image", as opposed to the network's failures.
_MISSING = ("not found", "manifest unknown", "does not exist")


class Registry:
    """A registry at `address` (HOST:PORT, optionally /PREFIX), e.g. 127.0.0.1:5000."""

    def __init__(self, address: str) -> None:
        self.address = address.strip().rstrip("/")
        if not self.address or "://" in self.address:
            raise ValueError(
                f"registry {address!r}: expected HOST:PORT[/PREFIX] (no scheme), e.g. "
                "127.0.0.1:5000"
            )

    def remote(self, tag: str) -> str:
        """The image's name in the registry."""
        return f"{self.address}/{tag}"

    async def pull(self, tag: str) -> bool:
        """Fetch `tag` from the registry and give it its local name; False when the registry
        does not have it or cannot be reached (then the caller builds it)."""
        try:
            return await docker_api.call_once(f"pull {self.remote(tag)}", self._pull_blocking, tag)
        except SandboxError as exc:
            log.warning("registry %s: pulling %s failed; building it: %s", self.address, tag, exc)
            return False

    async def push(self, tag: str) -> str | None:
        """Push the local image `tag`; a warning when that failed (the image stays local)."""
        try:
            await docker_api.call_once(f"push {self.remote(tag)}", self._push_blocking, tag)
        except SandboxError as exc:
            return f"image {tag} was built but not pushed to the registry {self.address}: {exc}"
        return None

    def _pull_blocking(self, tag: str) -> bool:
        api = docker_api.docker_client().api
        remote = self.remote(tag)
        repository, _, name = remote.rpartition(":")
        try:
            for chunk in api.pull(repository, tag=name, stream=True, decode=True):
                if "error" in chunk:
                    return self._refused(str(chunk["error"]))
        except docker.errors.APIError as exc:
            return self._refused(str(exc.explanation or exc))
        local_repo, _, local_name = tag.rpartition(":")
        api.tag(remote, local_repo, local_name)
        api.remove_image(remote)  # only the registry's name goes: the image keeps its tag
        return True

    def _refused(self, why: str) -> bool:
        if any(word in why.lower() for word in _MISSING):
            return False
        raise SandboxError(why.strip())

    def _push_blocking(self, tag: str) -> None:
        api = docker_api.docker_client().api
        remote = self.remote(tag)
        repository, _, name = remote.rpartition(":")
        api.tag(tag, repository, name)
        try:
            for chunk in api.push(repository, tag=name, stream=True, decode=True):
                if "error" in chunk:
                    raise SandboxError(str(chunk["error"]).strip())
        except docker.errors.APIError as exc:
            raise SandboxError(str(exc.explanation or exc)) from exc
        finally:
            api.remove_image(remote)
