"""Whether a sandbox can run trialbox's Python runtime (the venv at RUNTIME_PYTHON).

Only workflow and shell agents, graders and the model gateway's in-sandbox forwarder need
it; oracle, nop and command agents and shell verifiers need only `sh`. An image without a
usable python3 gets no runtime layer, so using something that needs it there is refused
before the agent starts, as the task's (`validation`), saying exactly that.

`check_runtime` checks it in the sandbox; `RuntimeMissingError` is the refusal.
"""

from __future__ import annotations

from container_runtime import MIN_PYTHON
from orchestrator.common.errors import RuntimeMissingError
from orchestrator.sandbox import Sandbox
from orchestrator.sandbox.commands import CheckRuntime

CHECK_SEC = 30.0


def runtime_missing(user: str, image: str, detail: str = "") -> str:
    """The message for an image without the runtime that `user` (e.g. '--agent shell') needs."""
    need = ".".join(map(str, MIN_PYTHON))
    why = f" ({detail})" if detail else ""
    return (
        f"{user} runs trialbox's Python runtime inside the sandbox, but image {image} has no "
        f"usable python3 for it{why}: the runtime needs CPython >= {need} in the task's final "
        "image. Use an agent that needs only sh (oracle, nop, command:...) or install python3 "
        "in environment/Dockerfile"
    )


async def check_runtime(sandbox: Sandbox, image: str, user: str) -> None:
    """Raise RuntimeMissingError unless the runtime's interpreter starts in the sandbox."""
    result = await sandbox.exec(CheckRuntime(), timeout_sec=CHECK_SEC, user="root")
    if result.exit_code != 0:
        said = result.output.strip().splitlines()[-1:] or [f"exit code {result.exit_code}"]
        raise RuntimeMissingError(runtime_missing(user, image, said[0][:200]))
