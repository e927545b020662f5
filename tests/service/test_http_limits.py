"""The server's connection limits (issue 18 item 9): a request head has a deadline, a body may
not stall, an idle connection is closed, connections past `max_connections` are answered 503
with Retry-After (and closed at once past twice that), and a 422 echoes a bounded amount.

A real uvicorn server with `BoundedH11Protocol` on 127.0.0.1 (a free port, in a thread of
this process) serves `create_app` on the fake backend; the tests speak raw HTTP/1.1 over
sockets, each with a timeout, and close them all.
"""

from __future__ import annotations

import json
import math
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from orchestrator.backends.fake import FakeBackend
from orchestrator.service.echo import ECHO_CHARS, MAX_ECHOED_ERRORS, validation_errors
from orchestrator.service.engine import TrialEngine
from orchestrator.service.http_limits import HttpLimits
from orchestrator.service.http_protocol import protocol_for
from orchestrator.service.server import create_app
from tests.conftest import write_task
from tests.jobs.helpers import QUICK, fake_config
from tests.service.conftest import read_response

Serve = Callable[..., int]
SOCKET_TIMEOUT = 10.0  # no recv in these tests waits longer than this


@contextmanager
def serving(tmp_path: Path, limits: HttpLimits) -> Iterator[int]:
    """The app on the fake backend under uvicorn with `limits`; its port. Stopped after."""
    task = write_task(tmp_path / "tasks", "task")
    engine = TrialEngine(
        config=fake_config(tmp_path), task=task, agent="nop", backend=FakeBackend(QUICK)
    )
    app = create_app(engine, drain_sec=0)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, http=protocol_for(limits), log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        listener.close()
        assert not thread.is_alive(), "the server did not stop"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """`serve(**limits)`: a server with those limits; its port. All stopped at the end."""
    with_stack: list[Any] = []

    def start(**limits: Any) -> int:
        context = serving(tmp_path / f"server{len(with_stack)}", HttpLimits(**limits))
        with_stack.append(context)
        return context.__enter__()

    yield start
    for context in reversed(with_stack):
        context.__exit__(None, None, None)


@contextmanager
def connected(port: int) -> Iterator[socket.socket]:
    with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT) as conn:
        yield conn


def one_response(conn: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One whole response (it has a Content-Length): status, headers, body."""
    received = b""
    while b"\r\n\r\n" not in received:
        data = conn.recv(65536)
        assert data, f"closed before a whole head: {received!r}"
        received += data
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines)}
    while len(body) < int(headers["content-length"]):
        data = conn.recv(65536)
        assert data, "closed before the whole body"
        body += data
    return int(status_line.split()[1]), headers, body


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split()[1])


def body_of(answer: bytes) -> Any:
    return json.loads(answer.partition(b"\r\n\r\n")[2])


HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"


# -- defaults ---------------------------------------------------------------------------------


def test_the_defaults_are_finite_and_keep_far_below_the_descriptor_limit() -> None:
    limits = HttpLimits()
    assert (limits.header_timeout, limits.keep_alive_timeout) == (10.0, 5.0)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert 1 <= limits.max_connections <= 1000
    if soft != resource.RLIM_INFINITY:
        assert 2 * limits.max_connections <= soft // 2  # even the hard ceiling leaves half


@pytest.mark.parametrize(
    "bad",
    [{"header_timeout": 0}, {"keep_alive_timeout": -1}, {"max_connections": 0},
     {"header_timeout": math.inf}, {"keep_alive_timeout": math.nan}],
)  # fmt: skip
def test_limits_that_are_not_positive_and_finite_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        HttpLimits(**bad)


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--header-timeout", "0"), ("--keep-alive-timeout", "-1"), ("--max-connections", "0"),
     ("--header-timeout", "nan"), ("--keep-alive-timeout", "inf")],
)  # fmt: skip
def test_serve_refuses_a_limit_flag_that_is_not_positive_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    from orchestrator.cli import main

    task = tmp_path / "task"  # refused before the task is read
    assert main(["serve", "--task", str(task), flag, value]) == 1
    said = capsys.readouterr()
    assert f"{flag} must be" in said.out + said.err


def test_serve_flags_become_the_limits_and_omitted_ones_the_defaults() -> None:
    from orchestrator.cli import build_parser
    from orchestrator.cli.serve import connection_limits

    given = ["serve", "--header-timeout", "0.5", "--max-connections", "7"]
    limits = connection_limits(build_parser().parse_args(given))
    assert limits == HttpLimits(header_timeout=0.5, keep_alive_timeout=5.0, max_connections=7)
    assert connection_limits(build_parser().parse_args(["serve"])) == HttpLimits()


# -- header time and idle connections --------------------------------------------------------


def test_half_a_head_is_answered_408_within_the_header_timeout(serve: Serve) -> None:
    port = serve(header_timeout=0.5, keep_alive_timeout=5)
    with connected(port) as conn:
        started = time.monotonic()
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")  # no blank line: never complete
        answer = read_response(conn)
        took = time.monotonic() - started
    assert status_of(answer) == 408
    assert "--header-timeout" in body_of(answer)["detail"]
    assert b"connection: close" in answer.lower()
    assert 0.4 <= took < 3.0, took


def test_a_head_that_keeps_trickling_still_has_its_deadline(serve: Serve) -> None:
    port = serve(header_timeout=0.5, keep_alive_timeout=5)
    head = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 60 + b"\r\n\r\n"
    with connected(port) as conn:
        started = time.monotonic()
        sent = 0
        try:
            for byte in head:  # one byte per 0.05 s: the whole head would take 4 s
                conn.sendall(bytes([byte]))
                sent += 1
                time.sleep(0.05)
                if time.monotonic() - started > 1.5:
                    break
        except OSError:  # answered and closed while sending
            pass
        answer = read_response(conn)
        took = time.monotonic() - started
    assert status_of(answer) == 408
    assert sent < len(head) and took < 3.0, (sent, took)


def test_a_connection_that_sends_nothing_is_closed_silently_after_the_keep_alive(
    serve: Serve,
) -> None:
    port = serve(header_timeout=5, keep_alive_timeout=0.5)
    with connected(port) as conn:
        started = time.monotonic()
        answer = read_response(conn)
        took = time.monotonic() - started
    assert answer == b""  # no unasked 408: a client's pool retries a closed idle connection
    assert 0.4 <= took < 3.0, took


def test_an_idle_keep_alive_connection_is_closed_after_the_keep_alive(serve: Serve) -> None:
    port = serve(header_timeout=5, keep_alive_timeout=0.5)
    with connected(port) as conn:
        conn.sendall(HEALTHZ)
        status, headers, _ = one_response(conn)
        assert status == 200 and headers.get("connection") != "close"
        idle_from = time.monotonic()
        rest = read_response(conn)
        took = time.monotonic() - idle_from
    assert rest == b""
    assert 0.4 <= took < 3.0, took


# -- bodies -----------------------------------------------------------------------------------


def test_a_slow_body_that_keeps_coming_is_not_cut(serve: Serve) -> None:
    port = serve(header_timeout=0.5, keep_alive_timeout=5)
    body = b'{"rollout_id": "slow-1", "not_a_field": 1}'
    pieces = [body[i : i + 6] for i in range(0, len(body), 6)]  # 7 pieces, 0.3 s apart
    with connected(port) as conn:
        conn.sendall(
            b"POST /rollouts HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        started = time.monotonic()
        for piece in pieces:
            time.sleep(0.3)
            conn.sendall(piece)
        status, _, answered = one_response(conn)
        took = time.monotonic() - started
    assert took > 3 * 0.5  # longer than the header timeout thrice, and not cut
    assert status == 422, answered  # the whole body was read and judged: an unknown field
    assert json.loads(answered)["detail"][0]["loc"] == ["body", "not_a_field"]


def test_a_body_that_stops_is_answered_408(serve: Serve) -> None:
    port = serve(header_timeout=0.5, keep_alive_timeout=5)
    with connected(port) as conn:
        conn.sendall(
            b"POST /rollouts HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"rollout_id"'
        )
        started = time.monotonic()
        answer = read_response(conn)
        took = time.monotonic() - started
    assert status_of(answer) == 408
    assert "body stopped arriving" in body_of(answer)["detail"]
    assert 0.4 <= took < 3.0, took


# -- the connection cap -----------------------------------------------------------------------


def until_served(port: int, within: float = 10.0) -> int:
    """The status a fresh connection's /healthz gets once the server has let others go."""
    deadline = time.monotonic() + within
    while True:
        with connected(port) as conn:
            conn.sendall(HEALTHZ)
            status, _, _ = one_response(conn)
        if status == 200 or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


def test_over_max_connections_the_answer_is_503_with_retry_after_and_a_close(
    serve: Serve,
) -> None:
    port = serve(header_timeout=5, keep_alive_timeout=30, max_connections=2)
    with connected(port) as first, connected(port) as second:
        for conn in (first, second):  # both served, both kept open
            conn.sendall(HEALTHZ)
            assert one_response(conn)[0] == 200
        with connected(port) as third:
            third.sendall(HEALTHZ)
            answer = read_response(third)  # closed by the server after its answer
        assert status_of(answer) == 503
        head = answer.partition(b"\r\n\r\n")[0].lower()
        assert b"retry-after: 1" in head and b"connection: close" in head
        detail = body_of(answer)
        assert "--max-connections" in detail["detail"] and detail["retry_after"] == 1
        # The two still served keep working.
        first.sendall(HEALTHZ)
        assert one_response(first)[0] == 200
    # Both gone: a new connection is served again.
    assert until_served(port) == 200


def test_past_twice_max_connections_a_new_connection_is_closed_at_once(serve: Serve) -> None:
    port = serve(header_timeout=5, keep_alive_timeout=30, max_connections=1)
    with connected(port) as served, connected(port) as waiting:
        served.sendall(HEALTHZ)
        assert one_response(served)[0] == 200
        # `waiting` is the one over the limit: its 503 comes when it asks; the next is past
        # twice the limit (3 > 2) and is not kept at all.
        with connected(port) as third:
            started = time.monotonic()
            assert read_response(third) == b""
            assert time.monotonic() - started < 3.0  # not the 30 s keep-alive
        waiting.sendall(HEALTHZ)
        assert status_of(read_response(waiting)) == 503


# -- what a 422 echoes ------------------------------------------------------------------------


def test_a_422_for_a_100_kb_input_echoes_at_most_the_cap(serve: Serve) -> None:
    port = serve()
    huge = "s" * 100_000
    response = httpx.post(
        f"http://127.0.0.1:{port}/rollouts",
        json={"rollout_id": "r1", "session_id": huge},
        timeout=SOCKET_TIMEOUT,
    )
    assert response.status_code == 422, response.text[:500]
    assert len(response.content) < 2_000
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "session_id"]
    assert len(error["input"]) <= ECHO_CHARS + 1 and error["input"].startswith('"sss')
    assert "100002 characters" in error["input_note"]  # the JSON string, quotes and all


def test_a_422_for_many_bad_items_lists_a_bounded_number(serve: Serve) -> None:
    port = serve()
    response = httpx.post(
        f"http://127.0.0.1:{port}/rollouts/cancel", json={"ids": list(range(10_000))},
        timeout=SOCKET_TIMEOUT,
    )  # fmt: skip
    assert response.status_code == 422, response.text[:500]
    answered = response.json()
    assert len(answered["detail"]) == MAX_ECHOED_ERRORS
    assert answered["errors_note"].startswith("10000 errors")
    assert len(response.content) < 10_000


def test_an_echo_keeps_non_finite_inputs_as_their_names_and_cuts_long_keys() -> None:
    key = "k" * 5_000
    echoed = validation_errors(
        [
            {"type": "finite_number", "loc": ("body", "x"), "msg": "bad", "input": math.nan},
            {"type": "extra_forbidden", "loc": ("body", key), "msg": "no", "input": 1,
             "ctx": {"secret": "x"}},
        ]
    )  # fmt: skip
    nan, extra = echoed["detail"]
    assert nan["input"] == "nan"
    assert len(extra["loc"][1]) < 300 and "5000 characters" in extra["loc"][1]
    assert "ctx" not in extra and "errors_note" not in echoed
    json.dumps(echoed, allow_nan=False)  # strict JSON
