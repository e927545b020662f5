"""The relay drives every backend's sandbox unchanged: its launcher, leader probe, signals and
group check (`relay/launcher.py`, `relay/supervisor.py`) get the same answers from the fake
as from a real container."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.sandbox import Sandbox
from relay import Ending, Relay, RelayPolicy
from tests.conformance.conftest import BackendUnderTest, wait_until

POLICY = RelayPolicy(
    term_grace=5,
    kill_grace=5,
    abort_term_quiet=5,
    abort_kill_quiet=5,
    poll_interval=0.05,
    signal_timeout=5,
    destroy_deadline=30,
)


def make_relay(sandbox: Sandbox) -> Relay:
    # /logs is the trial's to make; a bare sandbox has /tmp.
    return Relay(
        sandbox, policy=POLICY, state_dir="/tmp/relay", stdout="/tmp/out.txt",
        stderr="/tmp/err.txt",
    )  # fmt: skip


async def test_a_subject_that_ends_by_itself_keeps_its_exit_code_and_output(
    backend: BackendUnderTest,
) -> None:
    async with backend.sandbox() as sandbox:
        relay = make_relay(sandbox)
        outcome = await relay.run(
            'echo "key=$API_KEY"; echo oops >&2; exit 3',
            timeout_sec=30,
            env={"API_KEY": "sk-conformance 'quoted'"},
        )
        out = await sandbox.exec("cat /tmp/out.txt /tmp/err.txt")
        env_file = await sandbox.exec(f"cat {relay.paths.env_file}")

    assert outcome.ending is Ending.EXITED
    assert outcome.exit_code == 3
    assert out.output == "key=sk-conformance 'quoted'\noops\n"
    assert env_file.exit_code == 1  # sourced, then deleted before the subject ran


async def test_a_framework_timeout_stops_the_leader_and_keeps_the_sandbox(
    backend: BackendUnderTest,
) -> None:
    async with backend.sandbox() as sandbox:
        outcome = await make_relay(sandbox).run("echo started; sleep 60", timeout_sec=0.3)
        after = await sandbox.exec("cat /tmp/out.txt")

    assert outcome.ending is Ending.TIMEOUT
    assert outcome.exit_code == 124
    assert outcome.detail == "leader stopped by TERM"
    assert outcome.sandbox_destroyed is False
    assert after.output == "started\n"


async def test_a_host_abort_quiesces_the_group_and_destroys_the_sandbox(
    backend: BackendUnderTest,
) -> None:
    async with backend.sandbox() as sandbox:
        relay = make_relay(sandbox)
        running = asyncio.ensure_future(relay.run("sleep 60", timeout_sec=60))

        async def started() -> bool:
            return (await sandbox.exec(f"cat {relay.paths.pid_file}")).exit_code == 0

        await wait_until(started)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

        assert relay.outcome is not None
        assert relay.outcome.ending is Ending.ABORTED
        assert relay.outcome.detail == "group quiesced"
        assert relay.outcome.sandbox_destroyed is True
        assert sandbox.destroyed is True
    assert await backend.backend.find_leftovers(job=backend.job_id) == []
