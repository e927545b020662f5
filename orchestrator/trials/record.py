"""The record a trial's phases and finishing steps complete in its `TrialResult`: each
phase's time, the phase the trial reached, and the first error with its phase and category.

The first error is the cause; later ones are its consequences, so `record_error` keeps only
the first. The category rules that may replace it once the steps ran (a model outage, the
verifier's lost network, the agent's own report) are `verdict.py`'s, through `supersede`.

`Phases` times each phase and keeps `reached`, moved only by entering a phase (a step timed
inside one, with `timed`, leaves it); `record_error` scrubs the error, and a full disk becomes a
`HostStorageError` naming the step.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from orchestrator.common.errors import AgentResourceError, TrialboxError
from orchestrator.common.host_storage import disk_full, host_storage_error
from orchestrator.common.scrub import Scrubber
from orchestrator.trials.result import Phase, TrialError, TrialResult

RERUN = "the trial is infra: discard it and run it again (--max-retries, trialbox run --resume)"


@contextlib.contextmanager
def timed(result: TrialResult, phase: Phase) -> Iterator[None]:
    """Add the time the block takes to `result.timings.<phase>` (raised or not)."""
    started = time.monotonic()
    try:
        yield
    finally:
        timings = result.timings
        setattr(timings, phase, getattr(timings, phase) + time.monotonic() - started)


class Phases:
    """The phases of one run, in order: each timed, and `reached`, the last one entered (an
    error raised from the phases is that phase's; a cancel there is that phase's cancel).
    Only `enter` moves it: a finishing step run inside a phase (the relay saving `/logs`
    before it fails closed) is timed with `timed` and leaves the phase as it was."""

    def __init__(self, result: TrialResult) -> None:
        self._result = result
        self.reached: Phase = "materialize"

    @contextlib.contextmanager
    def enter(self, phase: Phase) -> Iterator[None]:
        self.reached = phase
        with timed(self._result, phase):
            yield


def record_error(result: TrialResult, exc: BaseException, phase: Phase, scrubber: Scrubber) -> None:
    """Keep `exc` as the trial's error (scrubbed, with its category), unless one is kept
    already. A full host disk is a `HostStorageError` saying which step could not write."""
    if result.error is not None:
        return  # the first error is the cause; later ones are consequences
    if disk_full(exc) and not isinstance(exc, TrialboxError):
        assert isinstance(exc, OSError)
        what = f"the {phase} step could not write the trial's files"
        exc = host_storage_error(exc, what, Path(result.trial_dir), then=RERUN)
    category = exc.category if isinstance(exc, TrialboxError) else "infra"
    result.error = TrialError(
        category=category,
        phase=phase,
        type=type(exc).__name__,
        message=scrubber.text(str(exc)),
        discardable=category == "infra",
    )
    if isinstance(exc, AgentResourceError):
        result.warnings.extend(scrubber.text(note) for note in exc.warnings)


def supersede(
    result: TrialResult, exc: BaseException, phase: Phase, scrubber: Scrubber
) -> TrialError | None:
    """Record `exc` in place of the trial's error (a rule that names the real cause); returns
    the error it replaced, for the caller to keep as a warning."""
    earlier, result.error = result.error, None
    record_error(result, exc, phase, scrubber)
    return earlier
