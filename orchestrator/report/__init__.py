"""Job reports for people (`trialbox view`) and exports for pipelines (`trialbox export`).

| module | one idea |
| --- | --- |
| `disk` | job folders as they are now (`trialbox run`'s, `trialbox serve`'s, running ones) |
| `files` | a trial's logs: capped, decoded, only from inside the trial folder |
| `trajectory` | a trial's ATIF trajectory, step by step and as training fields |
| `stats`, `timeline` | the job's figures; its trials' phases on one time axis |
| `model` | the page model: what the page shows, as data |
| `htmlkit`, `render_job`, `render_trial`, `render_page`, `assets` | the HTML, all escaped |
| `build` | folders to page: a report file inlines every trial, a served page fetches them |
| `server` | the local server, bound to 127.0.0.1, with the JSON endpoint a live page polls |
| `export` | one row per trial as JSON Lines, CSV or Parquet |
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.common.lazy import lazy_exports

if TYPE_CHECKING:
    from orchestrator.report.build import live_state, read_jobs, report_html
    from orchestrator.report.disk import JobOnDisk, NoJobFound, find_jobs, read_job
    from orchestrator.report.export import ExportRow, rows_of, write
    from orchestrator.report.server import ReportServer, serving

# Imported on first use (PEP 562): `trialbox view`'s parser reads `files`' and `server`'s
# defaults without loading the rest.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ExportRow": "orchestrator.report.export",
        "JobOnDisk": "orchestrator.report.disk",
        "NoJobFound": "orchestrator.report.disk",
        "ReportServer": "orchestrator.report.server",
        "find_jobs": "orchestrator.report.disk",
        "live_state": "orchestrator.report.build",
        "read_job": "orchestrator.report.disk",
        "read_jobs": "orchestrator.report.build",
        "report_html": "orchestrator.report.build",
        "rows_of": "orchestrator.report.export",
        "serving": "orchestrator.report.server",
        "write": "orchestrator.report.export",
    },
)

__all__ = [
    "ExportRow",
    "JobOnDisk",
    "NoJobFound",
    "ReportServer",
    "find_jobs",
    "live_state",
    "read_job",
    "read_jobs",
    "report_html",
    "rows_of",
    "serving",
    "write",
]
