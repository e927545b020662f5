"""Fake task images: a content-hash tag, and the two things of a Dockerfile a sandbox needs.

Nothing is built. The tag hashes what the Docker backend's tag hashes as far as the fake can
tell (every file of `environment/`, or a prebuilt `docker_image`; the base-image map), so
tasks that would share an image share a tag here too. From the Dockerfile's final stage the
fake keeps `WORKDIR` (an exec's default folder) and `USER` (its default user); everything else
a Dockerfile does (installing packages, copying files in) is not modelled.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.common.errors import TaskError
from orchestrator.tasks.task import Task
from orchestrator.tasks.tree import read_tree

_INSTRUCTION = re.compile(r"^\s*(FROM|WORKDIR|USER)\s+(\S+)", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class FakeImage:
    """A fake image plan: its tag and what a sandbox made from it starts with."""

    tag: str
    workdir: str = "/"
    user: str = ""  # "" is root, as in an image without USER


def plan_image(task: Task, base_image_map: Mapping[str, str], force_build: bool) -> FakeImage:
    """The task's fake image (blocking: it reads the folder). A prebuilt `docker_image` is
    always "there"; `force_build` uses environment/Dockerfile instead (a `TaskError` without
    one), under another tag, as the Docker backend does."""
    prebuilt = task.config.environment.docker_image
    context = read_tree(task.environment_dir) if task.environment_dir.is_dir() else {}
    if force_build and "Dockerfile" not in context:
        raise TaskError(
            f"{task.dockerfile}: missing; --force-build (TrialConfig.force_build) builds "
            "environment/Dockerfile instead of the prebuilt docker_image: add one, or run "
            "without it"
        )
    if prebuilt is not None and not force_build:  # environment/ is not its build context
        named = json.dumps(["docker_image", prebuilt, sorted(base_image_map.items())])
        return FakeImage(f"trialbox-fake:{hashlib.sha256(named.encode()).hexdigest()[:20]}")
    digest = hashlib.sha256(json.dumps(["Dockerfile", sorted(base_image_map.items())]).encode())
    for name, (data, mode) in sorted(context.items()):
        digest.update(f"\0{name}\0{mode:o}\0{len(data)}\0".encode() + data)
    workdir, user = "/", ""
    dockerfile = context.get("Dockerfile", (b"", 0))[0].decode(errors="replace")
    for word, arg in _INSTRUCTION.findall(dockerfile):
        if word.upper() == "FROM":
            workdir, user = "/", ""  # a new stage starts from its own base
        elif word.upper() == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, arg))
        else:
            user = arg
    return FakeImage(f"trialbox-fake:{digest.hexdigest()[:20]}", workdir, user)
