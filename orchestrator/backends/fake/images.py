"""Fake task images: a content-hash tag, and the two things of a Dockerfile a sandbox needs.

Nothing is built. The tag hashes what the Docker backend's tag hashes as far as the fake can
tell (every file of `environment/`, or a prebuilt `docker_image`; the base-image map), so
tasks that would share an image share a tag here too. From the Dockerfile's final stage the fake
keeps `WORKDIR` (an exec's default folder) and `USER` (its default user); everything else a
Dockerfile does (installing packages, copying files in) is not modelled.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.common.errors import TaskError
from orchestrator.common.offload import run_blocking
from orchestrator.tasks.task import Task
from orchestrator.tasks.tree import read_tree

REPO = "trialbox-fake"
_INSTRUCTION = re.compile(r"^\s*(?P<word>FROM|WORKDIR|USER)\s+(?P<arg>\S+)", re.IGNORECASE)


@dataclass(frozen=True)
class FakeImage:
    """A fake image plan: its tag and what a sandbox made from it starts with."""

    tag: str
    workdir: str = "/"
    user: str = ""  # "" is root, as in an image without USER


def _read(task: Task, base_image_map: Mapping[str, str], force_build: bool) -> FakeImage:
    env = task.config.environment
    context = read_tree(task.environment_dir) if task.environment_dir.is_dir() else {}
    if force_build and "Dockerfile" not in context:
        raise TaskError(
            f"{task.dockerfile}: missing; --force-build (TrialConfig.force_build) builds "
            "environment/Dockerfile instead of the prebuilt docker_image: add one, or run "
            "without it"
        )
    prebuilt = env.docker_image is not None and not force_build
    digest = hashlib.sha256()
    if prebuilt:  # the image as named; environment/ is not its build context
        named = ["docker_image", env.docker_image, sorted(base_image_map.items())]
        digest.update(json.dumps(named).encode())
        return FakeImage(f"{REPO}:{digest.hexdigest()[:20]}")
    digest.update(json.dumps(["Dockerfile", sorted(base_image_map.items())]).encode())
    for name in sorted(context):
        data, mode = context[name]
        digest.update(f"\0{name}\0{mode:o}\0{len(data)}\0".encode())
        digest.update(data)
    workdir, user = "/", ""
    dockerfile = context.get("Dockerfile", (b"", 0))[0].decode(errors="replace")
    for line in dockerfile.splitlines():
        found = _INSTRUCTION.match(line)
        if found is None:
            continue
        word, arg = found["word"].upper(), found["arg"]
        if word == "FROM":
            workdir, user = "/", ""  # a new stage starts from its own base
        elif word == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, arg))
        else:
            user = arg
    return FakeImage(f"{REPO}:{digest.hexdigest()[:20]}", workdir, user)


async def plan_image(
    task: Task, base_image_map: Mapping[str, str], *, force_build: bool = False
) -> FakeImage:
    """The task's fake image; reading the folder happens off the loop. A prebuilt
    `docker_image` is always "there"; `force_build` uses environment/Dockerfile instead (a
    `TaskError` without one), under another tag, as the Docker backend does."""
    return await run_blocking(_read, task, base_image_map, force_build)
