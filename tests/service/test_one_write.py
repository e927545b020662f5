"""An answer's head goes out with its body, in one write (`http_protocol.OneWriteAnswer`), and
a head never waits for a body that is not coming: it goes on the loop's next pass, or before
a close. Against a transport that records what it is given; a real server's answers are read
whole by tests/service/test_http_limits.py."""

from __future__ import annotations

import asyncio

from orchestrator.service.http_protocol import OneWriteAnswer


class Recording(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def get_write_buffer_size(self) -> int:
        return 0


def answer_over() -> tuple[OneWriteAnswer, Recording]:
    raw = Recording()
    return OneWriteAnswer(raw, asyncio.get_running_loop()), raw


async def test_the_head_and_the_body_go_out_as_one_write() -> None:
    answer, raw = answer_over()
    answer.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert answer.get_write_buffer_size() == len(b"HTTP/1.1 200 OK\r\n\r\n")
    answer.write(b'{"status":"queued"}')
    answer.write(b"")  # the end of a sized body
    assert raw.writes == [b'HTTP/1.1 200 OK\r\n\r\n{"status":"queued"}']
    await asyncio.sleep(0)  # the loop's next pass: nothing held, nothing more
    answer.write(b"more")  # a streamed body's next chunk goes as it comes
    assert raw.writes == [b'HTTP/1.1 200 OK\r\n\r\n{"status":"queued"}', b"more"]


async def test_a_head_alone_goes_out_on_the_loops_next_pass() -> None:
    answer, raw = answer_over()
    answer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # a client waits for it before its body
    assert raw.writes == []
    await asyncio.sleep(0)
    assert raw.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]


async def test_a_close_sends_the_held_head_first() -> None:
    answer, raw = answer_over()
    answer.write(b"head")
    answer.close()
    assert (raw.writes, raw.closed) == ([b"head"], True)
    await asyncio.sleep(0)
    assert raw.writes == [b"head"]


async def test_an_abort_drops_it() -> None:
    answer, raw = answer_over()
    answer.write(b"head")
    answer.abort()
    await asyncio.sleep(0)
    assert (raw.writes, raw.aborted) == ([], True)
