"""`trialbox export`: one row per trial, for pipelines (JSON Lines, CSV, Parquet)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

DESCRIPTION = """\
One row per trial that has a result.json (superseded attempts too: keep rows with counted =
true for the samples the job's aggregates use): ids, task, attempt, status, error category
and message, reward and rewards, per-phase timings, model usage. --with-trajectories adds
the chat messages and, per model answer, its token ids and logprobs when the inference
server returned them. JSON Lines keeps result.json's nesting; CSV and Parquet are flat
(timings.agent, usage.calls, rewards.<name>). Parquet needs pyarrow: pip install
'trialbox[parquet]'.
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "export",
        help="one row per trial as JSON Lines, CSV or Parquet",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "paths", nargs="+", type=Path, metavar="JOB", help="job folders, or folders of them"
    )
    parser.add_argument(
        "--format", choices=["jsonl", "csv", "parquet"], default="jsonl", help="default: jsonl"
    )
    parser.add_argument(
        "--with-trajectories",
        action="store_true",
        help="add messages and per-answer token ids and logprobs (from logs/agent/trajectory.json)",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write (default: <job>.<format> here, or trials.<format> for several "
        "jobs; - for stdout, not with parquet)",
    )
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    from orchestrator.report.build import read_jobs
    from orchestrator.report.export import rows_of, write

    jobs = read_jobs(args.paths)
    rows = [row for job in jobs for row in rows_of(job, with_trajectories=args.with_trajectories)]
    say = Console(stderr=True)  # stdout may be the data
    if args.output == "-":
        if args.format == "parquet":
            raise ValueError("-o -: parquet is binary; give a file with -o FILE")
        write(rows, args.format, sys.stdout, with_trajectories=args.with_trajectories)
        sys.stdout.flush()
    else:
        name = jobs[0].job_id if len(jobs) == 1 else "trials"
        out = Path(args.output or f"{name}.{args.format}")
        write(rows, args.format, out, with_trajectories=args.with_trajectories)
        say.print(f"wrote {len(rows)} rows of {len(jobs)} job(s) to {out}", soft_wrap=True)
    return 0
