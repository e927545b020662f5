"""The server's request guards: the body-size limit (an ASGI middleware), the size of a
rollout's metadata as JSON, and where a rollout may send the host's model key.

`server.create_app` installs and applies them; they hold no engine and no route.

`BodyLimit` is the middleware, `json_size` the metadata's size, `url_under` where a key may go.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """ASGI middleware: a request body over `max_bytes` is answered 413 without reading on.

    A Content-Length over the limit is refused before any of the body is read; otherwise the
    body is read (and counted) here, at most `max_bytes` plus one chunk, and handed on whole.
    """

    def __init__(
        self, app: ASGIApp, max_bytes: int, limit_for: Callable[[Scope], int | None] | None = None
    ) -> None:
        """`limit_for(scope)`: a route's own limit in place of `max_bytes` (None: the
        default), as a session's file upload has."""
        self.app = app
        self.max_bytes = max_bytes
        self.limit_for = limit_for

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, status: int,
                      detail: str) -> None:  # fmt: skip
        # The rest of the body stays unread: the connection cannot be reused, so say so.
        response = JSONResponse({"detail": detail}, status, headers={"connection": "close"})
        await response(scope, receive, send)

    def _too_large(self, limit: int) -> str:
        return f"the request body is larger than the limit of {limit} bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        own = self.limit_for(scope) if self.limit_for is not None else None
        limit = self.max_bytes if own is None else own
        lengths = [v for k, v in scope["headers"] if k.lower() == b"content-length"]
        if lengths:
            try:
                declared = max(int(v) for v in lengths)
            except ValueError:
                await self._refuse(scope, receive, send, 400, "a malformed Content-Length")
                return
            if declared > limit:
                await self._refuse(scope, receive, send, 413, self._too_large(limit))
                return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: nobody to answer
                return
            body += message.get("body", b"")
            if len(body) > limit:
                await self._refuse(scope, receive, send, 413, self._too_large(limit))
                return
            if not message.get("more_body", False):
                break
        handed = False

        async def replay() -> Message:
            nonlocal handed
            if not handed:
                handed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def url_under(url: str, prefix: str) -> bool:
    """`url` is on exactly the scheme, host and port of `prefix`, under its path (a plain
    string prefix would let `https://api.example.com.evil.example` through)."""
    given, allowed = urlsplit(url), urlsplit(prefix)
    if (given.scheme, given.hostname, given.port) != (
        allowed.scheme,
        allowed.hostname,
        allowed.port,
    ):
        return False
    if given.username or given.password:
        return False
    base = allowed.path.rstrip("/")
    return given.path == base or given.path.startswith(base + "/")
