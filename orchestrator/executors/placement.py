"""Whole trials run where their sandboxes live, when that is not this process's host.

The nodes of a cluster (Ray's, each with its own Docker engine) cannot hand this process a
`Sandbox`: the relay, the verifier and the model gateway's socket must all be beside the
engine. A `Placement` runs a whole unit of work (a trial) on a node with room for it, gives
that work the node's own backend and a copy of the task there, and brings back what the work
emits. `PlacedExecutor` (`placed.py`) runs its trials through one; `ray/placement.py` is
Ray's, and the tests have one that runs each work in this process.

A work may also answer questions while it runs (a session's calls: `node_session.py`):
`Placement.ask` carries one to the node that runs the work and its answer, or the exception
it raised there, back.

`Placement` is the interface; `PlacedWork` the work it carries (it pickles), `Resources` what
the work holds on its node (its sandbox's cpus and memory).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.sandbox import Backend
from orchestrator.tasks.task import Task

Emit = Callable[[Any], None]
"""How a placed work reports: each event it emits reaches the caller of `Placement.run`."""


class Resources(BaseModel):
    """What one trial holds on its node while it runs: its sandbox's cpus and memory."""

    model_config = ConfigDict(frozen=True)

    cpus: float = Field(gt=0)
    memory_mb: int = Field(gt=0)


class PlacedWork(Protocol):
    """A whole trial to run on a node. It travels there, so it must pickle."""

    @property
    def key(self) -> str:
        """Unique among the works of one caller: a cancel names it."""
        ...

    @property
    def resources(self) -> Resources:
        """What it holds on its node while it runs."""
        ...

    def __call__(self, backend: Backend, task: Task, emit: Emit) -> Awaitable[None]:
        """Run on the node with the node's `backend` and the node's copy of `task`. When
        cancelled it still emits its last events (its result), then re-raises."""
        ...


class Placement(ABC):
    """Runs works on the nodes of a cluster whose sandboxes are not in reach of this host."""

    @abstractmethod
    async def run(self, work: PlacedWork, task: Task, emit: Emit) -> None:
        """Run `work` on a node with room for `work.resources`, waiting for one.

        `emit` first gets the `NodeInfo` of where it runs, then every event of the work.
        A cancel is passed on to the work where it runs; once its last events arrived (or a
        bound passed) the cancel is re-raised here. A node that dies or stops answering
        raises `SandboxLostError` (infra); a task that no node could hold, `TaskError`.
        """

    async def aclose(self) -> None:
        """Let go of what the nodes keep for this placement (their warm pools)."""
        return None

    async def ask(self, key: str, request: Any) -> Any:
        """Carry `request` to the running work named `key` on its node (a session's call,
        `node_session.answer` there) and return its answer; an exception raised there is
        raised here as the same type. A node that died or stops answering raises
        `SandboxLostError`. A placement that cannot reach a running work does not place
        sessions."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot reach a running work: it places no sessions"
        )
