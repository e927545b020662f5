"""Task images: content-hashed tags, the shared tools image, and single-flight builds.

A task image's tag is a hash of every build input (the patched Dockerfile, which names the
tools image and the base-image mapping, and every file of the build context), so identical
tasks share one image, an unchanged task is never rebuilt, and concurrent trials that need
the same image wait for one build instead of starting their own.

The runtime venv never fails a build: it is one COPY for a base image whose CPython the
builder probed (`runtime="present"`), nothing at all for a base with no usable python3
("absent"), else the general layer, which skips the venv when it finds no python3 >= 3.9
("unknown"). A prebuilt `docker_image` is used when local, else pulled once (bounded); one
that cannot be had is replaced by environment/Dockerfile with a warning, or is an error
saying how to get it. `force_build` always builds environment/Dockerfile.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

import docker.errors

from orchestrator.backends.docker import api as docker_api
from orchestrator.backends.docker.dockerfile import (
    final_stage_base,
    final_stage_image,
    final_stage_may_add_python,
    map_base_images,
    patch_dockerfile,
)
from orchestrator.backends.docker.pulls import (
    PULL_FAILURE_MEMORY_SEC,
    PULL_TIMEOUT_SEC,
    _pull_blocking,
    _PullFailed,
    _tag_blocking,
)
from orchestrator.backends.docker.venv_layer import (
    CONTEXT_DIR,
    ImagePython,
    VenvExtra,
    copy_block,
    extra_context,
    probe_blocking,
    venv_files,
)
from orchestrator.backends.docker.wheelhouse import ensure_wheelhouse, runtime_wheel
from orchestrator.common.archive import tar_of_files
from orchestrator.common.errors import (
    ImageBuildError,
    SandboxError,
    SandboxNotFoundError,
    TaskBuildError,
    TaskError,
)
from orchestrator.common.offload import run_blocking
from orchestrator.sandbox import ImageOutcome
from orchestrator.sandbox.backend import RuntimeState
from orchestrator.tasks.task import Task
from orchestrator.tasks.tree import read_tree

if TYPE_CHECKING:
    from orchestrator.backends.docker.registry import Registry

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
    runtime: RuntimeState = "unknown"  # see ImageOutcome.runtime
    warnings: tuple[str, ...] = ()
    image_id: str | None = None  # set: nothing to build, `tag` names this local image as is

    @property
    def dockerfile(self) -> str:
        return self.context["Dockerfile"][0].decode()


# Errors of the task's own Dockerfile, as the engine words them; anything else (the engine,
# the network, a missing base image) is not the task's fault.
# A Dockerfile that needs BuildKit (`COPY --chmod`, `RUN --mount`) cannot be built by the
# engine's classic builder, which trialbox drives: the task cannot be used here, say so.
_TASK_FAULTS = (
    "returned a non-zero code", "dockerfile parse error", "unknown instruction",
    "requires buildkit",
)  # fmt: skip
_BUILDKIT_HINT = (
    " (trialbox builds with the engine's classic builder: replace BuildKit-only syntax such as "
    "COPY --chmod with COPY and RUN chmod)"
)


def _build_failed(plan: BuildPlan, why: str, lines: list[str]) -> ImageBuildError:
    tail = "\n".join(lines[-LOG_TAIL_LINES:])
    full = "\n".join(lines)[-LOG_CAP_CHARS:]
    if any(fault in why.lower() for fault in _TASK_FAULTS):
        hint = _BUILDKIT_HINT if "requires buildkit" in why.lower() else ""
        return TaskBuildError(f"building {plan.tag}: {why}{hint}", tail, log=full)
    return ImageBuildError(f"building {plan.tag} failed: {why}", tail, log=full)


def _build_blocking(plan: BuildPlan, labels: dict[str, str]) -> list[str]:
    """Build the plan's image; the build log's lines."""
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
    return lines


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

    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry  # images shared through it (registry.py); None: built here
        self._tools_tag: str | None = None
        self._arch_name: str | None = None
        self._pythons: dict[str, ImagePython | None] = {}  # by image id, known answers only
        self._users: dict[str, str] = {}
        self._pull_failures: dict[str, tuple[float, str]] = {}  # ref -> (retry after, reason)
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

    async def _probe(self, image_id: str, name: str) -> tuple[ImagePython | None, bool]:
        """(the CPython of a local image, whether that is known): probed once per image id
        (and remembered on disk); unknown when the engine could not run the probe."""
        if image_id not in self._pythons:
            try:
                found = await asyncio.shield(
                    self._single_flight(
                        f"probe {image_id}",
                        lambda: docker_api.call_once(
                            f"probe the python3 of {name}", probe_blocking, image_id
                        ),
                    )
                )
            except SandboxError:
                return None, False
            self._pythons[image_id] = found
        return self._pythons[image_id], True

    async def _local_id(self, ref: str) -> str | None:
        """The id of the local image `ref` (None: not local); the engine's other answers
        (e.g. 400, an invalid reference) are raised as `SandboxError`s."""
        try:
            attrs = await docker_api.call(
                f"inspect image {ref}", docker_api.docker_client().api.inspect_image, ref
            )
        except SandboxNotFoundError:
            return None
        return attrs["Id"]

    async def _base_python(self, image: str | None) -> tuple[ImagePython | None, bool]:
        """(the CPython of the final stage's base image, whether that is known): unknown when
        the image is not local (the build pulls nothing; it fails saying so)."""
        if image is None:
            return None, False
        try:
            image_id = await self._local_id(image)
        except SandboxError:  # the build will say what is wrong with the reference
            return None, False
        if image_id is None:
            return None, False
        return await self._probe(image_id, image)

    # -- prebuilt images: local, else pulled once ---------------------------------------------

    async def _local_or_pulled(self, ref: str) -> str:
        """The id of the local image `ref`, pulling it when missing: once per reference
        however many tasks ask at the same time, bounded by PULL_TIMEOUT_SEC, and a failure
        is remembered for PULL_FAILURE_MEMORY_SEC. `_PullFailed` when it cannot be had."""
        try:
            image_id = await self._local_id(ref)
        except SandboxError as exc:
            if "invalid reference format" in str(exc):
                raise _PullFailed(str(exc)) from exc
            raise
        if image_id is not None:
            return image_id
        failed = self._pull_failures.get(ref)
        if failed is not None and time.monotonic() < failed[0]:
            raise _PullFailed(failed[1])
        return await asyncio.shield(self._single_flight(f"pull {ref}", lambda: self._pull(ref)))

    async def _pull(self, ref: str) -> str:
        key = f"pull {ref}"
        try:
            earlier = self._running.get(key)
            if earlier is not None:  # a pull that overran its bound still runs: not two
                await asyncio.wait({earlier}, timeout=PULL_TIMEOUT_SEC)
                if not earlier.done():
                    raise _PullFailed(f"an earlier pull of {ref} is still running")
            image_id = await self._local_id(ref)
            if image_id is not None:
                return image_id
            pulling = asyncio.ensure_future(
                docker_api.call_once(f"pull {ref}", _pull_blocking, ref)
            )
            self._running[key] = pulling  # type: ignore[assignment]
            pulling.add_done_callback(lambda _: self._running.pop(key, None))
            done, _ = await asyncio.wait({pulling}, timeout=PULL_TIMEOUT_SEC)
            if not done:
                raise _PullFailed(f"no answer within {PULL_TIMEOUT_SEC:g} s")
            try:
                return pulling.result()
            except SandboxError as exc:  # the engine itself failed
                raise _PullFailed(str(exc)) from exc
        except _PullFailed as failed:
            self._pull_failures[ref] = (time.monotonic() + PULL_FAILURE_MEMORY_SEC, failed.reason)
            raise

    # -- task images --------------------------------------------------------------------------

    async def plan(
        self, task: Task, base_image_map: Mapping[str, str], *, force_build: bool = False
    ) -> BuildPlan:
        """How the task's image is made, and its content-hash tag.

        A task with a prebuilt `docker_image` (mapped through `base_image_map`) uses it when
        it is local or can be pulled; when it cannot, environment/Dockerfile is built instead,
        with a warning, or, without one, the error says how to get the image. `force_build`
        always builds environment/Dockerfile. The runtime venv: one COPY when the base image's
        CPython is known and >= 3.9 ("present"); nothing when the base image has no usable
        python3 and no step could add one ("absent"); else the general layer ("unknown").
        """
        env = task.config.environment
        if env.docker_image is None or force_build:
            return await self._plan_dockerfile(task, base_image_map, force_build=force_build)
        ref = base_image_map.get(env.docker_image, env.docker_image)
        named = env.docker_image
        if ref != env.docker_image:
            named += f" (mapped to {ref})"
        try:
            image_id = await self._local_or_pulled(ref)
        except _PullFailed as failed:
            if not await run_blocking(task.dockerfile.is_file):
                raise failed.error(task, named, ref) from None
            plan = await self._plan_dockerfile(task, base_image_map)
            warning = (
                f"docker_image {named} could not be pulled ({failed.reason}); "
                "built environment/Dockerfile instead"
            )
            return replace(plan, warnings=(*plan.warnings, warning))
        return await self._plan_prebuilt(task, ref, image_id)

    async def _plan_prebuilt(self, task: Task, ref: str, image_id: str) -> BuildPlan:
        """A local prebuilt image: with the venv copied in when it has a usable CPython, else
        used as it is.

        Used as is, nothing is built: the plan's tag is `trialbox-env:<hash of the image id>`,
        put on that image by `ensure_image` (a tag, no layer, milliseconds). Not the reference
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
        python, known = await self._probe(image_id, ref)
        if known and (python is None or not python.usable):
            digest = hashlib.sha256(f"docker_image\0{image_id}".encode()).hexdigest()
            return BuildPlan(
                tag=f"{TASK_REPO}:{digest[:20]}", timeout_sec=env.build_timeout_sec,
                context={"Dockerfile": (text.encode(), 0o644)}, runtime="absent",
                image_id=image_id,
            )  # fmt: skip
        return await self._finish_plan(task, text, text, {}, python if known else None)

    async def _plan_dockerfile(
        self, task: Task, base_image_map: Mapping[str, str], *, force_build: bool = False
    ) -> BuildPlan:
        if force_build and not await run_blocking(task.dockerfile.is_file):
            raise TaskError(
                f"{task.dockerfile}: missing; --force-build (TrialConfig.force_build) builds "
                "environment/Dockerfile instead of the prebuilt docker_image: add one, or run "
                "without it"
            )
        try:
            text = await run_blocking(task.dockerfile.read_text, encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TaskError(f"{task.dockerfile}: cannot be read: {exc}") from exc
        context = await run_blocking(read_tree, task.environment_dir)
        mapped = map_base_images(text, base_image_map)
        python, known = await self._base_python(final_stage_base(mapped))
        if known and (python is None or not python.usable):
            if not final_stage_may_add_python(mapped):
                # Nothing could add a python3: no runtime layer at all ("absent").
                return await self._plan_with(task, context, mapped, None, "absent")
            python = None  # a step may install one: the general layer finds out
        return await self._finish_plan(task, text, mapped, context, python, base_image_map)

    async def _finish_plan(
        self,
        task: Task,
        text: str,
        mapped: str,
        context: dict[str, tuple[bytes, int]],
        python: ImagePython | None,
        base_image_map: Mapping[str, str] | None = None,
    ) -> BuildPlan:
        """The venv copied in for a known usable CPython ("present"), else the general
        layer, which makes the venv only if it finds a python3 >= 3.9 ("unknown")."""
        warnings: tuple[str, ...] = ()
        if (
            python is not None
            and python.usable
            and CONTEXT_DIR not in {name.split("/")[0] for name in context}
        ):
            try:
                venv = await run_blocking(venv_files, python, await self._arch())
            except RuntimeError as exc:  # e.g. a CPython too new for the wheelhouse
                warnings = (f"the runtime venv could not be prepared on the host: {exc}",)
            else:
                context.update(venv)
                dockerfile = mapped.rstrip("\n") + "\n" + copy_block()
                plan = await self._plan_with(task, context, dockerfile, python, "present")
                return plan
        users = await self._image_users(mapped)
        dockerfile = patch_dockerfile(text, await self.tools_image(), base_image_map or {}, users)
        plan = await self._plan_with(task, context, dockerfile, None, "unknown")
        return replace(plan, warnings=warnings)

    async def _plan_with(
        self,
        task: Task,
        context: dict[str, tuple[bytes, int]],
        dockerfile: str,
        python: ImagePython | None,
        runtime: RuntimeState,
    ) -> BuildPlan:
        context["Dockerfile"] = (dockerfile.encode(), 0o644)
        tag, context = await run_blocking(_with_tag, TASK_REPO, context)
        return BuildPlan(
            tag=tag, timeout_sec=task.config.environment.build_timeout_sec, context=context,
            python=python, runtime=runtime,
        )  # fmt: skip

    @staticmethod
    def _outcome(plan: BuildPlan, status: str, started: float) -> ImageOutcome:
        return ImageOutcome(
            tag=plan.tag, status=status, seconds=time.monotonic() - started,  # type: ignore[arg-type]
            runtime=plan.runtime, warnings=list(plan.warnings),
        )  # fmt: skip

    async def _build(self, plan: BuildPlan, task_name: str) -> ImageOutcome:
        started = time.monotonic()
        if plan.image_id is not None:  # a prebuilt image used as is: only our tag is added
            if not await image_exists(plan.tag):
                await docker_api.call(
                    f"tag the image of {task_name}", _tag_blocking, plan.image_id, plan.tag
                )
            return self._outcome(plan, "cached", started)
        earlier = self._running.get(plan.tag)
        if earlier is not None:  # a build that overran its timeout still runs: not two at once
            await asyncio.wait({earlier})
        if await image_exists(plan.tag) or (self.registry and await self.registry.pull(plan.tag)):
            return self._outcome(plan, "cached", started)
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
        outcome = self._outcome(plan, "built", started)
        pushed = None if self.registry is None else await self.registry.push(plan.tag)
        outcome.warnings.extend([pushed] if pushed else [])
        return outcome

    async def ensure_image(
        self,
        task: Task,
        base_image_map: Mapping[str, str] | None = None,
        *,
        plan: BuildPlan | None = None,
        force_build: bool = False,
    ) -> ImageOutcome:
        """The task's image, built at most once however many trials ask at the same time.

        `plan`, when the caller made it already (prewarm does), saves reading the task again
        (`force_build` is then the plan's).
        """
        plan = plan or await self.plan(task, base_image_map or {}, force_build=force_build)
        outcome = await self._ensure_planned(plan, task.name)
        extra: VenvExtra | None = getattr(task, "venv_extra", None)  # a bundle's task has one
        if extra is None:
            return outcome
        return await self._with_venv_extra(plan, outcome, extra, task.name)

    async def _ensure_planned(self, plan: BuildPlan, task_name: str) -> ImageOutcome:
        started = time.monotonic()
        inflight = self._inflight.get(asyncio.get_running_loop(), {})
        joined = plan.tag in inflight
        build = self._single_flight(plan.tag, lambda: self._build(plan, task_name))
        outcome = await asyncio.shield(build)
        if not joined:
            return outcome  # type: ignore[return-value]
        return self._outcome(plan, "cached", started)

    async def _with_venv_extra(
        self, plan: BuildPlan, base: ImageOutcome, extra: VenvExtra, task_name: str
    ) -> ImageOutcome:
        """The task's image plus packages in its runtime venv: an image FROM it, tagged by a
        hash of its tag and of the packages' files. Trials whose packages are the same share
        it; a change of an agent's own code (never part of it) builds nothing. Without a venv
        (`absent`, or a general layer that skipped it) the task's image is returned as is:
        the trial refuses what needs the runtime."""
        python = plan.python
        if python is None and base.runtime != "absent":
            image_id = await self._local_id(base.tag)
            python = None if image_id is None else (await self._probe(image_id, base.tag))[0]
        if python is None or not python.usable:
            return base
        files = await run_blocking(extra.site_files, python, await self._arch())
        tag, context = await run_blocking(
            _with_tag, TASK_REPO, extra_context(base.tag, python, files)
        )
        derived = BuildPlan(
            tag=tag, timeout_sec=plan.timeout_sec, context=context, python=python,
            runtime=base.runtime, warnings=tuple(base.warnings),
        )  # fmt: skip
        added = await self._ensure_planned(derived, task_name)
        status = "built" if "built" in (base.status, added.status) else "cached"
        return added.model_copy(update={"status": status, "seconds": base.seconds + added.seconds})


_default_builder: ImageBuilder | None = None


def default_builder() -> ImageBuilder:
    """The process-wide builder, so separate `run_trial` calls share single-flight builds."""
    global _default_builder
    if _default_builder is None:
        _default_builder = ImageBuilder()
    return _default_builder
