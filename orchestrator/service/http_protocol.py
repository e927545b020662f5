"""The HTTP connection limits of `trialbox serve`: how long a request head may take, how long
a connection may idle, and how many connections are served at once.

uvicorn's h11 protocol bounds only the idle time between two requests (`timeout_keep_alive`):
a new connection that never finishes its request head, or a body that stops arriving, holds
its descriptor for ever, and `limit_concurrency` answers a bare 503 without Retry-After. So
`serve` runs uvicorn with `BoundedH11Protocol`, uvicorn's h11 protocol plus these limits:

- Idle. A connection with no request under way (a new one, or one between two requests)
  is closed without a word after `keep_alive_timeout`: a client's pool may hold a spare
  connection, and a closed idle one is what every client retries (an unasked 408 would be
  read as the answer to its next request).
- Header time. A request head must be complete within `header_timeout` of its first byte,
  however slowly the bytes trickle; else it is answered 408 and closed.
- Body gaps. While a request body streams, a gap of more than `header_timeout` with no byte of
  it is answered 408 and closed. A slow body that keeps coming is never cut, and nothing times
  the app's answer (a long poll holds its connection up to its wait).
- Connections. At most `max_connections` are served at once; the next ones are answered 503
  with Retry-After and closed once their head is read (still within the header time), and
  past twice the limit a new connection is closed at once, so a flood cannot take the
  process's descriptors (`ulimit -n`) whatever it sends.

One thing it does for speed, not as a limit: an answer's head goes out with its body, in one
write (`OneWriteAnswer`). uvicorn writes the head as soon as the app starts its answer and the
body after, two sends and two packets; a client woken by the first could take the CPU from the
server before the second, which under load is what a status poll's slowest answers waited on.

`serve_app` runs uvicorn with it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from orchestrator.service.http_limits import HttpLimits

log = logging.getLogger(__name__)

# The 503's Retry-After: connections free up as requests finish, which is quick but for long
# polls (at most MAX_WAIT_SEC).
BUSY_RETRY_AFTER_SEC = 1
# At most one "over the limit" warning per this many seconds: a flood must not flood the log.
_WARN_EVERY_SEC = 10.0


def _closing_response(status: int, reason: str, detail: str) -> bytes:
    """A whole JSON response that closes its connection, as bytes: written raw, since h11
    cannot answer a request whose head it never had."""
    body = json.dumps({"detail": detail}).encode()
    head = [
        f"HTTP/1.1 {status} {reason}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class OneWriteAnswer(asyncio.Transport):
    """One request's view of its connection's transport: the first write (an answer's head)
    is held until the next one (its body) and both go out as one; a head with no body in the
    same step goes out on the loop's next pass, and before a close. Everything else is the
    connection's own transport."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._flushing: asyncio.Handle | None = None
        self._first = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._first and data:
            self._first = False
            self._held = bytes(data)
            self._flushing = self._loop.call_soon(self._flush)
            return
        if self._held is not None:
            data = self._held + data
            self._drop_held()
        if data:
            self._transport.write(data)

    def _drop_held(self) -> None:
        self._held = None
        if self._flushing is not None:
            self._flushing.cancel()
            self._flushing = None

    def _flush(self) -> None:
        held = self._held
        self._drop_held()
        if held is not None:
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._drop_held()
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with `limits` (set on a subclass by `protocol_for`)."""

    limits: ClassVar[HttpLimits] = HttpLimits()
    _last_warned: ClassVar[float] = -_WARN_EVERY_SEC

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timeout_keep_alive = self.limits.keep_alive_timeout  # type: ignore[assignment]  # uvicorn says int; only call_later reads it, which takes a float
        self._read_timer: asyncio.TimerHandle | None = None
        self._started = False  # a byte of the next request has come

    # -- one timer: a new connection's idle time, a head's deadline, a body's longest gap ----

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _answer_and_close(self, status: int, reason: str, detail: str) -> None:
        self.transport.write(_closing_response(status, reason, detail))
        self.transport.close()

    def _timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        seconds = f"{self.limits.header_timeout:g}"
        state, cycle = self.conn.their_state, self.cycle
        if state is h11.IDLE and not self._started:
            self.transport.close()  # an idle connection, nothing asked: closed without a word
        elif state is h11.IDLE:
            detail = f"the request head was not complete within {seconds} s (--header-timeout)"
            self._answer_and_close(408, "Request Timeout", detail)
        elif state is not h11.SEND_BODY:
            return  # the whole request is in: the answer is the app's, however long it takes
        elif self.flow.read_paused:
            self._arm(self.limits.header_timeout)  # we stopped reading, not the client
        elif cycle is None or not cycle.response_started:
            detail = f"the request body stopped arriving for {seconds} s (--header-timeout)"
            self._answer_and_close(408, "Request Timeout", detail)
        elif cycle.response_complete:
            self.transport.close()  # answered already; the rest of its body never came
        # else: an answer is being sent while the body comes; not ours to time

    # -- uvicorn's protocol, with the timer and the connection cap --------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn's own H11Protocol narrows BaseProtocol's
        super().connection_made(transport)
        cap = self.limits.max_connections
        open_now = len(self.connections)
        if open_now > 2 * cap:
            self._warn(f"{open_now} connections are open, past twice --max-connections {cap}: "
                       "new ones are closed at once")  # fmt: skip
            transport.abort()
            return
        if open_now > cap:
            self._warn(f"{open_now} connections are open, over --max-connections {cap}: "
                       "new ones are answered 503")  # fmt: skip
            self.app = self._busy  # this connection's one request is answered 503
        self._arm(self.limits.keep_alive_timeout)

    def data_received(self, data: bytes) -> None:
        if data and not self._started and self.conn.their_state is h11.IDLE:
            self._started = True
            self._arm(self.limits.header_timeout)  # the head's deadline starts at its first byte
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self._arm(self.limits.header_timeout)  # a body byte may come: the gap starts again
        elif state is not h11.IDLE:
            self._disarm()  # the whole request is in

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not None and self.cycle is not cycle:  # a new request: its answer
            self.cycle.transport = OneWriteAnswer(self.transport, self.loop)

    def on_response_complete(self) -> None:
        self._disarm()  # idle now: uvicorn's keep-alive timer runs until the next byte
        self._started = False
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - type(self)._last_warned >= _WARN_EVERY_SEC:
            type(self)._last_warned = now
            log.warning(message)

    async def _busy(self, scope: Any, receive: Any, send: Any) -> None:
        """The answer of a connection over the limit: 503, Retry-After, closed."""
        cap = self.limits.max_connections
        body = json.dumps(
            {
                "detail": f"the server is serving its limit of {cap} connections "
                f"(--max-connections); retry after {BUSY_RETRY_AFTER_SEC} s",
                "retry_after": BUSY_RETRY_AFTER_SEC,
            }
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(BUSY_RETRY_AFTER_SEC).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def protocol_for(limits: HttpLimits) -> type[BoundedH11Protocol]:
    """The protocol class uvicorn is given (`http=`): it makes one per connection itself."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {"limits": limits})


def serve_app(
    app: Any, *, host: str, port: int, limits: HttpLimits, log_level: str = "info"
) -> None:
    """Run `app` under uvicorn on host:port with `limits` (blocks until the server stops)."""
    import uvicorn

    # uvicorn's own keep-alive setting is a whole number; the protocol uses the exact one.
    uvicorn.run(
        app, host=host, port=port, log_level=log_level, http=protocol_for(limits),
        timeout_keep_alive=max(1, round(limits.keep_alive_timeout)),
    )  # fmt: skip
