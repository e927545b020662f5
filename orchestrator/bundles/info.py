"""`inspect_bundle`: what a bundle wheel declares, read from its own metadata.

The requirements are what the image's venv gets: environment markers are kept (they are
evaluated for the image's Python when the dependencies are resolved), requirements that only
an extra asks for are dropped (nothing installs a bundle with extras).
"""

from __future__ import annotations

import importlib.metadata
import re
import zipfile
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.bundles.entry import AGENT_ENTRY, GRADE_ENTRY
from orchestrator.bundles.errors import BundleError

_EXTRA = re.compile(r"\bextra\b")


class BundleInfo(BaseModel):
    """A bundle wheel, as its metadata describes it."""

    model_config = ConfigDict(frozen=True)

    wheel: Path = Field(description="The wheel's absolute path.")
    name: str = Field(description="The distribution's name, e.g. qa-bundle.")
    version: str
    requirements: tuple[str, ...] = Field(
        description="Declared dependencies, markers kept, extras-gated ones dropped."
    )
    requires_python: str | None = None
    agent_script: str = Field(description="The console script that runs the workflow.")
    grade_script: str | None = Field(
        None, description="The console script that runs the grader; None: built without one."
    )


def _requirements(declared: list[str], wheel: Path) -> tuple[str, ...]:
    kept = []
    for line in declared:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise BundleError(f"{wheel}: Requires-Dist {line!r} does not parse: {exc}") from exc
        if requirement.marker is not None and _EXTRA.search(str(requirement.marker)):
            continue
        kept.append(str(requirement))
    return tuple(kept)


def inspect_bundle(wheel: str | Path) -> BundleInfo:
    """What the bundle wheel declares: its dependencies and its two console scripts."""
    path = Path(wheel).resolve()
    try:
        with zipfile.ZipFile(path) as archive:
            tops = {name.split("/")[0] for name in archive.namelist()}
            dist_info = [t for t in tops if t.endswith(".dist-info")]
            if len(dist_info) != 1:
                raise BundleError(f"{path}: not a wheel (no single .dist-info folder)")
            dist = importlib.metadata.PathDistribution(zipfile.Path(archive, f"{dist_info[0]}/"))
            name, version = dist.metadata["Name"], dist.version
            requires = dist.requires or []
            requires_python = dist.metadata["Requires-Python"]
            scripts = {
                ep.value: ep.name for ep in dist.entry_points.select(group="console_scripts")
            }
    except (OSError, zipfile.BadZipFile) as exc:
        raise BundleError(f"{path}: not a readable wheel ({exc})") from exc
    if AGENT_ENTRY not in scripts:
        raise BundleError(
            f"{path}: not a trialbox bundle (no console script runs {AGENT_ENTRY}); build one "
            "with build_bundle or trialbox bundle build"
        )
    return BundleInfo(
        wheel=path, name=name, version=version, requirements=_requirements(requires, path),
        requires_python=requires_python, agent_script=scripts[AGENT_ENTRY],
        grade_script=scripts.get(GRADE_ENTRY),
    )  # fmt: skip
