"""Options and helpers shared by the `trialbox` subcommands."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TimeElapsedColumn

from orchestrator.tasks.task import Task, discover_tasks, load_task, resolve_task_id
from orchestrator.trials.config import BASE_IMAGE_MAP_ENV, TrialConfig, parse_image_map

EXIT_INFRA = 3


def progress_bar(console: Console, *, disable: bool = False) -> Progress:
    """The live progress display of long CLI work: spinner, bar, count, elapsed time."""
    return Progress(
        SpinnerColumn(), "[progress.description]{task.description}", BarColumn(),
        MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True,
        disable=disable,
    )  # fmt: skip


def print_error(console: Console, message: object) -> None:
    """An error line a user can copy from: never wrapped, never read as markup."""
    console.print(f"[red]error:[/] {escape(str(message))}", soft_wrap=True)


def add_task_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="a task folder, or a folder of task folders")
    parser.add_argument(
        "--task-id",
        action="append",
        default=[],
        metavar="ID",
        help="dataset mode: the task folder PATH/ID (repeatable); ids may not leave PATH",
    )


def add_agent_options(parser: argparse.ArgumentParser, *, what: str = "agent") -> None:
    """--agent and --n-concurrent, as `run` and `serve` both take them."""
    parser.add_argument(
        "--agent",
        default="oracle",
        help=f"{what}: oracle | nop | command:<shell command> | "
        "workflow:<module or file.py>:<Class> (default: oracle)",
    )
    parser.add_argument("--n-concurrent", type=int, default=4, help="trials at once (default: 4)")


def add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jobs-dir", type=Path, default=Path("jobs"), help="where trial folders go (default: jobs)"
    )
    parser.add_argument(
        "--keep-containers", action="store_true", help="leave containers for debugging"
    )
    add_base_image_option(parser)


def add_base_image_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base-image",
        action="append",
        default=[],
        metavar="FROM=LOCAL",
        help="build FROM image FROM with the local image LOCAL instead, for machines without a "
        f"registry (repeatable; also ${BASE_IMAGE_MAP_ENV}='a=b,c=d'); part of the image hash",
    )


def tasks_of(args: argparse.Namespace) -> list[Task]:
    if args.task_id:
        return [load_task(resolve_task_id(args.path, tid)) for tid in args.task_id]
    return discover_tasks(args.path)


def config_of(args: argparse.Namespace) -> TrialConfig:
    config = TrialConfig(
        jobs_dir=getattr(args, "jobs_dir", Path("jobs")),
        keep_containers=getattr(args, "keep_containers", False),
    )
    config.base_image_map.update(parse_image_map(args.base_image))
    return config
