"""From job folders to a page: read them now, build the model, render it.

A report file carries every trial's detail inline (it must work with no server); a served
page carries none and fetches one when it is opened, so a job of thousands of trials
serves a page of its table and timeline only.

`report_html` is a report file; `live_state` what a served page polls.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel

from orchestrator.report.disk import JobOnDisk, find_jobs, fingerprint, may_change, read_job
from orchestrator.report.files import DEFAULT_LOG_CAP
from orchestrator.report.model import JobPage, TrialDetail, job_page, report_page, trial_detail
from orchestrator.report.render_page import render_main, render_page
from orchestrator.report.render_trial import trial_section


class LiveState(BaseModel):
    """What a served page polls: a change of `fingerprint` means "fetch the page again"."""

    fingerprint: str
    running: bool
    jobs: list[str]


def read_jobs(paths: list[Path]) -> list[JobOnDisk]:
    return [read_job(path) for path in find_jobs(paths)]


def live_state(paths: list[Path]) -> LiveState:
    """Cheap: stats only, no result is parsed."""
    found = find_jobs(paths)
    prints = [f"{p}:{fingerprint(p)}" for p in found]
    digest = hashlib.sha256("\n".join(prints).encode()).hexdigest()[:16]
    running = any(may_change(p) for p in found)
    return LiveState(fingerprint=digest, running=running, jobs=[p.name for p in found])


def report_html(
    paths: list[Path], *, live: bool, log_cap: int = DEFAULT_LOG_CAP, part: str = "page"
) -> str:
    """The page for the jobs under `paths`: whole (`part="page"`), or only its main content
    (`"main"`, what a live page swaps in). A report file (`live=False`) inlines every
    trial's detail."""
    jobs = read_jobs(paths)
    page = report_page(jobs, live=live)
    details = None if live else all_details(jobs, page.jobs, log_cap)
    if part == "main":
        return render_main(page, details)
    return render_page(page, details=details, fingerprint=live_state(paths).fingerprint)


def all_details(jobs: list[JobOnDisk], pages: list[JobPage], log_cap: int) -> list[TrialDetail]:
    """Every trial's detail, read from its folder now (`pages[i]` is `jobs[i]`'s)."""
    return [
        trial_detail(job, row, log_cap=log_cap)
        for job, page in zip(jobs, pages, strict=True)
        for row in page.rows
    ]


def trial_html(paths: list[Path], job_id: str, trial_id: str, log_cap: int) -> str | None:
    """One trial's detail (a fragment), or None when no job under `paths` has it."""
    found = find_jobs(paths)
    named = [p for p in found if p.name == job_id] or found  # a folder renamed since
    for path in named:
        job = read_job(path)
        if job.job_id != job_id and path.name != job_id:
            continue
        for row in job_page(job).rows:
            if row.trial_id == trial_id:
                return trial_section(trial_detail(job, row, log_cap=log_cap), inline=False)
    return None
