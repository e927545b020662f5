"""`trialbox view`: a job's report in the browser, or as one self-contained HTML file."""

from __future__ import annotations

import argparse
import errno
import signal
from pathlib import Path
from types import FrameType

from rich.console import Console

from orchestrator.common.defaults import DEFAULT_LOG_CAP
from orchestrator.common.defaults import DEFAULT_REPORT_HOST as DEFAULT_HOST
from orchestrator.common.defaults import DEFAULT_REPORT_PORT as DEFAULT_PORT

DESCRIPTION = """\
The report of jobs: counts by status and error category, mean reward and pass@k (also with
infra failures counted as zeros), time per phase, a timeline of every trial's phases, a
table that sorts and filters, and each trial opened: why it failed, its logs, its
trajectory step by step. Several jobs are also compared side by side.

Served (the default) it is read from disk on every request and refreshes while a job runs;
with --out it is written as one HTML file with everything inline (no network needed: a CI
artifact, or a machine without access). Opening a failed trial: click it in "Failed trials".
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "view",
        help="the report of jobs: served locally, or written to one HTML file (--out)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        default=[Path("jobs")],
        metavar="JOBS_DIR_OR_JOB",
        help="job folders, or folders of them (default: jobs)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to serve on (default: {DEFAULT_PORT}; 0 picks a free one)",
    )
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to bind (default: {DEFAULT_HOST}, this machine only; logs can hold "
        "what a task should not show the network)",
    )
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help="write the report to FILE instead of serving"
    )
    parser.add_argument(
        "--log-cap",
        type=int,
        default=DEFAULT_LOG_CAP,
        metavar="BYTES",
        help=f"at most this much of each log file, its head and tail (default: {DEFAULT_LOG_CAP})",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    from orchestrator.report.build import report_html
    from orchestrator.report.server import ReportServer

    if args.log_cap < 1000:
        raise ValueError("--log-cap: give at least 1000 bytes")
    if args.out is not None:
        text = report_html(args.paths, live=False, log_cap=args.log_cap)
        args.out.write_text(text, encoding="utf-8")
        size = f"{len(text.encode()) / 1e6:.2f} MB"
        # One line however long the path: a wrapped path cannot be copied whole.
        console.print(f"wrote {args.out} ({size}), open it in a browser", soft_wrap=True)
        return 0
    report_html(args.paths, live=True, log_cap=args.log_cap, part="main")  # fail early
    try:
        server = ReportServer(args.paths, host=args.host, port=args.port, log_cap=args.log_cap)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ValueError(
                f"port {args.port} is in use: give another with --port (0 picks a free one)"
            ) from None
        raise
    with server:
        if args.host != DEFAULT_HOST:
            console.print(f"[yellow]bound to {args.host}: anyone who reaches it reads the logs[/]")
        console.print(f"the report is at {server.url} (Ctrl-C stops)", soft_wrap=True)
        previous = signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop, too
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            console.print("stopped")
        finally:
            signal.signal(signal.SIGTERM, previous)
    return 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
