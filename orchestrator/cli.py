"""The `trialbox` command: run trials from the shell with live progress and a summary.

Progress and tables live here, never in the library, which reports through return values.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TimeElapsedColumn
from rich.table import Table

from orchestrator.agents import parse_agent
from orchestrator.config import BASE_IMAGE_MAP_ENV, TrialConfig, parse_image_map
from orchestrator.errors import TrialboxError
from orchestrator.job import run_job
from orchestrator.result import JobResult, TrialResult
from orchestrator.task import discover_tasks, load_task, resolve_task_id

EXIT_INFRA = 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trialbox", description="Run AI-agent trials in Docker sandboxes and score them."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="run trials of one task folder, or of every task folder inside PATH",
        description=(
            "Run trials and print a summary. Exit code 0 when every trial ran, 1 on bad "
            f"input, {EXIT_INFRA} when any trial failed for infrastructure reasons."
        ),
    )
    run.add_argument("path", type=Path, help="a task folder, or a folder of task folders")
    run.add_argument(
        "--task-id",
        action="append",
        default=[],
        metavar="ID",
        help="dataset mode: run the task folder PATH/ID (repeatable); ids may not leave PATH",
    )
    run.add_argument(
        "--agent",
        default="oracle",
        help="oracle | nop | command:<shell command> | workflow:<module or file.py>:<Class> "
        "(default: oracle)",
    )
    run.add_argument("--n-concurrent", type=int, default=4, help="trials at once (default: 4)")
    run.add_argument("--attempts", type=int, default=1, help="trials per task (default: 1)")
    run.add_argument(
        "--jobs-dir", type=Path, default=Path("jobs"), help="where trial folders go (default: jobs)"
    )
    run.add_argument(
        "--keep-containers", action="store_true", help="leave containers for debugging"
    )
    run.add_argument(
        "--base-image",
        action="append",
        default=[],
        metavar="FROM=LOCAL",
        help="build FROM image FROM with the local image LOCAL instead, for machines without a "
        f"registry (repeatable; also ${BASE_IMAGE_MAP_ENV}='a=b,c=d'); part of the image hash",
    )
    run.add_argument(
        "--label", help="ground-truth label (JSON or a plain string) for the verifier only"
    )
    run.add_argument("--json", action="store_true", help="print the job result as JSON")
    return parser


def _config(args: argparse.Namespace) -> TrialConfig:
    config = TrialConfig(jobs_dir=args.jobs_dir, keep_containers=args.keep_containers)
    config.base_image_map.update(parse_image_map(args.base_image))
    return config


def _label(raw: str | None) -> dict[str, object]:
    if raw is None:
        return {}
    try:
        return {"label": json.loads(raw)}
    except json.JSONDecodeError:
        return {"label": raw}


def _summary_table(job: JobResult) -> Table:
    table = Table(title=f"job {job.job_id}")
    for column in ("trial", "status", "reward", "agent", "error", "seconds"):
        table.add_column(column)
    for trial in job.trials:
        agent = trial.agent.termination or "-"
        if trial.agent.exit_code is not None:
            agent += f" ({trial.agent.exit_code})"
        error = f"{trial.error.category}: {trial.error.message[:80]}" if trial.error else ""
        reward = "-" if trial.reward is None else f"{trial.reward:g}"
        style = {"success": "green", "failure": "red"}.get(trial.status, "yellow")
        table.add_row(
            trial.trial_id, f"[{style}]{trial.status}[/]", reward, agent, error,
            f"{trial.timings.total:.1f}",
        )  # fmt: skip
    return table


def _totals(job: JobResult) -> str:
    parts = [f"{job.n_trials} trials"]
    parts += [f"{n} {status}" for status, n in sorted(job.counts_by_status.items())]
    if job.mean_reward is not None:
        parts.append(f"mean reward {job.mean_reward:.3f}")
    parts += [f"pass@{k} {v:.3f}" for k, v in job.pass_at_k.items()]
    return ", ".join(parts) + f"\nresults in {job.job_dir}"


async def _run(args: argparse.Namespace, console: Console) -> int:
    if args.task_id:
        tasks = [load_task(resolve_task_id(args.path, tid)) for tid in args.task_id]
    else:
        tasks = discover_tasks(args.path)
    agent = parse_agent(args.agent)
    total = len(tasks) * args.attempts
    with Progress(
        SpinnerColumn(), "[progress.description]{task.description}", BarColumn(),
        MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True,
        disable=args.json,
    ) as progress:  # fmt: skip
        bar = progress.add_task(f"{args.agent} on {len(tasks)} task(s)", total=total)

        def done(result: TrialResult) -> None:
            progress.advance(bar)
            shown = "-" if result.reward is None else f"{result.reward:g}"
            progress.console.print(
                f"{result.trial_id}: {result.status} (reward {shown}, {result.timings.total:.1f} s)"
            )

        job = await run_job(
            tasks, agent, n_concurrent=args.n_concurrent, attempts=args.attempts,
            config=_config(args), metadata=_label(args.label), on_trial_done=done,
        )  # fmt: skip
    if args.json:
        print(job.model_dump_json(indent=2))
    else:
        console.print(_summary_table(job))
        console.print(_totals(job))
    return EXIT_INFRA if job.counts_by_error_category.get("infra") else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(stderr=args.json)
    try:
        if args.command == "run":
            if args.n_concurrent < 1 or args.attempts < 1:
                console.print("[red]error:[/] --n-concurrent and --attempts must be at least 1")
                return 1
            return asyncio.run(_run(args, console))
    except (TrialboxError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: running trials were cancelled and torn down[/]")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
