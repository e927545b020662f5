"""A bundle's dependencies as an image of their own, FROM the task's image.

A bundle's agent needs packages in the runtime venv beyond trialbox's. They are not put in the
task's image, which every other trial of the task shares, but in one more image on top of it:
one COPY into the venv's site-packages, tagged by a hash of the task image's tag and of the
files, so trials whose packages are the same share it and a change of the agent's own code
(uploaded by each trial, never part of it) builds nothing. Where the task image's sandboxes
mount the venv (a local engine: `venv_store.py`), a read-only mount cannot take more packages:
this image gets the whole venv in it instead (the one-COPY layer's files with the packages in
its site-packages), and its sandboxes mount none. What the bundle needs is then inside the
image, where each trial finds it ready, as seed 001's Dockerfile patch put it.

The builder knows such a task by a protocol, `CarriesVenvExtra`, not by its class: bundles sit
above backends, so a backend cannot import `BundleTask` (`orchestrator/bundles/task.py`).

`VenvExtra` says which packages (a protocol too); `with_venv_extra` builds the image.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from container_runtime.paths import VENV_DIR
from orchestrator.backends.docker.build import TASK_REPO, BuildPlan, with_tag
from orchestrator.backends.docker.venv_layer import CONTEXT_DIR, DockerImageFacts, venv_files
from orchestrator.common.offload import run_blocking
from orchestrator.sandbox import ImageOutcome
from orchestrator.sandbox.image_facts import ImageFacts, ImagePython

if TYPE_CHECKING:
    from orchestrator.backends.docker.images import ImageBuilder

EXTRA_DIR = "trialbox-venv-extra"


class VenvExtra(Protocol):
    """Packages added to the runtime venv of a task's image, made on the host for the image's
    own CPython (a bundle's dependencies: `orchestrator/bundles/image.py`). A task that
    carries one as `venv_extra` gets an image of its own, FROM the task's image."""

    def site_files(self, image: ImageFacts) -> dict[str, tuple[bytes, int]]:
        """The files to add, by path relative to the venv's site-packages (blocking)."""
        ...


@runtime_checkable
class CarriesVenvExtra(Protocol):
    """A task whose image's venv gets more packages (`BundleTask` is one)."""

    @property
    def venv_extra(self) -> VenvExtra: ...


def extra_context(
    base: str,
    python: ImagePython,
    files: dict[str, tuple[bytes, int]],
    venv: dict[str, tuple[bytes, int]] | None = None,
) -> dict[str, tuple[bytes, int]]:
    """The build context of `base` with `files` added to its venv's site-packages: one COPY
    (root's, whatever USER is), so the image's tag is a hash of `base`'s and of the files.
    With `venv` (the one-COPY layer's files: `base` has no venv of its own) the COPY is the
    whole venv, `files` in its site-packages."""
    if venv is not None:
        site = f"{CONTEXT_DIR}/lib/python{python.minor}/site-packages/"
        context = {**venv, **{f"{site}{name}": entry for name, entry in files.items()}}
        dockerfile = f"FROM {base}\n# --- trialbox's runtime venv, with more packages ---\n"
        dockerfile += f"COPY {CONTEXT_DIR} {VENV_DIR}\n"
    else:
        context = {f"{EXTRA_DIR}/{name}": entry for name, entry in files.items()}
        site = f"{VENV_DIR}/lib/python{python.minor}/site-packages/"
        dockerfile = f"FROM {base}\n# --- added to trialbox's runtime venv ---\n"
        dockerfile += f"COPY {EXTRA_DIR} {site}\n"
    context["Dockerfile"] = (dockerfile.encode(), 0o644)
    return context


async def with_venv_extra(
    builder: ImageBuilder, plan: BuildPlan, base: ImageOutcome, extra: VenvExtra, task_name: str
) -> ImageOutcome:
    """The task's image (`base`, made by `plan`) plus `extra` in its runtime venv, built at
    most once; where `base`'s sandboxes mount the venv, with the whole venv in it. Without a
    venv (`absent`, or a general layer that skipped it) the task's image is returned as is:
    the trial refuses what needs the runtime."""
    mounted = builder.mounted(base.tag)
    python = mounted or plan.python
    if python is None and base.runtime != "absent" and not plan.mount_runtime:
        image_id = await builder.local_id(base.tag)
        python = None if image_id is None else (await builder.probe(image_id, base.tag))[0]
    if python is None or not python.usable or (plan.mount_runtime and mounted is None):
        return base
    facts = DockerImageFacts(python=python, arch=await builder.arch())
    files = await run_blocking(extra.site_files, facts)
    venv = None if mounted is None else await run_blocking(venv_files, python, facts.arch)
    tag, context = await run_blocking(
        with_tag, TASK_REPO, extra_context(base.tag, python, files, venv)
    )
    derived = BuildPlan(
        tag=tag, timeout_sec=plan.timeout_sec, context=context, python=python,
        runtime=base.runtime, warnings=tuple(base.warnings),
    )  # fmt: skip
    added = await builder.ensure_planned(derived, task_name)
    status = "built" if "built" in (base.status, added.status) else "cached"
    return added.model_copy(update={"status": status, "seconds": base.seconds + added.seconds})
