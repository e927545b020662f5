"""The simplest `Placement`: each work runs in this process, on a backend of its own (a
fake "node"), after the pickle round trip every placed work and event must survive. The
placed executor (`executors/placed.py`, `node_trial.py`) and placed sessions
(`placed_session.py`, `node_session.py`: `ask` carries a call) are tested with it without Ray;
`LostPlacement` is a node that dies under its first trials."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

from orchestrator.backends.fake import FakeBackend
from orchestrator.common.errors import SandboxLostError
from orchestrator.executors.node_session import answer
from orchestrator.executors.placed import PlacedExecutor
from orchestrator.executors.placement import Emit, PlacedWork, Placement
from orchestrator.tasks.task import Task
from orchestrator.trials.config import TrialConfig
from orchestrator.trials.result import NodeInfo

NODE = NodeInfo(node_id="n" * 56, address="127.0.0.1", engine="fake", engine_id="fake-node")


def travelled(value: object) -> object:
    return pickle.loads(pickle.dumps(value))


class LocalPlacement(Placement):
    """Runs each work here, on `node`, as a node would."""

    def __init__(self, node: FakeBackend | None = None) -> None:
        self.node = node or FakeBackend()
        self.started: list[str] = []
        self.cancelled: list[str] = []

    async def run(self, work: PlacedWork, task: Task, emit: Emit) -> None:
        arrived = travelled(work)
        assert isinstance(arrived, type(work))
        emit(NODE)
        self.started.append(work.key)
        try:
            await arrived(self.node, task, lambda event: emit(travelled(event)))
        except asyncio.CancelledError:
            self.cancelled.append(work.key)
            raise

    async def ask(self, key: str, request: Any) -> Any:
        """A session's call to its "node": the call, its answer and any exception it raised
        each go through the pickle round trip Ray would put them through."""
        try:
            answered = await answer(key, travelled(request))  # type: ignore[arg-type]
        except Exception as exc:
            raise travelled(exc) from None  # type: ignore[misc]
        return travelled(answered)


class LostPlacement(LocalPlacement):
    """A node that dies before its first `losses` works end."""

    def __init__(self, losses: int) -> None:
        super().__init__()
        self.losses = losses

    async def run(self, work: PlacedWork, task: Task, emit: Emit) -> None:
        if self.losses > 0:
            self.losses -= 1
            emit(NODE)
            raise SandboxLostError("the Ray node 127.0.0.1 (nnnn) running this trial was lost")
        await super().run(work, task, emit)


def placed_on(placement: LocalPlacement, config: TrialConfig) -> PlacedExecutor:
    """An executor placing `config`'s trials through `placement`, its node's images and
    leftovers those of the placement's fake backend."""
    return PlacedExecutor(config, placement, images=placement.node, leftovers=placement.node)
