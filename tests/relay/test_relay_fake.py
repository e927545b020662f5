"""The relay's decisions against a scripted fake sandbox: faults an engine cannot produce on
demand (a signal exec that hangs, a destroy that never returns, a group check that errors,
a cancel landing at an exact moment).

Every test drives `Relay.run()` directly with a tiny policy, so the whole file runs in a few
seconds. What the fake answers (outputs, exit codes, errors) is what the real sandbox
answers: test_relay_contract.py runs the same scenarios against both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest

from orchestrator.common.errors import SandboxError
from relay import Ending, Relay, RelayOutcome, RelayPolicy
from relay.commands import Launch, ProbeLeader, RemoveFile, Signal, UserIds
from relay.launcher import SCOPE_MARKER, SCOPE_UNAVAILABLE_EXIT
from tests.relay.fake_sandbox import PID, FakeSandbox, engine_gone

SECRET = "sk-relay-secret-987"
COMMAND = "run-the-agent --fast"

POLICY = RelayPolicy(
    term_grace=0.3,
    kill_grace=0.3,
    abort_term_quiet=0.3,
    abort_kill_quiet=0.3,
    poll_interval=0.02,
    signal_timeout=0.2,
    destroy_deadline=0.5,
)
TIMEOUT = 0.2  # the agent timeout: its destroy reserve (0.04 s) is clipped up to 1 s
# Slack on the bounds a hung call must stay within: generous, because a busy 2-core machine
# stretches every step, yet far below the 30 s a hang without the bound would take.
SLACK = 5.0


def make_relay(fake: FakeSandbox, policy: RelayPolicy = POLICY) -> Relay:
    return Relay(fake, policy=policy, state_dir="/logs/agent/.relay")


async def start(relay: Relay, **kwargs: Any) -> asyncio.Task[RelayOutcome]:
    """Start `relay.run()` and wait until the subject runs."""
    fake = relay.sandbox
    assert isinstance(fake, FakeSandbox)
    kwargs.setdefault("timeout_sec", 60.0)
    task = asyncio.ensure_future(relay.run(COMMAND, **kwargs))
    await asyncio.wait_for(fake.subject_started.wait(), 5)
    await asyncio.sleep(0.02)
    return task


async def cancel_and_wait(task: asyncio.Task[RelayOutcome]) -> float:
    """Cancel the run, expect the CancelledError to propagate; return how long it took."""
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)
    return time.monotonic() - started


@pytest.fixture
async def fakes():
    """Fakes made here have their hung calls released at the end of the test."""
    made: list[FakeSandbox] = []

    def make(**kwargs: Any) -> FakeSandbox:
        fake = FakeSandbox(**kwargs)
        made.append(fake)
        return fake

    yield make
    for fake in made:
        fake.release()
    await asyncio.sleep(0.05)


# -- the subject ends by itself --------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 3])
async def test_subject_exit_is_reported_and_nothing_is_torn_down(fakes, code: int) -> None:
    fake = fakes(subject_after=0.1, subject_exit=code)
    relay = make_relay(fake)

    outcome = await relay.run(COMMAND, timeout_sec=5)

    assert outcome == RelayOutcome(Ending.EXITED, exit_code=code)
    assert outcome.scoreable
    assert relay.outcome is outcome
    assert fake.destroy_calls == 0
    assert fake.signals == []
    assert fake.group_checks == 0


async def test_the_subject_runs_the_launcher_once_as_the_given_user(fakes) -> None:
    fake = fakes(subject_after=0.3)
    relay = make_relay(fake)

    await relay.run(COMMAND, timeout_sec=5, user="agent")

    [subject] = fake.subject_execs
    assert subject.user == "agent"
    assert subject.timeout_sec is None  # the relay bounds it, not the exec
    assert subject.command == Launch(relay.paths, COMMAND, has_env=False)
    assert relay.paths.pid_file in subject.shell
    assert subject.shell.rstrip().endswith(f"exec sh -c '{COMMAND}'")
    with pytest.raises(RuntimeError, match="once"):
        await relay.run(COMMAND, timeout_sec=5)


async def test_exec_failure_of_the_subject_fails_closed(fakes) -> None:
    fake = fakes(subject_error=engine_gone())
    relay = make_relay(fake)

    outcome = await relay.run(COMMAND, timeout_sec=5)

    assert outcome.ending is Ending.INFRA_FAILURE
    assert outcome.sandbox_destroyed and not outcome.scoreable
    assert fake.destroy_calls == 1 and fake.destroy_finished


async def test_unreadable_exit_code_fails_closed(fakes) -> None:
    fake = fakes(subject_after=0.05, subject_exit=None)

    outcome = await make_relay(fake).run(COMMAND, timeout_sec=5)

    assert outcome.ending is Ending.INFRA_FAILURE
    assert outcome.sandbox_destroyed and not outcome.scoreable
    assert fake.destroy_calls == 1


# -- framework timeout: only the leader is stopped -------------------------------------------


async def test_timeout_with_a_cooperative_leader_keeps_the_sandbox(fakes) -> None:
    fake = fakes()
    relay = make_relay(fake)

    outcome = await relay.run(COMMAND, timeout_sec=TIMEOUT)

    assert outcome.ending is Ending.TIMEOUT
    assert outcome.exit_code == 124
    assert outcome.scoreable and not outcome.sandbox_destroyed
    assert outcome.detail == "leader stopped by TERM"  # within the TERM grace: no KILL
    assert fake.destroy_calls == 0
    # Only the leader, never the group: `kill -TERM 4242`, not `kill -TERM -4242`.
    assert fake.signals == [Signal("TERM", PID)]
    assert [e.shell for e in fake.execs_of(Signal)] == [f"kill -TERM {PID}"]
    assert fake.group_checks == 0
    assert outcome.stop_sec >= 0
    # The pid file is read as root, whoever the subject runs as.
    reads = fake.execs_of(ProbeLeader)
    assert reads and {e.user for e in reads} == {"root"}
    assert all(e.command == ProbeLeader(relay.paths) for e in reads)


async def test_timeout_with_a_term_ignoring_leader_kills_it(fakes) -> None:
    fake = fakes(leader_dies_on=frozenset({"KILL"}))

    outcome = await make_relay(fake).run(COMMAND, timeout_sec=TIMEOUT)

    assert outcome.ending is Ending.TIMEOUT
    assert outcome.exit_code == 124
    assert outcome.scoreable
    assert outcome.detail == "leader stopped by KILL"  # within the KILL grace
    assert fake.signals == [Signal("TERM", PID), Signal("KILL", PID)]
    assert fake.destroy_calls == 0
    assert outcome.stop_sec >= POLICY.term_grace - 0.05  # the TERM grace was given in full


@pytest.mark.parametrize("signal_mode", ["ok", "fail"])
async def test_a_leader_that_never_confirms_its_exit_fails_closed(fakes, signal_mode) -> None:
    """Neither a delivered KILL nor a vanished pid (`kill` fails) proves the leader ended."""
    fake = fakes(leader_dies_on=frozenset(), signal_mode=signal_mode)
    started = time.monotonic()

    outcome = await make_relay(fake).run(COMMAND, timeout_sec=TIMEOUT)

    elapsed = time.monotonic() - started
    assert outcome.ending is Ending.INFRA_FAILURE
    assert outcome.sandbox_destroyed and not outcome.scoreable
    assert fake.destroy_calls == 1 and fake.destroy_finished
    assert fake.subject_cancelled
    assert fake.signals == [Signal("TERM", PID), Signal("KILL", PID)]
    assert elapsed < TIMEOUT + POLICY.term_grace + POLICY.kill_grace + SLACK


@pytest.mark.parametrize("leader", [None, "", 1, 0, "-5", "12 13", "abc"])
async def test_timeout_without_a_usable_pid_fails_closed(fakes, leader) -> None:
    """Never `kill -TERM 1` (the sandbox's init) nor anything not a plain pid."""
    fake = fakes(leader=leader)

    outcome = await make_relay(fake).run(COMMAND, timeout_sec=TIMEOUT)

    assert outcome.ending is Ending.INFRA_FAILURE
    assert outcome.sandbox_destroyed
    assert fake.signals == []
    assert fake.destroy_calls == 1


async def test_fail_closed_destroy_obeys_its_deadline(fakes) -> None:
    """The reserve is min(20 s, 20% of the timeout), clipped up to 1 s; a hung destroy waits
    no longer than that."""
    fake = fakes(leader_dies_on=frozenset(), destroy_hangs=True)
    started = time.monotonic()

    outcome = await make_relay(fake).run(COMMAND, timeout_sec=TIMEOUT)

    elapsed = time.monotonic() - started
    assert outcome.ending is Ending.INFRA_FAILURE and outcome.sandbox_destroyed
    assert fake.destroy_calls == 1 and not fake.destroy_finished
    assert elapsed < TIMEOUT + POLICY.term_grace + POLICY.kill_grace + 1.0 + SLACK


# -- host abort: the whole group, then destroy -----------------------------------------------


async def test_host_abort_quiesces_the_group_and_destroys(fakes) -> None:
    fake = fakes()
    relay = make_relay(fake)
    task = await start(relay)

    await cancel_and_wait(task)

    assert fake.signals == [Signal("TERM", PID, group=True)]
    assert [e.shell for e in fake.execs_of(Signal)] == [f"kill -TERM -{PID}"]
    assert fake.group_checks >= 1
    assert fake.destroy_calls == 1 and fake.destroy_finished
    outcome = relay.outcome
    assert outcome is not None
    assert outcome.ending is Ending.ABORTED
    assert outcome.sandbox_destroyed and not outcome.scoreable
    assert outcome.detail == "group quiesced"


async def test_host_abort_kills_a_group_that_ignores_term(fakes) -> None:
    fake = fakes(group_dies_on=frozenset({"KILL"}), leader_dies_on=frozenset({"KILL"}))
    relay = make_relay(fake)
    task = await start(relay)

    elapsed = await cancel_and_wait(task)

    assert fake.signals == [Signal("TERM", PID, group=True), Signal("KILL", PID, group=True)]
    assert relay.outcome is not None and relay.outcome.detail == "group quiesced"
    assert fake.destroy_calls == 1
    assert elapsed < POLICY.abort_term_quiet + POLICY.abort_kill_quiet + SLACK


async def test_host_abort_with_a_group_that_survives_kill_still_destroys(fakes) -> None:
    fake = fakes(group_dies_on=frozenset(), leader_dies_on=frozenset())
    relay = make_relay(fake)
    task = await start(relay)

    await cancel_and_wait(task)

    assert fake.signals == [Signal("TERM", PID, group=True), Signal("KILL", PID, group=True)]
    assert relay.outcome is not None
    assert relay.outcome.ending is Ending.ABORTED
    assert relay.outcome.detail == "group still alive after KILL"
    assert fake.destroy_calls == 1 and fake.destroy_finished


@pytest.mark.parametrize("group_check", ["raise", "odd"])
async def test_a_group_check_that_errors_is_never_quiet(fakes, group_check: str) -> None:
    fake = fakes(group_check=group_check)
    relay = make_relay(fake)
    task = await start(relay)

    await cancel_and_wait(task)

    assert fake.group_checks >= 1
    outcome = relay.outcome
    assert outcome is not None
    assert outcome.ending is Ending.ABORTED
    assert outcome.detail == "group state unknown"  # not "group quiesced"
    assert outcome.sandbox_destroyed and not outcome.scoreable
    assert fake.destroy_calls == 1 and fake.destroy_finished


@pytest.mark.parametrize("leader", [None, 1])
async def test_host_abort_without_a_usable_pid_destroys(fakes, leader) -> None:
    """No leader found, or a probe saying 1: `kill -TERM -1` would hit every process there is."""
    fake = fakes(leader=leader)
    relay = make_relay(fake)
    task = await start(relay)

    await cancel_and_wait(task)

    assert fake.signals == []
    assert relay.outcome is not None and relay.outcome.ending is Ending.ABORTED
    assert relay.outcome.detail == "group state unknown"
    assert fake.destroy_calls == 1 and fake.destroy_finished


async def test_cancel_after_the_subject_exited_reports_the_exit(fakes) -> None:
    relay_task: list[asyncio.Task[RelayOutcome]] = []
    fake = fakes(subject_after=0.2, subject_exit=3)
    fake.before_subject_returns = lambda: relay_task[0].cancel()
    relay = make_relay(fake)
    relay_task.append(asyncio.ensure_future(relay.run(COMMAND, timeout_sec=5)))

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(relay_task[0], 5)

    assert relay.outcome == RelayOutcome(Ending.EXITED, exit_code=3)
    assert fake.destroy_calls == 0
    assert fake.signals == []


async def test_host_abort_destroy_obeys_its_deadline(fakes) -> None:
    fake = fakes(destroy_hangs=True)
    relay = make_relay(fake)
    task = await start(relay)

    elapsed = await cancel_and_wait(task)

    assert fake.destroy_calls == 1 and not fake.destroy_finished
    assert relay.outcome is not None and relay.outcome.sandbox_destroyed
    assert elapsed < POLICY.destroy_deadline + SLACK


async def test_a_cancel_during_a_hung_destroy_still_obeys_the_deadline(fakes) -> None:
    fake = fakes(destroy_hangs=True)
    relay = make_relay(fake)
    task = await start(relay)
    started = time.monotonic()

    task.cancel()
    await asyncio.wait_for(fake.destroy_started.wait(), 5)
    for _ in range(3):
        task.cancel()
        await asyncio.sleep(0.05)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)

    assert time.monotonic() - started < POLICY.destroy_deadline + SLACK
    assert fake.destroy_calls == 1
    assert relay.outcome is not None and relay.outcome.ending is Ending.ABORTED


# -- a second cancel, or an error, during cleanup ----------------------------------------------


async def test_a_cancel_during_timeout_cleanup_still_destroys(fakes) -> None:
    """The leader's TERM exec hangs; the host gives up meanwhile."""
    fake = fakes(signal_mode="hang")
    relay = make_relay(fake)
    task = asyncio.ensure_future(relay.run(COMMAND, timeout_sec=TIMEOUT))
    await asyncio.wait_for(fake.signal_started.wait(), 5)
    assert fake.signals == [Signal("TERM", PID)]  # the timeout path, not the abort path

    elapsed = await cancel_and_wait(task)

    assert fake.destroy_calls == 1 and fake.destroy_finished
    outcome = relay.outcome
    assert outcome is not None
    assert outcome.ending is Ending.ABORTED
    assert outcome.sandbox_destroyed and not outcome.scoreable
    assert elapsed < POLICY.destroy_deadline + SLACK


async def test_a_second_cancel_during_abort_cleanup_still_destroys(fakes) -> None:
    """The group's TERM exec hangs after the first cancel; a second cancel arrives."""
    fake = fakes(signal_mode="hang")
    relay = make_relay(fake)
    task = await start(relay)

    task.cancel()
    await asyncio.wait_for(fake.signal_started.wait(), 5)
    assert fake.signals == [Signal("TERM", PID, group=True)]
    elapsed = await cancel_and_wait(task)

    assert fake.destroy_calls == 1 and fake.destroy_finished
    assert relay.outcome is not None
    assert relay.outcome.ending is Ending.ABORTED and relay.outcome.sandbox_destroyed
    assert elapsed < POLICY.destroy_deadline + SLACK


async def test_a_second_cancel_while_destroying_waits_for_the_destroy(fakes) -> None:
    """The destroy is held until the test lets it go; the deadline is far away, so only the
    destroy's end can let the cancellation through."""
    fake = fakes(destroy_hangs=True)
    relay = make_relay(fake, dataclasses.replace(POLICY, destroy_deadline=60))
    task = await start(relay)
    destroyed_when_done: list[bool] = []
    task.add_done_callback(lambda _: destroyed_when_done.append(fake.destroy_finished))

    task.cancel()
    await asyncio.wait_for(fake.destroy_started.wait(), 5)
    task.cancel()  # the second cancel, while the destroy is under way
    for _ in range(5):  # let the loop go round: the cancel must not get through by itself
        await asyncio.sleep(0.01)
    assert not task.done(), "the cancellation propagated while the destroy was under way"
    fake.release()  # the destroy ends
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)

    assert fake.destroy_calls == 1
    assert destroyed_when_done == [True], "the cancellation propagated before the destroy ended"


class _BrokenPolicy(RelayPolicy):
    def destroy_reserve(self, agent_timeout: float) -> float:
        raise ValueError("broken policy")


async def test_an_error_during_timeout_cleanup_destroys(fakes) -> None:
    fake = fakes()
    relay = make_relay(fake, _BrokenPolicy(**POLICY.__dict__))

    outcome = await relay.run(COMMAND, timeout_sec=TIMEOUT)

    assert outcome.ending is Ending.INFRA_FAILURE
    assert outcome.sandbox_destroyed and not outcome.scoreable
    assert "broken policy" in outcome.detail
    assert fake.destroy_calls == 1 and fake.destroy_finished


async def test_an_exec_error_after_term_is_not_a_confirmed_stop(fakes) -> None:
    fake = fakes(leader_death=lambda sig: engine_gone())

    outcome = await make_relay(fake).run(COMMAND, timeout_sec=TIMEOUT)

    assert outcome.ending is Ending.INFRA_FAILURE
    assert outcome.sandbox_destroyed and not outcome.scoreable


async def test_a_hung_leader_signal_stays_within_the_stop_budget(fakes) -> None:
    fake = fakes(signal_mode="hang")

    outcome = await make_relay(fake).run(COMMAND, timeout_sec=TIMEOUT)

    assert outcome.ending is Ending.INFRA_FAILURE and outcome.sandbox_destroyed
    assert outcome.stop_sec < POLICY.term_grace + POLICY.kill_grace + SLACK


# -- scope unavailable -----------------------------------------------------------------------


async def test_scope_unavailable_is_reported_as_such(fakes) -> None:
    fake = fakes(scope_unavailable=True)
    relay = make_relay(fake)

    outcome = await relay.run(COMMAND, timeout_sec=5)

    assert outcome.ending is Ending.INFRA_FAILURE
    assert "scope" in outcome.detail
    assert outcome.sandbox_destroyed and not outcome.scoreable
    assert fake.destroy_calls == 1


@pytest.mark.parametrize(
    ("output", "code"),
    [
        (f"{SCOPE_MARKER}:0123456789abcdef\n", SCOPE_UNAVAILABLE_EXIT),  # another launch's
        (f"{SCOPE_MARKER}\n", SCOPE_UNAVAILABLE_EXIT),  # no nonce at all
        ("", SCOPE_UNAVAILABLE_EXIT),  # the subject's own exit 125
        (None, 0),  # the right marker, but the launcher did not exit 125
    ],
)
async def test_output_imitating_the_scope_marker_is_the_subjects_exit(
    fakes, output: str | None, code: int
) -> None:
    fake = fakes(subject_after=0.05, subject_exit=code)
    relay = make_relay(fake)
    fake.subject_output = f"{relay.paths.scope_marker}\n" if output is None else output
    assert relay.paths.scope_marker not in (output or "")

    outcome = await relay.run(COMMAND, timeout_sec=5)

    assert outcome == RelayOutcome(Ending.EXITED, exit_code=code)
    assert fake.destroy_calls == 0


def test_each_launch_has_its_own_marker_and_files() -> None:
    a, b = make_relay(FakeSandbox()), make_relay(FakeSandbox())
    assert a.paths.scope_marker != b.paths.scope_marker
    assert a.paths.scope_marker.startswith(SCOPE_MARKER + ":")
    assert a.paths.pid_file != b.paths.pid_file
    assert a.paths.env_file != b.paths.env_file


# -- credentials -----------------------------------------------------------------------------


def _secret_free(fake: FakeSandbox) -> None:
    for e in fake.execs:
        assert SECRET not in e.shell, e.shell
        assert SECRET not in repr(e.command), e.command
        assert SECRET not in repr(dict(e.env or {})), e.env


async def test_credentials_travel_only_in_a_0600_env_file(fakes) -> None:
    fake = fakes(subject_after=0.05)
    relay = make_relay(fake)

    outcome = await relay.run(COMMAND, timeout_sec=5, env={"MY_API_KEY": SECRET})

    assert outcome.ending is Ending.EXITED
    _secret_free(fake)
    [(path, data, mode, owner)] = fake.uploads
    assert path == relay.paths.env_file
    assert mode == 0o600
    # No user given: the subject runs as the image's own USER, whose ids are asked first.
    assert owner == (1000, 1000)
    assert [e.user for e in fake.execs_of(UserIds)] == [""]
    assert SECRET.encode() in data
    [subject] = fake.subject_execs
    assert not subject.env
    # The launcher sources the file, then removes it before the subject starts.
    assert subject.command == Launch(relay.paths, COMMAND, has_env=True)
    script = subject.shell
    env_file = relay.paths.env_file
    source_then_remove = f"set -a; . {env_file}; set +a; rm -f {env_file}\n"
    assert source_then_remove in script
    assert script.index(source_then_remove) < script.index("exec sh -c")


async def test_the_env_file_belongs_to_a_non_root_subject(fakes) -> None:
    fake = fakes(subject_after=0.05, users={"agent": (1000, 1001)})

    await make_relay(fake).run(COMMAND, timeout_sec=5, env={"MY_API_KEY": SECRET}, user="agent")

    [(_path, _data, mode, owner)] = fake.uploads
    assert (mode, owner) == (0o600, (1000, 1001))
    _secret_free(fake)


async def test_without_credentials_no_env_file_is_made(fakes) -> None:
    fake = fakes(subject_after=0.05)
    relay = make_relay(fake)

    await relay.run(COMMAND, timeout_sec=5)

    assert fake.uploads == []
    [subject] = fake.subject_execs
    assert subject.command == Launch(relay.paths, COMMAND, has_env=False)
    assert f". {relay.paths.env_file}" not in subject.shell


async def test_a_failed_upload_removes_the_env_file(fakes) -> None:
    """The archive may have landed before the engine's answer was lost."""
    fake = fakes(upload_error=engine_gone())
    relay = make_relay(fake)

    with pytest.raises(SandboxError):
        await relay.run(COMMAND, timeout_sec=5, env={"MY_API_KEY": SECRET})

    assert fake.removed == [relay.paths.env_file]
    [rm] = fake.execs_of(RemoveFile)
    assert rm.command == RemoveFile(relay.paths.env_file)
    assert rm.user == "root"
    assert fake.subject_execs == []
    _secret_free(fake)


async def test_an_unknown_user_fails_the_launch_and_removes_the_env_file(fakes) -> None:
    fake = fakes()  # its image has no user "ghost"
    relay = make_relay(fake)

    with pytest.raises(RuntimeError, match="ghost"):
        await relay.run(COMMAND, timeout_sec=5, env={"MY_API_KEY": SECRET}, user="ghost")

    assert fake.uploads == []
    assert fake.removed == [relay.paths.env_file]
    assert fake.subject_execs == []


async def test_a_cancel_during_the_upload_removes_the_env_file(fakes) -> None:
    fake = fakes()
    gate = asyncio.Event()
    uploaded = asyncio.Event()

    async def slow_upload(path: str, data: bytes, **kwargs: object) -> None:
        uploaded.set()
        await gate.wait()

    fake.upload_file = slow_upload
    relay = make_relay(fake)
    task = asyncio.ensure_future(relay.run(COMMAND, timeout_sec=5, env={"MY_API_KEY": SECRET}))
    await asyncio.wait_for(uploaded.wait(), 5)

    await cancel_and_wait(task)
    await asyncio.sleep(0.05)  # the removal is shielded and may finish just after

    assert fake.removed == [relay.paths.env_file]
    assert fake.subject_execs == []
    gate.set()


async def test_credentials_never_reach_execs_through_a_timeout_and_an_abort(fakes) -> None:
    fake = fakes(leader_dies_on=frozenset({"KILL"}))
    outcome = await make_relay(fake).run(COMMAND, timeout_sec=TIMEOUT, env={"K": SECRET})
    assert outcome.ending is Ending.TIMEOUT
    _secret_free(fake)

    fake2 = fakes()
    relay2 = make_relay(fake2)
    task = await start(relay2, env={"K": SECRET})
    await cancel_and_wait(task)
    assert fake2.destroy_calls == 1
    _secret_free(fake2)
    assert len(fake.execs) > 3 and len(fake2.execs) > 3  # the check looked at something
