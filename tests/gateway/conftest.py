"""The gateway tests' fixtures: a gateway, and a stand-in upstream on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from orchestrator.gateway.server import Gateway
from tests.support.standin import Reply, StandIn


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    async with Gateway() as gw:
        yield gw


@pytest.fixture
async def upstream() -> AsyncIterator[StandIn]:
    """A stand-in that answers "hello there" to every chat call."""
    async with StandIn(Reply(content="hello there")) as server:
        yield server
