"""A task's prebuilt `docker_image` (Harbor's): the local image, else pulled once, else the
task's environment/Dockerfile.

Apart from the builder because getting an image someone else built is not building one: a pull
has its own bound (PULL_TIMEOUT_SEC), is made once per reference however many tasks ask, and a
failed one is remembered (PULL_FAILURE_MEMORY_SEC) instead of tried again by every trial; an
image with no usable CPython is used as it is, under a tag of ours, with nothing built. What a
failed pull means (the task's fault or not) is `pulls.py`'s.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from orchestrator.backends.docker import api as docker_api
from orchestrator.backends.docker.build import TASK_REPO, BuildPlan, image_exists
from orchestrator.backends.docker.pulls import (
    PULL_FAILURE_MEMORY_SEC,
    PULL_TIMEOUT_SEC,
    _pull_blocking,
    _PullFailed,
    _tag_blocking,
)
from orchestrator.common.errors import SandboxError
from orchestrator.common.offload import run_blocking
from orchestrator.tasks.task import Task

if TYPE_CHECKING:
    from orchestrator.backends.docker.images import ImageBuilder


class PrebuiltImages:
    """The prebuilt images of one `ImageBuilder`, planned with its probes, single flights and
    Dockerfile plans; it keeps the pulls under way and the failed ones."""

    def __init__(self, builder: ImageBuilder) -> None:
        self._builder = builder
        self._failures: dict[str, tuple[float, str]] = {}  # ref -> (retry after, reason)
        self._running: dict[str, asyncio.Future[str]] = {}  # ref -> its pull, until it ends

    async def plan(self, task: Task, image: str, base_image_map: Mapping[str, str]) -> BuildPlan:
        """The plan of a task whose `docker_image` is `image` (mapped through
        `base_image_map`): the image when it is local or can be pulled; when it cannot,
        environment/Dockerfile, with a warning, or, without one, an error saying how to get
        the image."""
        ref = base_image_map.get(image, image)
        named = image
        if ref != image:
            named += f" (mapped to {ref})"
        try:
            image_id = await self.local_or_pulled(ref)
        except _PullFailed as failed:
            if not await run_blocking(task.dockerfile.is_file):
                raise failed.error(task, named, ref) from None
            plan = await self._builder.plan_dockerfile(task, base_image_map)
            warning = (
                f"docker_image {named} could not be pulled ({failed.reason}); "
                "built environment/Dockerfile instead"
            )
            return replace(plan, warnings=(*plan.warnings, warning))
        return await self._plan_local(task, ref, image_id)

    async def local_or_pulled(self, ref: str) -> str:
        """The id of the local image `ref`, pulling it when missing: once per reference
        however many tasks ask at the same time, bounded by PULL_TIMEOUT_SEC, and a failure
        is remembered for PULL_FAILURE_MEMORY_SEC. `_PullFailed` when it cannot be had."""
        try:
            image_id = await self._builder.local_id(ref)
        except SandboxError as exc:
            if "invalid reference format" in str(exc):
                raise _PullFailed(str(exc)) from exc
            raise
        if image_id is not None:
            return image_id
        failed = self._failures.get(ref)
        if failed is not None and time.monotonic() < failed[0]:
            raise _PullFailed(failed[1])
        pull = self._builder.single_flight(f"pull {ref}", lambda: self._pull(ref))
        return await asyncio.shield(pull)

    async def _pull(self, ref: str) -> str:
        try:
            earlier = self._running.get(ref)
            if earlier is not None:  # a pull that overran its bound still runs: not two
                await asyncio.wait({earlier}, timeout=PULL_TIMEOUT_SEC)
                if not earlier.done():
                    raise _PullFailed(f"an earlier pull of {ref} is still running")
            image_id = await self._builder.local_id(ref)
            if image_id is not None:
                return image_id
            pulling = asyncio.ensure_future(
                docker_api.call_once(f"pull {ref}", _pull_blocking, ref)
            )
            self._running[ref] = pulling
            pulling.add_done_callback(lambda _: self._running.pop(ref, None))
            done, _ = await asyncio.wait({pulling}, timeout=PULL_TIMEOUT_SEC)
            if not done:
                raise _PullFailed(f"no answer within {PULL_TIMEOUT_SEC:g} s")
            try:
                return pulling.result()
            except SandboxError as exc:  # the engine itself failed
                raise _PullFailed(str(exc)) from exc
        except _PullFailed as failed:
            self._failures[ref] = (time.monotonic() + PULL_FAILURE_MEMORY_SEC, failed.reason)
            raise

    async def _plan_local(self, task: Task, ref: str, image_id: str) -> BuildPlan:
        """A local prebuilt image: used as it is when it has no usable CPython or when its
        sandboxes mount the venv (a local engine: `ImageBuilder.mount_plan`), else with the
        venv copied in.

        Used as is, nothing is built: the plan's tag is `trialbox-env:<hash of the image id>`,
        put on that image by `tag_as_is` (a tag, no layer, milliseconds). Not the reference
        itself nor the bare id: a tag of trialbox's own repository keeps every image a trial or
        prewarm reports in one namespace, so whoever removes a reported tag (tests do, forced)
        only untags the user's image instead of deleting it; it pins the exact image that was
        probed (a reference can be moved to another image after the probe); tasks naming one
        image by different references share one tag, so prewarm counts it once. Containers are
        found and reaped by their labels, never by image, so leftovers are unaffected.
        """
        env = task.config.environment
        # The id is part of the hash (a moved reference is a new image) and the comment line
        # keeps this way's tags apart from a Dockerfile that says the same FROM.
        text = f"FROM {ref}\n# trialbox: the prebuilt docker_image {image_id}\n"
        python, known = await self._builder.probe(image_id, ref)
        unusable = known and (python is None or not python.usable)
        if unusable or await self._builder.mounts_runtime():
            digest = hashlib.sha256(f"docker_image\0{image_id}".encode()).hexdigest()
            as_is = BuildPlan(
                tag=f"{TASK_REPO}:{digest[:20]}", timeout_sec=env.build_timeout_sec,
                context={"Dockerfile": (text.encode(), 0o644)}, runtime="absent",
                image_id=image_id,
            )  # fmt: skip
            if unusable:
                return as_is
            usable = python if known else None
            return self._builder.mount_plan(replace(as_is, runtime="unknown"), usable, image_id)
        return await self._builder.finish_plan(task, text, text, {}, python if known else None)


async def tag_as_is(image_id: str, tag: str, task_name: str) -> None:
    """A prebuilt image used as is (a plan's `image_id`): only our tag is put on it."""
    if not await image_exists(tag):
        await docker_api.call(f"tag the image of {task_name}", _tag_blocking, image_id, tag)
