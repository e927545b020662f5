"""The command channel's wire, without an engine: requests as `printf '%b'` reads them back,
replies parsed however they are split, and the loop itself on a local `sh` (its process
groups, timeouts and close), which is the same script a container runs."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess

import pytest

from orchestrator.sandbox.channel import (
    ChannelBrokenError,
    ChannelResult,
    CommandChannel,
    Done,
    Failed,
    Ready,
    ReplyParser,
    Started,
    command_script,
    encode_line,
    encode_request,
    kill_command,
)
from tests.sandbox.local_channel import open_local_channel


def printf_b(line: bytes) -> bytes:
    """What the loop's `printf '%b'` writes for one encoded line (the host's own dash/sh)."""
    return subprocess.run(
        ["sh", "-c", 'IFS= read -r s; printf "%b" "$s"'], input=line + b"\n",
        capture_output=True, check=True,
    ).stdout  # fmt: skip


def test_every_byte_round_trips_through_printf() -> None:
    data = bytes(range(1, 256)) + b"\\0101 \\n %s %b '\"$(x)`y`\n\n  \t"
    line = encode_line(data)
    assert b"\n" not in line and b"\\" not in line.replace(b"\\0", b"")
    assert printf_b(line) == data


def test_the_encoding_keeps_safe_bytes_as_they_are() -> None:
    assert encode_line(b"echo hi > /tmp/x") == b"echo hi > /tmp/x"
    assert encode_line(b"a\nb\\") == b"a\\0012b\\0134"


def test_command_script_puts_cwd_and_env_before_the_command() -> None:
    script = command_script("echo $A", env={"A": "it's $HOME"}, cwd="/my dir")
    assert script == b"cd -- '/my dir' || exit 126\nexport A='it'\"'\"'s $HOME'\necho $A\n"
    ran = subprocess.run(["sh", "-c", script.decode().replace("/my dir", "/")], capture_output=True)
    assert ran.stdout == b"it's $HOME\n"


def test_an_argv_is_execed_as_given() -> None:
    script = command_script(["printf", "%s|", "a b", "$x", "'"])
    assert script == b"exec " + shlex.join(["printf", "%s|", "a b", "$x", "'"]).encode() + b"\n"
    assert subprocess.run(["sh", "-c", script.decode()], capture_output=True).stdout == (
        b"a b|$x|'|"
    )


@pytest.mark.parametrize(
    ("command", "env"),
    [("true", {"A-B": "1"}), ("true", {"": "1"}), ("a\0b", None), ([], None)],
)
def test_bad_requests_are_refused_on_the_host(command: str | list[str], env: dict | None) -> None:
    with pytest.raises(ValueError):
        command_script(command, env=env)


def test_a_request_asks_for_one_byte_past_the_cap() -> None:
    assert encode_request(7, 100, b"true\n") == b"RUN 7 101\ntrue\\0012\n"
    with pytest.raises(ValueError):
        encode_request(1, -1, b"true\n")


def test_replies_parse_however_the_stream_is_split() -> None:
    body_out, body_err = b"DONE 1 0 0 0\nSTARTED 9 9\n\x00", b"\nerr"
    stream = (
        b"READY 42\nSTARTED 1 77\n"
        + b"DONE 1 3 %d %d\n" % (len(body_out), len(body_err)) + body_out + body_err
        + b"FAIL 2\nSTARTED 3 80\nDONE 3 0 0 0\n"
    )  # fmt: skip
    expected = [
        Ready(42), Started(1, 77), Done(1, 3, body_out, body_err), Failed(2), Started(3, 80),
        Done(3, 0, b"", b""),
    ]  # fmt: skip
    assert ReplyParser().feed(stream) == expected
    parser = ReplyParser()
    one_by_one = [reply for i in range(len(stream)) for reply in parser.feed(stream[i : i + 1])]
    assert one_by_one == expected


@pytest.mark.parametrize("line", [b"hello\n", b"DONE 1 x 0 0\n", b"DONE 1 0 -1 0\n", b"x" * 300])
def test_an_unframed_reply_breaks_the_channel(line: bytes) -> None:
    with pytest.raises(ChannelBrokenError):
        ReplyParser().feed(line)


def test_kill_command_names_groups_and_refuses_odd_signals() -> None:
    assert kill_command("TERM", [12, 34]) == "kill -s TERM -- -12 -34 2>/dev/null; exit 0"
    assert kill_command("KILL", [0, 1]) == "exit 0"  # never the whole session, never init
    with pytest.raises(ValueError):
        kill_command("TERM; rm", [12])


# -- the loop on a local sh ------------------------------------------------------------------


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


async def test_commands_in_sequence_keep_their_own_exit_codes_and_outputs() -> None:
    channel, _ = await open_local_channel()
    try:
        assert isinstance(channel, CommandChannel)
        for i in range(20):
            result = await channel.run(f"printf 'o{i}'; printf 'e{i}' >&2; exit {i}")
            assert (result.exit_code, result.stdout, result.stderr) == (i, b"o%d" % i, b"e%d" % i)
        binary = bytes(range(256)) * 4
        result = await channel.run(["printf", "%b", encode_line(binary).decode()])
        assert result.stdout == binary and not result.stdout_truncated
        result = await channel.run("head -c 100000 /dev/zero; echo x >&2", output_cap=1000)
        assert result == ChannelResult(
            exit_code=0, stdout=b"\0" * 1000, stderr=b"x\n", stdout_truncated=True,
            duration_sec=result.duration_sec,
        )  # fmt: skip
        result = await channel.run("printf 12345", output_cap=5)
        assert (result.stdout, result.stdout_truncated) == (b"12345", False)
        empty = await channel.run("true")
        assert (empty.stdout, empty.stderr, empty.exit_code) == (b"", b"", 0)
        here = await channel.run("pwd; echo $X", cwd="/", env={"X": "a b"})
        assert here.stdout == b"/\na b\n"
    finally:
        await channel.close()


async def test_a_timed_out_command_loses_its_group_and_the_channel_goes_on(tmp_path) -> None:
    channel, _ = await open_local_channel(kill_grace_sec=0.3)
    pids = tmp_path / "pids"
    try:
        result = await channel.run(
            f"sleep 60 & echo $! > {pids}; trap '' TERM; sleep 60", timeout_sec=0.5
        )
        assert result.timed_out and result.exit_code == 137  # TERM ignored: KILL after grace
        child = int(pids.read_text())
        await asyncio.sleep(0.1)
        assert not alive(child)
        assert (await channel.run("echo on")).stdout == b"on\n"
    finally:
        await channel.close()


async def test_close_leaves_no_process(tmp_path) -> None:
    channel, transport = await open_local_channel()
    pids = tmp_path / "pids"
    await channel.run(f"sleep 60 > /dev/null 2>&1 & echo $! > {pids}")
    child = int(pids.read_text())
    assert alive(child)
    await channel.close()
    assert transport.process.returncode == 0
    await asyncio.sleep(0.1)
    assert not alive(child)
    with pytest.raises(ChannelBrokenError):
        await channel.run("true")
