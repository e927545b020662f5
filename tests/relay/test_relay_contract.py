"""The relay's fake sandbox against the real one: the same scenarios, the same answers.

test_relay_fake.py drives the relay through faults only a fake makes on demand. This file
shows that wherever the fake answers, it answers as the Docker sandbox does: the leader
probe, a signal to the leader or its group, the group check, the user's ids, the launcher
that cannot record its pid, an exec in a removed sandbox or with an engine that stopped
answering. Each scenario sends the relay's own command values (`relay.commands`), which the
fake answers by kind and the Docker sandbox runs as their sh, to the fake and (marked
`docker`) to a container of the example task's image, and checks both against the answers
the commands and fake_sandbox.py write down.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import requests

from orchestrator import TrialConfig
from orchestrator.backends.docker import api as docker_api
from orchestrator.backends.docker.sandbox import DockerSandbox
from orchestrator.common.errors import SandboxError, SandboxNotFoundError
from orchestrator.sandbox import SandboxSpec
from relay import Ending, Relay, RelayPolicy
from relay.commands import GroupAlive, GroupState, Launch, ProbeLeader, Signal, UserIds
from relay.launcher import LaunchPaths
from relay.protocol import Command, ExecOutput, RelaySandbox
from tests.conftest import EXAMPLES, TEST_OWNER, ensure_task_image
from tests.relay.fake_sandbox import (
    GROUP_ALIVE,
    GROUP_GONE,
    GROUP_NOT_PERMITTED,
    NO_SUCH_PROCESS,
    SIGNAL_EXIT,
    FakeSandbox,
    unknown_user_output,
)

STATE_DIR = "/tmp/relay-contract"
POLICY = RelayPolicy(
    term_grace=1, kill_grace=1, abort_term_quiet=2, abort_kill_quiet=2, destroy_deadline=30
)
WITHIN = 30.0  # the bound on every wait for a state; reached only when something is wrong


def answer(got: ExecOutput) -> tuple[int | None, str]:
    return got.exit_code, got.output


def new_paths(state_dir: str = STATE_DIR) -> LaunchPaths:
    return LaunchPaths(state_dir, secrets.token_hex(8), "/tmp/out.txt", "/tmp/err.txt")


class Sandboxes:
    """Makes sandboxes of one kind, launches subjects in them, and cleans up after the test.

    Real ones run the example task's image: a sandbox's image carries trialbox's runtime."""

    def __init__(self, kind: str, config: TrialConfig | None = None) -> None:
        self.kind = kind
        self.config = config
        self.made: list[Any] = []
        self.subjects: list[asyncio.Future[ExecOutput]] = []

    async def make(self, **fake_behaviour: Any) -> RelaySandbox:
        """A fake with `fake_behaviour`, or a real container (where the same behaviour comes
        from the shell commands the test runs)."""
        sandbox: Any
        if self.kind == "fake":
            sandbox = FakeSandbox(**fake_behaviour)
        else:
            assert self.config is not None
            spec = SandboxSpec(
                image=await ensure_task_image(self.config, EXAMPLES / "hello-oracle"),
                trial_id=f"relay-contract-{uuid.uuid4().hex[:8]}",
                job_id="relay-contract",
                owner=TEST_OWNER,
            )
            sandbox = await DockerSandbox.create(spec)
        self.made.append(sandbox)
        return sandbox

    def launch(
        self, sandbox: RelaySandbox, paths: LaunchPaths, subject: str
    ) -> asyncio.Future[ExecOutput]:
        """The launcher's exec, as the relay starts it (the image's own user)."""
        launched = asyncio.ensure_future(sandbox.exec(Launch(paths, subject, has_env=False)))
        self.subjects.append(launched)
        return launched

    async def close(self) -> None:
        for sandbox in self.made:
            if isinstance(sandbox, FakeSandbox):
                sandbox.release()
            else:
                await sandbox.destroy()
        for subject in self.subjects:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(subject, WITHIN)


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.docker)])
async def sandboxes(request: pytest.FixtureRequest) -> AsyncIterator[Sandboxes]:
    config = request.getfixturevalue("config") if request.param == "real" else None
    made = Sandboxes(request.param, config)
    yield made
    await made.close()


@pytest.fixture
async def real_sandboxes(config: TrialConfig) -> AsyncIterator[Sandboxes]:
    made = Sandboxes("real", config)
    yield made
    await made.close()


async def probe(sandbox: RelaySandbox, paths: LaunchPaths) -> ExecOutput:
    """The relay's leader probe, run as the relay runs it."""
    return await sandbox.exec(ProbeLeader(paths), timeout_sec=10, user="root")


async def until_leader(sandbox: RelaySandbox, paths: LaunchPaths) -> int:
    """The pid the probe prints once the launcher has recorded it."""
    deadline = time.monotonic() + WITHIN
    while True:
        got = await probe(sandbox, paths)
        if got.exit_code == 0:
            assert re.fullmatch(r"[0-9]+\n", got.output), got.output
            pid = int(got.output)
            assert got.output == ProbeLeader.answer(pid)
            return pid
        assert time.monotonic() < deadline, f"no leader within {WITHIN} s: {answer(got)}"
        await asyncio.sleep(0.05)


async def until_output(
    sandbox: RelaySandbox, command: str | Command, done: Callable[[str], bool]
) -> ExecOutput:
    """Run `command` (as root) until its output satisfies `done`."""
    deadline = time.monotonic() + WITHIN
    while True:
        got = await sandbox.exec(command, timeout_sec=10, user="root")
        if done(got.output):
            return got
        assert time.monotonic() < deadline, f"{command!r} still prints {got.output!r}"
        await asyncio.sleep(0.05)


async def as_root(sandbox: RelaySandbox, command: str | Command) -> ExecOutput:
    return await sandbox.exec(command, timeout_sec=10, user="root")


# -- the leader probe ---------------------------------------------------------------------------


async def test_the_leader_probe_prints_the_leaders_pid_only_while_it_runs(
    sandboxes: Sandboxes,
) -> None:
    sandbox = await sandboxes.make()
    paths = new_paths()
    assert answer(await probe(sandbox, paths)) == (1, "")  # nothing launched: no leader

    subject = sandboxes.launch(sandbox, paths, "sleep 600")
    pid = await until_leader(sandbox, paths)
    assert pid > 1
    assert answer(await probe(sandbox, paths)) == (0, ProbeLeader.answer(pid))

    assert answer(await as_root(sandbox, Signal("KILL", pid))) == (0, "")
    assert (await asyncio.wait_for(subject, WITHIN)).exit_code == SIGNAL_EXIT["KILL"]
    assert answer(await probe(sandbox, paths)) == (1, "")  # it ended: no leader again


async def test_the_probed_pid_is_the_launchers_own_an_exec_d_group_leader(
    real_sandboxes: Sandboxes,
) -> None:
    """What the fake's `leader` stands for: the pid the launcher recorded, of a process
    `docker exec` started (PPid 0) that leads its own group."""
    sandbox = await real_sandboxes.make()
    paths = new_paths()
    real_sandboxes.launch(sandbox, paths, "sleep 600 & sleep 600")
    pid = await until_leader(sandbox, paths)

    recorded = await as_root(sandbox, f"cat {paths.pid_file}")
    status = await as_root(
        sandbox, f"grep '^PPid:' /proc/{pid}/status; cut -d' ' -f5 /proc/{pid}/stat"
    )
    assert recorded.output == f"{pid}\n"
    assert status.output.split() == ["PPid:", "0", str(pid)]  # exec'd, and its group's leader
    await as_root(sandbox, Signal("KILL", pid, group=True))


# -- signals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("signal", ["TERM", "KILL"])
async def test_a_signal_to_the_leader_ends_the_launchers_exec_with_128_plus_its_number(
    sandboxes: Sandboxes, signal: str
) -> None:
    sandbox = await sandboxes.make()
    paths = new_paths()
    subject = sandboxes.launch(sandbox, paths, "sleep 600")
    pid = await until_leader(sandbox, paths)

    assert answer(await as_root(sandbox, Signal(signal, pid))) == (0, "")

    assert answer(await asyncio.wait_for(subject, WITHIN)) == (SIGNAL_EXIT[signal], "")
    assert SIGNAL_EXIT[signal] == 128 + {"TERM": 15, "KILL": 9}[signal]


async def test_a_signal_to_a_leader_that_is_gone_fails_with_no_such_process(
    sandboxes: Sandboxes,
) -> None:
    sandbox = await sandboxes.make()
    paths = new_paths()
    subject = sandboxes.launch(sandbox, paths, "sleep 600")
    pid = await until_leader(sandbox, paths)
    await as_root(sandbox, Signal("KILL", pid))
    await asyncio.wait_for(subject, WITHIN)

    assert answer(await as_root(sandbox, Signal("TERM", pid))) == (1, NO_SUCH_PROCESS)


# -- the group check ----------------------------------------------------------------------------


async def test_the_group_check_reads_rc0_while_the_group_lives_and_no_such_process_after(
    sandboxes: Sandboxes,
) -> None:
    sandbox = await sandboxes.make()
    paths = new_paths()
    subject = sandboxes.launch(sandbox, paths, "sleep 600 & sleep 600")
    pid = await until_leader(sandbox, paths)

    alive = await as_root(sandbox, GroupAlive(pid))
    assert answer(alive) == (0, GROUP_ALIVE)
    assert GroupAlive.read(alive) is GroupState.ALIVE
    assert answer(await as_root(sandbox, Signal("KILL", pid, group=True))) == (0, "")
    assert (await asyncio.wait_for(subject, WITHIN)).exit_code == SIGNAL_EXIT["KILL"]
    # Killed processes linger as zombies until reaped: the relay polls, and so does this.
    gone = await until_output(sandbox, GroupAlive(pid), lambda out: out != GROUP_ALIVE)
    assert answer(gone) == (0, GROUP_GONE)
    assert GroupAlive.read(gone) is GroupState.GONE
    assert answer(await as_root(sandbox, Signal("KILL", pid, group=True))) == (1, NO_SUCH_PROCESS)


async def test_a_group_check_without_the_right_to_signal_reads_operation_not_permitted(
    sandboxes: Sandboxes,
) -> None:
    """The fake's `group_check="odd"`: an answer that is neither alive nor gone."""
    sandbox = await sandboxes.make(group_check="odd")
    paths = new_paths()
    sandboxes.launch(sandbox, paths, "sleep 600")  # root's group
    pid = await until_leader(sandbox, paths)

    odd = await sandbox.exec(GroupAlive(pid), timeout_sec=10, user="nobody")

    assert answer(odd) == (0, GROUP_NOT_PERMITTED)
    assert GroupAlive.read(odd) is GroupState.UNKNOWN  # neither alive nor gone
    await as_root(sandbox, Signal("KILL", pid, group=True))


# -- users --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("root", (0, UserIds.answer(0, 0))),
        ("nobody", (0, UserIds.answer(65534, 65534))),
        ("ghost", (126, unknown_user_output("ghost"))),
    ],
)
async def test_id_prints_uid_and_gid_and_an_unknown_user_fails_the_exec(
    sandboxes: Sandboxes, user: str, expected: tuple[int, str]
) -> None:
    sandbox = await sandboxes.make()

    got = answer(await sandbox.exec(UserIds(), timeout_sec=10, user=user))
    if user == "ghost" and got == (126, ""):
        # Docker's own exec failure races the output stream: under load the engine sometimes
        # ends the exec with 126 and no message (seen in a full run here). The exit code is
        # what the relay reads; the fake always gives the message.
        assert sandboxes.kind == "real"
        return
    assert got == expected


async def test_credentials_for_an_unknown_user_fail_the_launch(sandboxes: Sandboxes) -> None:
    sandbox = await sandboxes.make()
    relay = Relay(sandbox, policy=POLICY, state_dir=STATE_DIR)

    with pytest.raises(RuntimeError, match="ghost"):
        await relay.run("touch /tmp/ran", timeout_sec=20, env={"K": "v"}, user="ghost")

    assert relay.outcome is None  # nothing was launched, so there is nothing to decide


# -- scope unavailable --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state_dir", "user"),
    [
        ("/dev/null/relay", "root"),  # mkdir cannot succeed, even as root
        ("/etc", "nobody"),  # the directory exists; the pid file is not writable
    ],
)
async def test_a_launcher_that_cannot_record_its_pid_exits_125_with_its_marker(
    sandboxes: Sandboxes, state_dir: str, user: str
) -> None:
    sandbox = await sandboxes.make(scope_unavailable=True)
    paths = new_paths(state_dir)

    ended = await sandbox.exec(Launch(paths, "touch /tmp/ran", has_env=False), user=user)

    assert answer(ended) == (125, f"{paths.scope_marker}\n")
    outcome = await Relay(sandbox, policy=POLICY, state_dir=state_dir).run(
        "touch /tmp/ran", timeout_sec=20, user=user
    )
    assert outcome.ending is Ending.INFRA_FAILURE and "scope unavailable" in outcome.detail


# -- a sandbox that is gone ---------------------------------------------------------------------


async def test_an_exec_in_a_removed_sandbox_raises_not_found_and_the_relay_fails_closed(
    sandboxes: Sandboxes,
) -> None:
    sandbox = await sandboxes.make()
    await sandbox.destroy()

    with pytest.raises(SandboxNotFoundError):
        await sandbox.exec("true", timeout_sec=10)
    with pytest.raises(SandboxNotFoundError):
        await sandbox.upload_file("/tmp/x", b"x")
    outcome = await Relay(sandbox, policy=POLICY, state_dir=STATE_DIR).run("true", timeout_sec=20)
    assert outcome.ending is Ending.INFRA_FAILURE
    assert outcome.sandbox_destroyed and not outcome.scoreable
    assert "SandboxNotFoundError" in outcome.detail


async def test_an_engine_that_stops_answering_raises_a_sandbox_error(
    sandboxes: Sandboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake's `signal_mode="raise"`; the real boundary translates a transport error."""
    sandbox = await sandboxes.make(signal_mode="raise")
    if sandboxes.kind == "real":

        def refused(*args: object, **kwargs: object) -> None:
            raise requests.exceptions.ConnectionError("injected: connection refused")

        monkeypatch.setattr(docker_api.docker_client().api, "exec_create", refused)

    with pytest.raises(SandboxError) as raised:
        await as_root(sandbox, Signal("TERM", 4242))

    assert type(raised.value) is SandboxError  # not a NotFound: the sandbox may still be there
    assert "did not answer" in str(raised.value)
