"""Task images: content-hashed tags, the shared tools image, and single-flight builds.

A task image's tag is a hash of every build input (the patched Dockerfile, which names the
tools image and the base-image mapping, and every file of the build context), so identical
tasks share one image, an unchanged task is never rebuilt, and concurrent trials that need
the same image wait for one build instead of starting their own.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import docker.errors

from orchestrator.backends.docker import api as docker_api
from orchestrator.backends.docker.dockerfile import (
    final_stage_image,
    map_base_images,
    patch_dockerfile,
)
from orchestrator.backends.docker.venv_layer import (
    CONTEXT_DIR,
    ImagePython,
    copy_block,
    probe_blocking,
    venv_files,
)
from orchestrator.backends.docker.wheelhouse import ensure_wheelhouse, runtime_wheel
from orchestrator.common.archive import tar_of_files
from orchestrator.common.errors import (
    ImageBuildError,
    SandboxNotFoundError,
    TaskBuildError,
    TaskError,
)
from orchestrator.common.offload import run_blocking
from orchestrator.sandbox import ImageOutcome
from orchestrator.tasks.task import Task
from orchestrator.tasks.tree import read_tree

TOOLS_REPO = "trialbox-tools"
TASK_REPO = "trialbox-env"
LOG_TAIL_LINES = 40
LOG_CAP_CHARS = 4 * 1024 * 1024
_TOOLS_DOCKERFILE = b"FROM scratch\nCOPY uv /uv\nCOPY wheels /wheels\n"
T = TypeVar("T")


def _digest(files: Mapping[str, tuple[bytes, int]]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        data, mode = files[name]
        h.update(f"{name}\0{mode & 0o111:o}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


@dataclass(frozen=True)
class BuildPlan:
    """Everything needed to build (or find) one task image. Internal: not a contract, and
    not validated, since a context may be large."""

    tag: str
    timeout_sec: float
    context: Mapping[str, tuple[bytes, int]] = field(repr=False)
    python: ImagePython | None = None  # the image's CPython, when the venv is copied in

    @property
    def dockerfile(self) -> str:
        return self.context["Dockerfile"][0].decode()


# Errors of the task's own Dockerfile, as the engine words them; anything else (the engine,
# the network, a missing base image) is not the task's fault.
_TASK_FAULTS = ("returned a non-zero code", "dockerfile parse error", "unknown instruction")


def _build_failed(plan: BuildPlan, why: str, lines: list[str]) -> ImageBuildError:
    tail = "\n".join(lines[-LOG_TAIL_LINES:])
    full = "\n".join(lines)[-LOG_CAP_CHARS:]
    if any(fault in why.lower() for fault in _TASK_FAULTS):
        return TaskBuildError(f"building {plan.tag}: {why}", tail, log=full)
    return ImageBuildError(f"building {plan.tag} failed: {why}", tail, log=full)


def _build_blocking(plan: BuildPlan, labels: dict[str, str]) -> None:
    api = docker_api.docker_client().api
    lines: list[str] = []
    stream = api.build(
        fileobj=io.BytesIO(tar_of_files(plan.context)),
        custom_context=True,
        tag=plan.tag,
        rm=True,
        forcerm=True,
        pull=False,
        decode=True,
        labels=labels or None,
        timeout=int(plan.timeout_sec) + 30,
    )
    for chunk in stream:
        if "stream" in chunk:
            lines.extend(line for line in chunk["stream"].splitlines() if line.strip())
        if "error" in chunk:
            lines.append(chunk["error"].strip())
            raise _build_failed(plan, chunk["error"].strip(), lines)
    if not _image_exists_blocking(plan.tag):
        raise _build_failed(plan, "the build ended without an image", lines)


def _image_exists_blocking(tag: str) -> bool:
    try:
        docker_api.docker_client().api.inspect_image(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


async def image_exists(tag: str) -> bool:
    try:
        return await docker_api.call(f"inspect image {tag}", _image_exists_blocking, tag)
    except SandboxNotFoundError:
        return False


def _tools_context(arch: str) -> dict[str, tuple[bytes, int]]:
    home = ensure_wheelhouse({"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch))
    files = {
        "Dockerfile": (_TOOLS_DOCKERFILE, 0o644),
        "uv": ((home / "uv").read_bytes(), 0o755),
    }
    for wheel in sorted((home / "wheels").glob("*.whl")):
        files[f"wheels/{wheel.name}"] = (wheel.read_bytes(), 0o644)
    name, data = runtime_wheel()
    files[f"wheels/{name}"] = (data, 0o644)
    return files


def _with_tag(repo: str, context: dict[str, tuple[bytes, int]]) -> tuple[str, dict]:
    return f"{repo}:{_digest(context)[:20]}", context


class ImageBuilder:
    """Builds task images; one instance per process is enough (see `default_builder`).

    In-flight work is kept per event loop (a builder may outlive a loop, as the process-wide
    one does across `asyncio.run` calls), so no asyncio object is shared between loops.
    """

    def __init__(self) -> None:
        self._tools_tag: str | None = None
        self._arch_name: str | None = None
        self._pythons: dict[str, ImagePython | None] = {}
        self._users: dict[str, str] = {}
        self._inflight: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Future[object]]
        ] = weakref.WeakKeyDictionary()
        self._running: dict[str, asyncio.Future[None]] = {}

    def _single_flight(self, key: str, make: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
        """One future per key and loop: callers that come while it runs share it."""
        inflight = self._inflight.setdefault(asyncio.get_running_loop(), {})
        future = inflight.get(key)
        if future is None:
            future = asyncio.ensure_future(make())
            inflight[key] = future
            future.add_done_callback(lambda _: inflight.pop(key, None))
        return future  # type: ignore[return-value]

    # -- the tools image: uv + wheelhouse, FROM scratch, built once ---------------------------

    async def _make_tools_image(self) -> str:
        client = docker_api.docker_client()
        info = await docker_api.call("ask the engine for its architecture", client.info)
        arch = info.get("Architecture", "x86_64")
        tag, context = await run_blocking(lambda: _with_tag(TOOLS_REPO, _tools_context(arch)))
        if not await image_exists(tag):
            plan = BuildPlan(tag=tag, timeout_sec=300, context=context)
            await docker_api.call_once(
                "build the tools image", _build_blocking, plan, {"trialbox.tools": "1"}
            )
        self._tools_tag = tag
        return tag

    async def tools_image(self) -> str:
        """The tag of the local tools image, building it when missing."""
        if self._tools_tag is not None:
            return self._tools_tag
        return await asyncio.shield(self._single_flight("tools", self._make_tools_image))

    # -- task images --------------------------------------------------------------------------

    async def _image_users(self, dockerfile: str) -> dict[str, str]:
        """The default USER of the external image the final stage comes from, if it is local.

        Cached per image reference for the life of the builder.
        """
        image = final_stage_image(dockerfile)
        if image is None:
            return {}
        if image not in self._users:
            try:
                attrs = await docker_api.call(
                    f"inspect image {image}", docker_api.docker_client().api.inspect_image, image
                )
                self._users[image] = (attrs.get("Config") or {}).get("User") or ""
            except SandboxNotFoundError:
                return {}  # not local: the build will pull it or fail, saying so
        return {image: self._users[image]} if self._users[image] else {}

    async def _arch(self) -> str:
        if self._arch_name is None:
            client = docker_api.docker_client()
            info = await docker_api.call("ask the engine for its architecture", client.info)
            arch = info.get("Architecture", "x86_64")
            self._arch_name = {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
        return self._arch_name

    async def _image_python(self, image: str | None) -> ImagePython | None:
        """The CPython of a local base image, probed once per image id (None: unknown)."""
        if image is None:
            return None
        try:
            attrs = await docker_api.call(
                f"inspect image {image}", docker_api.docker_client().api.inspect_image, image
            )
        except SandboxNotFoundError:
            return None  # not local: the general layer, which fails clearly if it must
        image_id = attrs["Id"]
        if image_id not in self._pythons:
            self._pythons[image_id] = await docker_api.call_once(
                f"probe the python3 of {image}", probe_blocking, image_id
            )
        return self._pythons[image_id]

    async def plan(self, task: Task, base_image_map: Mapping[str, str]) -> BuildPlan:
        """The patched Dockerfile, context and content-hash tag of a task's image: the venv
        copied in when the base image's CPython is known, else the general runtime layer."""
        env = task.config.environment
        if env.docker_image is not None:
            text = f"FROM {env.docker_image}\n"
            context: dict[str, tuple[bytes, int]] = {}
        else:
            try:
                text = await run_blocking(task.dockerfile.read_text, encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise TaskError(f"{task.dockerfile}: cannot be read: {exc}") from exc
            context = await run_blocking(read_tree, task.environment_dir)
        mapped = map_base_images(text, base_image_map)
        python = await self._image_python(final_stage_image(mapped))
        if (
            python is not None
            and python.usable
            and CONTEXT_DIR not in {name.split("/")[0] for name in context}
        ):
            venv = await run_blocking(venv_files, python, await self._arch())
            context.update(venv)
            dockerfile = mapped.rstrip("\n") + "\n" + copy_block()
        else:
            python = None
            users = await self._image_users(mapped)
            dockerfile = patch_dockerfile(text, await self.tools_image(), base_image_map, users)
        context["Dockerfile"] = (dockerfile.encode(), 0o644)
        tag, context = await run_blocking(_with_tag, TASK_REPO, context)
        return BuildPlan(tag=tag, timeout_sec=env.build_timeout_sec, context=context, python=python)

    async def _build(self, plan: BuildPlan, task_name: str) -> ImageOutcome:
        started = time.monotonic()
        earlier = self._running.get(plan.tag)
        if earlier is not None:  # a build that overran its timeout still runs: not two at once
            await asyncio.wait({earlier})
        if await image_exists(plan.tag):
            return ImageOutcome(tag=plan.tag, status="cached", seconds=time.monotonic() - started)
        building = asyncio.ensure_future(
            docker_api.call_once(
                f"build the image of {task_name}",
                # No labels: the builder makes each one a step of its own (~0.8 s here);
                # task images are known by their repository, TASK_REPO.
                _build_blocking, plan, {},
            )
        )  # fmt: skip
        self._running[plan.tag] = building
        building.add_done_callback(lambda _: self._running.pop(plan.tag, None))
        done, _ = await asyncio.wait({building}, timeout=plan.timeout_sec)
        if not done:
            raise ImageBuildError(
                f"building {plan.tag} for {task_name} took longer than its build_timeout_sec "
                f"({plan.timeout_sec:g} s)"
            )
        building.result()
        return ImageOutcome(tag=plan.tag, status="built", seconds=time.monotonic() - started)

    async def ensure_image(
        self,
        task: Task,
        base_image_map: Mapping[str, str] | None = None,
        *,
        plan: BuildPlan | None = None,
    ) -> ImageOutcome:
        """The task's image, built at most once however many trials ask at the same time.

        `plan`, when the caller made it already (prewarm does), saves reading the task again.
        """
        plan = plan or await self.plan(task, base_image_map or {})
        started = time.monotonic()
        inflight = self._inflight.get(asyncio.get_running_loop(), {})
        joined = plan.tag in inflight
        build = self._single_flight(plan.tag, lambda: self._build(plan, task.name))
        outcome = await asyncio.shield(build)
        if not joined:
            return outcome  # type: ignore[return-value]
        return ImageOutcome(tag=plan.tag, status="cached", seconds=time.monotonic() - started)


_default_builder: ImageBuilder | None = None


def default_builder() -> ImageBuilder:
    """The process-wide builder, so separate `run_trial` calls share single-flight builds."""
    global _default_builder
    if _default_builder is None:
        _default_builder = ImageBuilder()
    return _default_builder
