"""What an exec does, on every backend: exit codes, in-sandbox timeouts, environment, user,
folder, merged and capped output, and what the sandbox's real sh does with chaining,
redirections, permissions, signals and scripts (the fake runs the host's sh in the sandbox's
folder and namespaces: `orchestrator/backends/fake/shell.py`).
"""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.common.archive import tar_of_files
from orchestrator.common.errors import SandboxError
from orchestrator.common.limits import Limits
from relay.commands import UserIds
from tests.conformance.conftest import BackendUnderTest, wait_until

SCRIPT = (
    b"#!/bin/sh\n# a comment line\necho one\n\necho two  # a trailing comment\nexit 4\necho never\n"
)


@pytest.mark.parametrize(("command", "code"), [("exit 3", 3), ("true", 0), ("exit 1", 1)])
async def test_exit_codes_come_back(backend: BackendUnderTest, command: str, code: int) -> None:
    async with backend.sandbox() as sandbox:
        result = await sandbox.exec(command)

    assert result.exit_code == code
    assert result.output == ""
    assert result.timed_out is False


async def test_a_command_past_its_timeout_exits_124_and_is_timed_out(
    backend: BackendUnderTest,
) -> None:
    async with backend.sandbox() as sandbox:
        result = await sandbox.exec("echo before; sleep 5", timeout_sec=0.3)

    assert result.exit_code == 124
    assert result.timed_out is True
    assert result.output == "before\n"
    assert result.duration_sec < 4


async def test_a_command_that_ignores_term_is_killed_past_its_timeout_with_137(
    backend: BackendUnderTest,
) -> None:
    """`timeout -k`: TERM at the limit is ignored, so KILL ends it the grace later."""
    async with backend.sandbox() as sandbox:
        result = await sandbox.exec("trap '' TERM; echo before; sleep 20", timeout_sec=0.3)

    kill_after = Limits().exec_kill_after_sec  # the backend runs with the defaults
    assert result.exit_code == 137
    assert result.timed_out is True
    assert result.output == "before\n"
    assert kill_after <= result.duration_sec < kill_after + 10


async def test_a_command_that_exits_124_by_itself_is_not_timed_out(
    backend: BackendUnderTest,
) -> None:
    async with backend.sandbox() as sandbox:
        result = await sandbox.exec("exit 124", timeout_sec=5)

    assert result.exit_code == 124
    assert result.timed_out is False


async def test_env_reaches_the_command(backend: BackendUnderTest) -> None:
    async with backend.sandbox() as sandbox:
        result = await sandbox.exec(
            'echo "$FOO|${BAR}|$UNSET|"', env={"FOO": "bar", "BAR": "two words"}
        )

    assert result.output == "bar|two words||\n"


async def test_user_root_nobody_and_the_image_default(backend: BackendUnderTest) -> None:
    async with backend.sandbox() as sandbox:
        as_root = await sandbox.exec(UserIds(), user="root")
        as_nobody = await sandbox.exec(UserIds(), user="nobody")
        default = await sandbox.exec(UserIds())

    assert UserIds.read(as_root) == (0, 0)
    assert UserIds.read(as_nobody) == (65534, 65534)
    assert UserIds.read(default) == (0, 0)  # examples/hello-oracle sets no USER


async def test_numeric_and_unknown_users(backend: BackendUnderTest) -> None:
    async with backend.sandbox() as sandbox:
        numeric = await sandbox.exec(UserIds(), user="1234:5678")
        unknown = await sandbox.exec(UserIds(), user="ghost")

    assert UserIds.read(numeric) == (1234, 5678)
    # Docker's runtime says "unable to find user ghost…", but not always before the stream
    # closes (seen empty under load): only the exit code is the contract.
    assert unknown.exit_code == 126


async def test_workdir_and_the_image_default(backend: BackendUnderTest) -> None:
    """A relative path is taken from the exec's folder: the one asked for, else the image's."""
    async with backend.sandbox() as sandbox:
        await sandbox.exec("echo chosen > here.txt", workdir="/tmp")
        await sandbox.exec("echo default > here.txt")
        chosen = await sandbox.exec("cat /tmp/here.txt")
        default = await sandbox.exec("cat /app/here.txt")  # the Dockerfile's WORKDIR

    assert chosen.output == "chosen\n"
    assert default.output == "default\n"


async def test_stdout_and_stderr_are_merged_and_capped(backend: BackendUnderTest) -> None:
    async with backend.sandbox() as sandbox:
        merged = await sandbox.exec("echo out; echo err >&2")
        capped = await sandbox.exec("echo 0123456789", output_cap=4)

    # Two pipes: Docker does not promise their order (seen both ways); the fake writes in order.
    assert sorted(merged.output.splitlines()) == ["err", "out"]
    assert merged.truncated is False
    assert capped.output == "0123"
    assert capped.truncated is True


async def test_an_unknown_command_exits_127_saying_not_found(backend: BackendUnderTest) -> None:
    async with backend.sandbox() as sandbox:
        result = await sandbox.exec("no-such-command-xyz --flag")

    assert result.exit_code == 127
    assert "no-such-command-xyz" in result.output
    assert "not found" in result.output


async def test_chaining_and_redirections(backend: BackendUnderTest) -> None:
    async with backend.sandbox() as sandbox:
        written = await sandbox.exec(
            "echo first > /tmp/f && echo second >> /tmp/f; false && echo skipped; cat /tmp/f"
        )
        silenced = await sandbox.exec("cat /tmp/missing 2>/dev/null; echo rc=$?")

    assert written.output == "first\nsecond\n"
    assert silenced.output == "rc=1\n"


async def test_mkdir_rm_and_chmod(backend: BackendUnderTest) -> None:
    async with backend.sandbox() as sandbox:
        made = await sandbox.exec("mkdir -p /tmp/a/b && echo x > /tmp/a/b/c && cat /tmp/a/b/c")
        removed = await sandbox.exec("rm -rf /tmp/a && cat /tmp/a/b/c")
        forced = await sandbox.exec("rm -f /tmp/never-there")
        await sandbox.exec("echo secret > /tmp/m && chmod 0600 /tmp/m")
        hidden = await sandbox.exec("cat /tmp/m", user="nobody")
        await sandbox.exec("chmod 644 /tmp/m")
        shown = await sandbox.exec("cat /tmp/m", user="nobody")

    assert (made.exit_code, made.output) == (0, "x\n")
    assert removed.exit_code != 0
    assert "No such file or directory" in removed.output
    assert forced.exit_code == 0
    assert hidden.exit_code == 1
    assert "Permission denied" in hidden.output
    assert shown.output == "secret\n"


async def test_a_non_root_user_cannot_write_into_a_root_folder(
    backend: BackendUnderTest,
) -> None:
    async with backend.sandbox() as sandbox:
        await sandbox.exec("mkdir -p /tmp/roots && chmod 0755 /tmp/roots")
        refused = await sandbox.exec("echo forged > /tmp/roots/reward.txt", user="nobody")
        absent = await sandbox.exec("cat /tmp/roots/reward.txt")

    assert refused.exit_code == 2
    assert "Permission denied" in refused.output
    assert absent.exit_code == 1


@pytest.mark.parametrize(
    "runner", ["sh /tmp/s.sh", "bash /tmp/s.sh", "$(command -v bash || echo sh) /tmp/s.sh"]
)
async def test_a_script_runs_line_by_line(backend: BackendUnderTest, runner: str) -> None:
    async with backend.sandbox() as sandbox:
        await sandbox.upload(tar_of_files({"s.sh": (SCRIPT, 0o755)}), "/tmp")
        result = await sandbox.exec(runner)

    assert result.exit_code == 4
    assert result.output == "one\ntwo\n"


async def test_echo_reads_backslash_escapes_in_sh_but_not_in_bash(
    backend: BackendUnderTest,
) -> None:
    async with backend.sandbox() as sandbox:
        await sandbox.upload(tar_of_files({"e.sh": b"echo 'a\\tb'\n"}), "/tmp")
        dash = await sandbox.exec("sh /tmp/e.sh")
        bash = await sandbox.exec("bash /tmp/e.sh")
        direct = await sandbox.exec("echo 'x\\ny'")  # an exec's command runs under sh

    assert dash.output == "a\tb\n"
    assert bash.output == "a\\tb\n"
    assert direct.output == "x\ny\n"


async def test_a_script_runs_by_its_path_only_when_executable(
    backend: BackendUnderTest,
) -> None:
    files = {"run.sh": (b"#!/bin/sh\necho ran\n", 0o755), "plain.sh": (b"echo ran\n", 0o644)}
    async with backend.sandbox() as sandbox:
        await sandbox.upload(tar_of_files(files), "/tmp")
        executable = await sandbox.exec("/tmp/run.sh")
        plain = await sandbox.exec("/tmp/plain.sh")

    assert (executable.exit_code, executable.output) == (0, "ran\n")
    assert plain.exit_code == 126
    assert "Permission denied" in plain.output


async def test_set_e_stops_a_script_at_the_first_failure(backend: BackendUnderTest) -> None:
    script = b"set -e\necho a\nfalse\necho b\n"
    async with backend.sandbox() as sandbox:
        await sandbox.upload(tar_of_files({"e.sh": script}), "/tmp")
        result = await sandbox.exec("sh /tmp/e.sh")

    assert (result.exit_code, result.output) == (1, "a\n")


async def test_exec_redirects_the_rest_of_the_shell(backend: BackendUnderTest) -> None:
    async with backend.sandbox() as sandbox:
        result = await sandbox.exec("exec >/tmp/log.txt 2>&1 </dev/null; echo to-file; nope")
        log = await sandbox.exec("cat /tmp/log.txt")

    assert result.exit_code == 127
    assert result.output == ""
    assert log.output.startswith("to-file\n")
    assert "nope" in log.output and "not found" in log.output


async def test_execs_run_concurrently_and_a_removal_ends_them(
    backend: BackendUnderTest,
) -> None:
    async with backend.sandbox() as sandbox:
        slow = asyncio.ensure_future(sandbox.exec("echo up > /tmp/up; sleep 30", timeout_sec=20))

        async def slow_is_running() -> bool:
            return (await sandbox.exec("cat /tmp/up")).exit_code == 0

        await wait_until(slow_is_running)
        fast = await sandbox.exec("echo fast")
        assert not slow.done()  # the quick one did not wait for the slow one
    try:
        ended = await asyncio.wait_for(slow, 30)
    except SandboxError:
        ended = None  # Docker: the engine may have forgotten the exec along with its container

    assert fast.output == "fast\n"
    assert ended is None or (ended.exit_code, ended.timed_out) == (137, False)


@pytest.mark.parametrize(("shell", "code"), [("sh", 2), ("bash", 127)])
async def test_a_missing_script_fails_as_each_shell_fails(
    backend: BackendUnderTest, shell: str, code: int
) -> None:
    async with backend.sandbox() as sandbox:
        result = await sandbox.exec(f"{shell} /tmp/no-such-script.sh")

    assert result.exit_code == code
    assert "/tmp/no-such-script.sh" in result.output


@pytest.mark.parametrize(("shell", "code"), [("sh", 2), ("bash", 126)])
async def test_a_script_the_user_cannot_read_is_refused(
    backend: BackendUnderTest, shell: str, code: int
) -> None:
    async with backend.sandbox() as sandbox:
        await sandbox.upload(tar_of_files({"locked.sh": (b"echo ran\n", 0o700)}), "/tmp")
        result = await sandbox.exec(f"{shell} /tmp/locked.sh", user="nobody")

    assert result.exit_code == code
    assert "Permission denied" in result.output
