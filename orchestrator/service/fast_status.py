"""Plain status reads answered ahead of the framework's routing: the server's hottest request.

A trainer polls `GET /rollouts/{id}` for every rollout it waits on, and under load that poll's
slowest answers are what it feels. Through the app's stack the read is a dictionary lookup
wrapped in a few hundred microseconds of routing, parameter validation and response model
checks, every one of them spent on the event loop that also runs the trials. So a plain read
(GET, either spelling of the route, an id of the rollout id grammar, no query string, no
body, no root path) is answered here, by this ASGI middleware: the engine's own `status`, the
document encoded as the route encodes it (`document_bytes`), the same two headers. Anything
else (a long poll's `?wait=`, a malformed id, a HEAD) goes on to the app, which answers it as
it always did; tests/service/test_fast_status.py holds the two answers equal.

`FastStatus` is the middleware; `plain_status_read` says which requests it answers.
"""

from __future__ import annotations

import re

from pydantic import TypeAdapter
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.common.ids import ROLLOUT_ID_PATTERN
from orchestrator.service.engine import TrialEngine
from orchestrator.service.rollouts import RolloutStatus

_ID = ROLLOUT_ID_PATTERN.removeprefix("^").removesuffix("$")
_PLAIN_READ = re.compile(rf"/rollouts/({_ID})|/rollout/({_ID})/status")
_BODY_HEADERS = frozenset({b"content-length", b"transfer-encoding"})
_DOCUMENT = TypeAdapter(RolloutStatus)


def plain_status_read(scope: Scope) -> str | None:
    """The rollout id a request reads plainly (see the module's docstring), else None."""
    if scope["type"] != "http" or scope["method"] != "GET" or scope.get("query_string"):
        return None
    if scope.get("root_path"):
        return None
    found = _PLAIN_READ.fullmatch(scope["path"])
    if found is None:
        return None
    if any(name in _BODY_HEADERS for name, _ in scope["headers"]):
        return None
    return found.group(1) or found.group(2)


def document_bytes(status: RolloutStatus) -> bytes:
    """A status document as the route's JSON answer encodes it."""
    return _DOCUMENT.dump_json(status, by_alias=True)


class FastStatus:
    """ASGI middleware: plain status reads answered from `engine`, the rest passed to `app`."""

    def __init__(self, app: ASGIApp, engine: TrialEngine) -> None:
        self.app = app
        self.engine = engine

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rollout_id = plain_status_read(scope)
        if rollout_id is None:
            await self.app(scope, receive, send)
            return
        body = document_bytes(self.engine.status(rollout_id))
        headers = [
            (b"content-length", str(len(body)).encode()),
            (b"content-type", b"application/json"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
