"""Runs inside task containers: the file contract, workflow and grader base classes.

Imports only the standard library and pydantic, and keeps Python 3.9 syntax, because it is
installed into whatever Python the task image ships.

`MIN_PYTHON` is the oldest CPython it runs on.
"""

from __future__ import annotations

from container_runtime.contract import ContainerInput, ContainerResult, write_reward
from container_runtime.trajectory import messages_from_trajectory
from container_runtime.workflow import AgentContext, AgentWorkflow, Grader, GraderContext

__version__ = "0.1.0"
# The oldest CPython the runtime runs on (its syntax and dependencies): images with an older
# python3, or none, get no runtime venv, and what needs the runtime there is refused.
MIN_PYTHON = (3, 9)

__all__ = [
    "MIN_PYTHON",
    "AgentContext",
    "AgentWorkflow",
    "ContainerInput",
    "ContainerResult",
    "Grader",
    "GraderContext",
    "__version__",
    "messages_from_trajectory",
    "write_reward",
]
