"""The command channel into a Docker sandbox (`DockerSandbox.open_channel`): many commands on
one open exec, each with its own exit code, outputs, caps and timeout; nothing survives its
close or the sandbox's removal. The fake backend has no channel (it is optional)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from orchestrator import TrialConfig, load_task
from orchestrator.backends.docker.inspection import KEEPALIVE_SLEEP
from orchestrator.backends.docker.sandbox import DockerSandbox
from orchestrator.backends.fake import FakeBackend
from orchestrator.common.errors import SandboxError
from orchestrator.common.ids import new_id
from orchestrator.sandbox import Sandbox, SandboxSpec
from orchestrator.sandbox.channel import ChannelSandbox, CommandChannel, ShellChannel
from tests.conftest import EXAMPLES, TEST_OWNER, docker_sandbox

MB = 1 << 20
# Every process in the sandbox but the keepalive loop (PID 1), its sleep and this listing.
OTHERS = (
    "for p in /proc/[0-9]*; do c=$(tr '\\0\\n' '  ' < $p/cmdline 2>/dev/null) || continue; "
    '[ "${p#/proc/}" = 1 ] || [ "${p#/proc/}" = $$ ] && continue; '
    f'case "$c" in "{KEEPALIVE_SLEEP} "|"") continue;; esac; '
    'printf "%s %s\\n" "${p#/proc/}" "$c"; done'
)


async def open_channel(sandbox: DockerSandbox, user: str = "") -> ShellChannel:
    channel = await sandbox.open_channel(user)
    assert channel is not None
    return channel


LOOP = "read -r hello"  # in the channel's loop's command line


async def others(sandbox: Sandbox, *, loops: bool = True) -> list[str]:
    """Every other process, as "pid command line"; without the channels' loops if not
    `loops`."""
    listing = await sandbox.exec(OTHERS, timeout_sec=20)
    assert listing.exit_code == 0, listing.output
    lines = [line for line in listing.output.splitlines() if "/proc/" not in line]
    return [line for line in lines if loops or LOOP not in line]


async def test_the_channel_is_an_optional_capability() -> None:
    backend = FakeBackend()
    built = await backend.ensure_image(load_task(EXAMPLES / "hello-oracle"), {})
    fake = await backend.create_sandbox(
        SandboxSpec(
            image=built.tag, trial_id=new_id("channel"), job_id=new_id("job-channel"),
            owner=TEST_OWNER,
        )
    )  # fmt: skip
    try:
        assert not isinstance(fake, ChannelSandbox)
    finally:
        await fake.destroy()


async def test_many_commands_in_sequence_with_exact_outputs(config: TrialConfig) -> None:
    async with docker_sandbox(config, name="channel") as sandbox:
        assert isinstance(sandbox, ChannelSandbox)
        channel = await open_channel(sandbox)
        assert isinstance(channel, CommandChannel)
        try:
            for i in range(30):
                result = await channel.run(f"echo out{i}; echo err{i} >&2; exit {i % 7}")
                assert result.exit_code == i % 7
                assert (result.stdout, result.stderr) == (b"out%d\n" % i, b"err%d\n" % i)
                assert not (result.stdout_truncated or result.stderr_truncated or result.timed_out)
            binary = await channel.run(
                'i=0; while [ $i -lt 256 ]; do printf "\\\\$(printf %o $i)"; i=$((i+1)); done'
            )
            assert binary.stdout == bytes(range(256))
            made = await channel.run(f"head -c {MB} /dev/urandom > /tmp/big && sha256sum /tmp/big")
            digest = made.stdout.split()[0].decode()
            whole = await channel.run("cat /tmp/big", output_cap=MB)
            assert hashlib.sha256(whole.stdout).hexdigest() == digest
            assert len(whole.stdout) == MB and not whole.stdout_truncated
            cut = await channel.run("cat /tmp/big; cat /tmp/big >&2", output_cap=MB - 1)
            assert cut.stdout == whole.stdout[: MB - 1] == cut.stderr
            assert cut.stdout_truncated and cut.stderr_truncated and cut.exit_code == 0
            empty = await channel.run("true")
            assert (empty.exit_code, empty.stdout, empty.stderr) == (0, b"", b"")
            here = await channel.run(["sh", "-c", 'pwd; echo "$A|$B"'], cwd="/tmp", env={
                "A": "x y", "B": "it's",
            })  # fmt: skip
            assert here.stdout == b"/tmp\nx y|it's\n"
            missing = await channel.run("cd /nowhere", cwd="/")
            assert missing.exit_code != 0 and b"nowhere" in missing.stderr
            as_nobody = await open_channel(sandbox, "nobody")
            try:
                assert (await as_nobody.run("id -un")).stdout == b"nobody\n"
            finally:
                await as_nobody.close()
        finally:
            await channel.close()
        assert await others(sandbox) == []


async def test_a_timed_out_command_loses_its_whole_group(config: TrialConfig) -> None:
    config.limits = config.limits.model_copy(update={"exec_kill_after_sec": 1.0})
    async with docker_sandbox(config, name="channel") as sandbox:
        channel = await open_channel(sandbox)
        try:
            result = await channel.run(
                "sleep 300 & sleep 301 & echo started; sleep 302", timeout_sec=1.0
            )
            assert result.timed_out and result.exit_code == 143
            assert result.stdout == b"started\n"
            assert await others(sandbox, loops=False) == [], "the group's children survived"
            stubborn = await channel.run("trap '' TERM; sleep 303", timeout_sec=0.5)
            assert stubborn.timed_out and stubborn.exit_code == 137
            assert 1.5 <= stubborn.duration_sec < 10
            again = await channel.run("echo still here")
            assert (again.stdout, again.timed_out) == (b"still here\n", False)
        finally:
            await channel.close()
        assert await others(sandbox) == []


async def test_close_leaves_no_process(config: TrialConfig) -> None:
    async with docker_sandbox(config, name="channel") as sandbox:
        channel = await open_channel(sandbox)
        await channel.run("sleep 300 > /dev/null 2>&1 & (setsid sleep 301 > /dev/null 2>&1 &)")
        assert len(await others(sandbox)) >= 2  # the loop and its groups are there
        await channel.close()
        await channel.close()  # idempotent
        left = await others(sandbox)
        assert [line for line in left if "sleep 300" in line] == []
        # A process that left the command's group on purpose is not the channel's to find,
        # as with a plain exec; everything the channel itself started is gone.
        assert [line for line in left if LOOP in line] == []
        with pytest.raises(SandboxError):
            await channel.run("true")


async def test_destroying_the_sandbox_with_a_channel_open_ends_cleanly(
    config: TrialConfig,
) -> None:
    async with docker_sandbox(config, name="channel") as sandbox:
        channel = await open_channel(sandbox)
        idle = await open_channel(sandbox)
        running = asyncio.ensure_future(channel.run("sleep 300", timeout_sec=120))
        await asyncio.sleep(0.5)
        await asyncio.wait_for(sandbox.destroy(), 30)
        with pytest.raises(SandboxError):
            await asyncio.wait_for(running, 30)
        await asyncio.wait_for(channel.close(), 30)
        await asyncio.wait_for(idle.close(), 30)
        with pytest.raises(SandboxError):
            await sandbox.open_channel()
