"""The `trialbox-tools` image: `uv` and the runtime's wheels, FROM scratch.

Apart from the task images' builder because it is no task's image: the general runtime layer
of every task image copies from it (`dockerfile.py`), so it is made once per engine and
wheelhouse, and named, like every image here, by a hash of its files.
"""

from __future__ import annotations

from orchestrator.backends.docker import api as docker_api
from orchestrator.backends.docker.build import (
    BuildPlan,
    _build_blocking,
    build_labels,
    image_exists,
    with_tag,
)
from orchestrator.backends.docker.runtime_wheel import runtime_wheel
from orchestrator.common.offload import run_blocking
from orchestrator.common.wheelhouse import ensure_wheelhouse

TOOLS_REPO = "trialbox-tools"
_TOOLS_DOCKERFILE = b"FROM scratch\nCOPY uv /uv\nCOPY wheels /wheels\n"


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


async def make_tools_image() -> str:
    """The tag of the tools image for the engine's architecture, built when missing."""
    client = docker_api.docker_client()
    info = await docker_api.call("ask the engine for its architecture", client.info)
    arch = info.get("Architecture", "x86_64")
    tag, context = await run_blocking(lambda: with_tag(TOOLS_REPO, _tools_context(arch)))
    if not await image_exists(tag):
        plan = BuildPlan(tag=tag, timeout_sec=300, context=context)
        await docker_api.call_once(
            "build the tools image", _build_blocking, plan, build_labels(**{"trialbox.tools": "1"})
        )
    return tag
