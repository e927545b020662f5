"""Where a job's time went, as lanes on one time axis: a lane per trial, its phases as spans.

A trial records when it started (`started_at`, once it held a slot) and how long each phase
took; the phases run one after another in a fixed order, so each starts where the previous
ended. Before its start, a trial of `trialbox run` waited: for a slot since the job (or its
resume) began, or, for a rerun, since the attempt it replaces ended (the retry backoff and
then a slot). A trial still running is one span up to now; one a stopped run left without a
result is one span up to the last sign its run was alive, and grows no more.

`lanes` makes the lanes, `axis` their shared time axis.
"""

from __future__ import annotations

import math
from datetime import datetime

from pydantic import BaseModel, Field

from orchestrator.report.disk import JobOnDisk
from orchestrator.report.stats import PHASES
from orchestrator.trials.result import TrialResult


class Span(BaseModel):
    phase: str = Field(description="A phase name, 'waiting', 'running' or 'interrupted'.")
    start: float = Field(description="Seconds from the timeline's origin.")
    seconds: float


class Lane(BaseModel):
    trial_id: str
    start: float
    end: float
    spans: list[Span] = Field(default_factory=list)


class Axis(BaseModel):
    seconds: float = Field(description="The whole axis, from the origin.")
    ticks: list[float] = Field(default_factory=list)


def lanes(job: JobOnDisk, zero: datetime) -> list[Lane]:
    """One lane per result (superseded ones too: they took time), per trial in flight and per
    interrupted trial, in order of start."""
    by_id = {r.trial_id: r for r in job.results}
    previous = {newer: by_id[older] for older, newer in job.superseded_by.items() if older in by_id}
    found = [_lane(r, zero, _waited_since(job, r, previous.get(r.trial_id))) for r in job.results]
    for trial in job.in_flight:  # running up to now
        found.append(_open_lane(trial.trial_id, "running", trial.since, job.read_at, zero))
    for trial in job.interrupted:  # up to the last sign its run was alive, never growing
        end = trial.until or trial.since
        found.append(_open_lane(trial.trial_id, "interrupted", trial.since, end, zero))
    return sorted(found, key=lambda lane: (lane.start, lane.trial_id))


def _open_lane(trial_id: str, phase: str, since: datetime, until: datetime, zero: datetime) -> Lane:
    """A trial without a result: one bar from `since` to `until` (never before `since`)."""
    start = _seconds(since, zero)
    end = max(_seconds(until, zero), start)
    return Lane(
        trial_id=trial_id, start=start, end=end,
        spans=[Span(phase=phase, start=start, seconds=end - start)],
    )  # fmt: skip


def axis(found: list[Lane]) -> Axis:
    """The axis to the last lane's end, with round ticks (1, 2 or 5 times a power of ten)."""
    end = max((lane.end for lane in found), default=0.0)
    low = min((s.start for lane in found for s in lane.spans), default=0.0)
    seconds = max(end, 1e-3) - min(low, 0.0)
    raw = seconds / 6
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    ticks = [i * step for i in range(int(seconds / step) + 1)]
    return Axis(seconds=seconds, ticks=ticks)


def _lane(result: TrialResult, zero: datetime, waited_since: datetime | None) -> Lane:
    start = _seconds(result.started_at, zero)
    spans = []
    if waited_since is not None and waited_since < result.started_at:
        since = _seconds(waited_since, zero)
        spans.append(Span(phase="waiting", start=since, seconds=start - since))
    at = start
    for phase in PHASES:
        seconds = getattr(result.timings, phase)
        if seconds > 0:
            spans.append(Span(phase=phase, start=at, seconds=seconds))
            at += seconds
    end = _seconds(result.finished_at, zero) if result.finished_at else at
    return Lane(trial_id=result.trial_id, start=start, end=max(end, at), spans=spans)


def _waited_since(
    job: JobOnDisk, result: TrialResult, replaced: TrialResult | None
) -> datetime | None:
    """When the trial was queued: only `trialbox run` jobs say (their config.json)."""
    if job.config is None:
        return None
    if result.retry_of is not None:
        return replaced.finished_at if replaced is not None else None
    began = [job.config.created_at, *job.config.resumed_at]
    earlier = [t for t in began if t <= result.started_at]
    return max(earlier) if earlier else None


def _seconds(when: datetime, zero: datetime) -> float:
    return (when - zero).total_seconds()
