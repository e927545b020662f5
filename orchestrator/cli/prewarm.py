"""`trialbox prewarm`: build every distinct image some tasks need, with progress and a table."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter

from rich.console import Console
from rich.table import Table

from orchestrator.cli.common import (
    add_base_image_option,
    add_task_options,
    config_of,
    print_error,
    progress_bar,
    tasks_of,
)
from orchestrator.service.prewarm import DEFAULT_PARALLEL_BUILDS, PrewarmError, PrewarmRow, prewarm


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "prewarm",
        help="build the images of one task folder or of every task folder inside PATH",
        description="Build every distinct image the tasks need, reusing what exists. Exit "
        "code 1 when any build failed.",
    )
    add_task_options(parser)
    add_base_image_option(parser)
    parser.add_argument(
        "--max-parallel",
        type=int,
        default=DEFAULT_PARALLEL_BUILDS,
        help=f"builds at once (default: {DEFAULT_PARALLEL_BUILDS})",
    )
    parser.add_argument(
        "--force-build",
        action="store_true",
        help="build each task's environment/Dockerfile even when its task.toml names a "
        "prebuilt docker_image (Harbor's --force-build; TrialConfig.force_build for trials)",
    )
    parser.set_defaults(handler=handle)


def _table(rows: list[PrewarmRow]) -> Table:
    table = Table(title="images")
    for column in ("image", "tasks", "status", "seconds", "error"):
        table.add_column(column)
    for row in rows:
        style = {"built": "green", "cached": "cyan", "failed": "red"}[row.status]
        error = (row.error or "").strip().splitlines()
        table.add_row(
            row.tag or "-", ", ".join(row.tasks), f"[{style}]{row.status}[/]",
            f"{row.seconds:.1f}", error[-1][:100] if error else "",
        )  # fmt: skip
    return table


def _totals(rows: list[PrewarmRow], seconds: float) -> str:
    counts = Counter(row.status for row in rows)
    parts = [f"{n} {status}" for status, n in sorted(counts.items())]
    return f"{len(rows)} image(s): {', '.join(parts)}, in {seconds:.1f} s"


async def _prewarm(args: argparse.Namespace, console: Console) -> int:
    started = time.monotonic()
    tasks = tasks_of(args)
    config = config_of(args)
    with progress_bar(console) as progress:
        bar = progress.add_task(f"images of {len(tasks)} task(s)", total=None)
        try:
            rows = await prewarm(
                tasks, base_image_map=config.base_image_map, max_parallel=args.max_parallel,
                backend=config.backend.build(config.limits), force_build=args.force_build,
                on_done=lambda _row: progress.advance(bar),
            )  # fmt: skip
        except PrewarmError as exc:
            progress.stop()
            console.print(_table(exc.rows))
            console.print(_totals(exc.rows, time.monotonic() - started))
            print_error(console, exc)
            return 1
    console.print(_table(rows))
    console.print(_totals(rows, time.monotonic() - started))
    return 0


def handle(args: argparse.Namespace, console: Console) -> int:
    if args.max_parallel < 1:
        print_error(console, "--max-parallel must be at least 1")
        return 1
    return asyncio.run(_prewarm(args, console))
