"""The record a trial completes (`trials/record.py`), without a trial: which phase an error
belongs to, the first error winning, a full disk named as the host's, and a rule replacing
the error it names the cause of. The whole trial's use of it is test_trial_phases_fake.py's."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from orchestrator.common.errors import AgentResourceError, TaskError, WorkflowError
from orchestrator.common.scrub import REDACTED, Scrubber
from orchestrator.trials.record import Phases, record_error, supersede, timed
from orchestrator.trials.result import TrialResult, initial_result

SECRET = "sk-record-secret-4242"


@pytest.fixture
def result(tmp_path: Path) -> TrialResult:
    return initial_result(
        "task", "nop", jobs_dir=tmp_path, trial_id="t1", job_id="j1", attempt=1,
        rollout_id=None, session_id=None,
    )  # fmt: skip


def test_a_step_timed_inside_a_phase_leaves_the_phase_it_is_in(result: TrialResult) -> None:
    phases = Phases(result)
    assert phases.reached == "materialize"
    with phases.enter("agent"):
        with timed(result, "collect"):  # the relay saving /logs before it fails closed
            pass
        assert phases.reached == "agent"
    assert phases.reached == "agent"  # still: an error raised from it is the agent's
    assert result.timings.agent > 0 and result.timings.collect > 0
    assert result.timings.agent >= result.timings.collect


def test_a_phase_that_raises_is_still_timed_and_stays_reached(result: TrialResult) -> None:
    phases = Phases(result)
    with pytest.raises(RuntimeError), phases.enter("image"):
        raise RuntimeError("the build broke")
    assert (phases.reached, result.timings.image > 0) == ("image", True)


def test_the_first_error_wins_and_is_scrubbed(result: TrialResult) -> None:
    scrubber = Scrubber([SECRET])
    record_error(result, TaskError(f"bad task near {SECRET}"), "start", scrubber)
    record_error(result, RuntimeError("a consequence"), "teardown", scrubber)

    assert result.error is not None
    assert (result.error.category, result.error.phase, result.error.type) == (
        "validation", "start", "TaskError",
    )  # fmt: skip
    assert SECRET not in result.error.message and not result.error.discardable


def test_a_full_disk_is_the_host_s_and_names_the_step(result: TrialResult) -> None:
    full = OSError(errno.ENOSPC, "No space left on device")
    record_error(result, full, "collect", Scrubber([]))

    assert result.error is not None
    assert (result.error.category, result.error.type) == ("infra", "HostStorageError")
    assert result.error.message.startswith("the collect step could not write the trial's files")
    assert f"the disk of {result.trial_dir} is full" in result.error.message
    assert result.error.discardable


def test_an_agent_resource_error_brings_its_warnings_scrubbed(result: TrialResult) -> None:
    exc = AgentResourceError("out of memory", warnings=(f"it wrote {SECRET}",))
    record_error(result, exc, "agent", Scrubber([SECRET]))
    assert result.warnings == [f"it wrote {REDACTED}"]


def test_supersede_replaces_the_error_and_returns_the_one_it_replaced(
    result: TrialResult,
) -> None:
    scrubber = Scrubber([])
    record_error(result, TaskError("no reward"), "verify", scrubber)
    earlier = supersede(result, WorkflowError("the workflow failed"), "agent", scrubber)

    assert earlier is not None and earlier.type == "TaskError"
    assert result.error is not None
    assert (result.error.type, result.error.phase) == ("WorkflowError", "agent")
    assert supersede(result, TaskError("again"), "verify", scrubber) is not None
