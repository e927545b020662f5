"""A base-image mapping checked once, before any container: both of its sides must exist.

`FROM=LOCAL` with a typo on either side cannot work, and without this check it shows only
as every trial failing `infra` on a pull that cannot reach a registry: a LOCAL the engine
does not hold is pulled (and fails), and a FROM no task names leaves the tasks' real FROM
unmapped (pulled, and fails). Both are refused up front naming the mapping and the closest
local image or FROM line. A FROM with a build argument (`FROM $BASE`) may name anything, so
while a task has one, a mapping no literal FROM uses is only warned about.

`check_base_image_map` is the check; a refusal is a `BaseImageMapError` (a `ValueError`).
`run_job` refuses a LOCAL the engine lacks (`Backend.local_images`) and warns of an unused FROM.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping, Sequence

from orchestrator.common.errors import SandboxError
from orchestrator.sandbox import ImageMaker
from orchestrator.tasks.base_images import base_images
from orchestrator.tasks.task import Task
from orchestrator.trials.config import BASE_IMAGE_MAP_ENV

log = logging.getLogger(__name__)

WHERE = (
    f"--base-image, ${BASE_IMAGE_MAP_ENV}, a job file's base_image or TrialConfig.base_image_map"
)


class BaseImageMapError(ValueError):
    """A base-image mapping that cannot work; the message names each one and what to fix."""


def _closest(word: str, candidates: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(word, candidates, n=1, cutoff=0.5)
    return found[0] if found else None


async def _local_problems(mapping: Mapping[str, str], backend: ImageMaker | None) -> list[str]:
    if backend is None or not mapping:
        return []
    try:
        held = await backend.local_images(sorted(set(mapping.values())))
    except SandboxError as exc:  # the engine does not answer: the trials will say so
        log.debug("base-image mapping not checked against the engine: %s", exc)
        return []
    if held is None:
        return []
    problems = []
    for source, local in mapping.items():
        if local not in held.missing:
            continue
        near = _closest(local, held.names)
        hint = f"did you mean {near}? " if near else ""
        problems.append(
            f"{source}={local}: the local image {local} is not in the engine, so every build "
            f"would try to pull it; {hint}fix the mapping, or build or load {local} first "
            "(docker image ls lists what the engine holds)"
        )
    return problems


def _unused(mapping: Mapping[str, str], tasks: list[Task]) -> tuple[list[str], list[str]]:
    """(mappings no literal FROM uses, the FROMs with a build argument that might)."""
    named = base_images(tasks)
    unused = []
    for source, local in mapping.items():
        if source in named.literal:
            continue
        near = _closest(source, list(named.literal))
        hint = (
            f"did you mean {near} (FROM in {named.literal[near][0]})? " if near is not None else ""
        )
        unused.append(
            f"{source}={local}: no task's FROM line (or [environment] docker_image) names "
            f"{source}, so the mapping would never apply; {hint}fix or leave out the mapping"
        )
    return unused, named.variable


async def check_base_image_map(
    mapping: Mapping[str, str],
    tasks: list[Task],
    *,
    backend: ImageMaker | None,
    refuse_unused: bool,
) -> None:
    """Raise BaseImageMapError naming every mapping whose local image `backend`'s engine
    lacks (None: not checked) and, with `refuse_unused` (the caller's `tasks` are every task
    that will run), every mapping no task uses while all FROM lines are literal. What is not
    refused is logged as a warning: unused mappings beside a FROM with a build argument (only
    with `refuse_unused`, whose caller knows the whole dataset), and, without it, unused
    mappings that all-literal FROMs rule out."""
    problems = await _local_problems(mapping, backend)
    unused, variable = _unused(mapping, tasks) if tasks else ([], [])
    if unused and refuse_unused and not variable:
        problems += unused
    elif unused and variable and refuse_unused:
        for line in unused:
            log.warning(
                "warning: base image mapping %s (not refused: %s may name it)",
                line, "; ".join(variable),
            )  # fmt: skip
    elif unused and not variable:
        for line in unused:
            log.warning("warning: base image mapping %s", line)
    if problems:
        each = "\n".join(f"- {p}" for p in problems)
        raise BaseImageMapError(
            f"{len(problems)} base image mapping(s) ({WHERE}) cannot work:\n{each}"
        )
