"""Which images the engine holds: what a base-image mapping's local side is checked against.

An image counts as held when the engine can inspect it by that reference (a repository:tag,
a bare repository meaning :latest, an id or a digest), exactly what a build's FROM would use
without pulling.

`local_images` answers `Backend.local_images`: the references the engine lacks, and every
repository:tag it holds (for a suggestion).
"""

from __future__ import annotations

from collections.abc import Sequence

import docker.errors

from orchestrator.backends.docker import api as docker_api
from orchestrator.sandbox import LocalImages


def local_images_blocking(refs: Sequence[str]) -> LocalImages:
    """Which of `refs` the engine lacks, and every repository:tag it holds."""
    api = docker_api.docker_client().api
    missing = []
    for ref in refs:
        try:
            api.inspect_image(ref)
        except docker.errors.NotFound:
            missing.append(ref)
        except docker.errors.APIError as exc:
            if exc.status_code != 400:  # 400: not a valid reference, so no such image
                raise
            missing.append(ref)
    names: set[str] = set()
    if missing:
        for image in api.images():
            names.update(t for t in image.get("RepoTags") or () if t != "<none>:<none>")
    return LocalImages(missing=missing, names=sorted(names))


async def local_images(refs: Sequence[str]) -> LocalImages:
    return await docker_api.call("list the engine's images", local_images_blocking, refs)
