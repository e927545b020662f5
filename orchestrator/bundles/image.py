"""The image part of a bundle: what its dependencies add to a task image's runtime venv.

The task image itself is not touched (a bundle trial and any other trial of the task share
it); the Docker backend builds one more image FROM it with these files in its venv's
site-packages (`backends/docker/venv_extra.py`). Besides the dependencies, the files hold a
`.pth` line that puts the folder each trial uploads the bundle's own code into on the venv's
path, so the code installs without a step in the image and without PYTHONPATH.

`BundleDependencies` is that set of files (a `VenvExtra`); the image made from it is tagged by
the task image's tag and these files.
"""

from __future__ import annotations

import functools
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.bundles.deps import dependency_site
from orchestrator.bundles.errors import DependencyError
from orchestrator.common.archive import read_files
from orchestrator.sandbox.image_facts import ImageFacts

BUNDLE_DIR = "/opt/trialbox/bundle"
BUNDLE_SITE = f"{BUNDLE_DIR}/site"  # the bundle's own code, uploaded by each trial
BUNDLE_BIN = f"{BUNDLE_DIR}/bin"  # its console scripts
PTH_NAME = "trialbox_bundle.pth"


class BundleDependencies(BaseModel):
    """A bundle's declared dependencies, as a task image's venv gets them (a `VenvExtra`)."""

    model_config = ConfigDict(frozen=True)

    bundle: str = Field(description="The bundle's name, for errors.")
    requirements: tuple[str, ...] = ()
    requires_python: str | None = None

    def site_files(self, image: ImageFacts) -> dict[str, tuple[bytes, int]]:
        """The files added to the venv's site-packages of `image` (blocking: the first call
        per dependency set and CPython resolves and downloads)."""
        python = image.python
        if self.requires_python:
            try:
                supported = python.version in SpecifierSet(self.requires_python)
            except InvalidSpecifier:
                supported = True  # pip would not have built it; nothing to hold against it
            if not supported:
                raise DependencyError(
                    f"bundle {self.bundle} requires Python {self.requires_python}; the image "
                    f"has CPython {python.version}"
                )
        requirements = tuple(sorted(self.requirements))
        runtime = image.runtime_site() if requirements else None
        return dict(_site_files(requirements, python.minor, image.arch, runtime))


@functools.lru_cache(maxsize=16)
def _site_files(
    requirements: tuple[str, ...], minor: str, arch: str, runtime: Path | None
) -> dict[str, tuple[bytes, int]]:
    files = {PTH_NAME: (f"{BUNDLE_SITE}\n".encode(), 0o644)}
    if requirements and runtime is not None:
        files.update(read_files(dependency_site(requirements, minor, arch, runtime)))
    return files
