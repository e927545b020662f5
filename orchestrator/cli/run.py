"""`trialbox run`: trials from the shell, with live progress and a summary table."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from rich.console import Console
from rich.table import Table

from orchestrator.cli.common import (
    EXIT_INFRA,
    CancelOnSignal,
    add_agent_options,
    add_config_options,
    add_model_options,
    add_task_options,
    config_of,
    print_error,
    progress_bar,
    signal_exit_code,
    tasks_of,
)
from orchestrator.common.ids import new_id
from orchestrator.service.job import run_job, task_unusable
from orchestrator.trials.agents import parse_agent
from orchestrator.trials.result import JobResult, TrialResult


def add_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run",
        help="run trials of one task folder, or of every task folder inside PATH",
        description=(
            "Run trials and print a summary. Exit code 0 when every trial ran, 1 on bad "
            "input or a task that could not be used (it fails before its agent runs, and is "
            f"never counted as a scored zero), {EXIT_INFRA} when any trial failed for "
            "infrastructure reasons. SIGINT "
            "(Ctrl-C), SIGTERM and SIGHUP cancel the running trials, which write their "
            "result.json and remove their containers; the exit code is then 128 + the "
            "signal's number (130, 143, 129). The job id and owner are printed to stderr at "
            "the start: after a SIGKILL, `trialbox reap --job JOB` removes the leftovers."
        ),
    )
    add_task_options(run)
    add_agent_options(run)
    run.add_argument("--attempts", type=int, default=1, help="trials per task (default: 1)")
    add_config_options(run)
    run.add_argument(
        "--label", help="ground-truth label (JSON or a plain string) for the verifier only"
    )
    run.add_argument("--json", action="store_true", help="print the job result as JSON")
    add_model_options(run)
    run.set_defaults(handler=handle)


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
    used = [t.usage for t in job.trials if t.usage is not None]
    if used:
        tokens = sum(u.prompt_tokens + u.completion_tokens for u in used)
        parts.append(f"{sum(u.calls for u in used)} model calls, {tokens} tokens")
    return ", ".join(parts) + f"\nresults in {job.job_dir}"


async def _run(args: argparse.Namespace, console: Console) -> int:
    tasks = tasks_of(args)
    agent = parse_agent(args.agent)
    config = config_of(args)
    job_id = new_id("job")
    print(
        f"job {job_id}, owner {config.owner} — trialbox reap --job {job_id} removes its leftovers",
        file=sys.stderr,
        flush=True,
    )
    total = len(tasks) * args.attempts
    job: JobResult | None = None
    with progress_bar(console, disable=args.json) as progress:
        bar = progress.add_task(f"{args.agent} on {len(tasks)} task(s)", total=total)

        def done(result: TrialResult) -> None:
            progress.advance(bar)
            shown = "-" if result.reward is None else f"{result.reward:g}"
            progress.console.print(
                f"{result.trial_id}: {result.status} (reward {shown}, {result.timings.total:.1f} s)"
            )

        work = run_job(
            tasks, agent, n_concurrent=args.n_concurrent, attempts=args.attempts, config=config,
            job_id=job_id, metadata=_label(args.label), on_trial_done=done,
        )  # fmt: skip
        running = asyncio.create_task(work)
        with CancelOnSignal(running, progress.console, job_id=job_id) as stop:
            try:
                job = await running
            except asyncio.CancelledError:
                if stop.received is None:
                    raise  # not ours: let it go on
    if job is not None:  # also when a signal came too late to cancel anything
        if args.json:
            print(job.model_dump_json(indent=2))
        else:
            console.print(_summary_table(job))
            console.print(_totals(job))
    if stop.received is not None:
        name = signal.Signals(stop.received).name
        console.print(
            f"[yellow]interrupted by {name}: running trials were cancelled and torn down; "
            f"their result.json is under {config.jobs_dir.resolve() / job_id}[/]",
            soft_wrap=True,
        )
        return signal_exit_code(stop.received)
    assert job is not None
    if job.counts_by_error_category.get("infra"):
        return EXIT_INFRA
    return 1 if any(task_unusable(t) for t in job.trials) else 0


def handle(args: argparse.Namespace, console: Console) -> int:
    if args.n_concurrent < 1 or args.attempts < 1:
        print_error(console, "--n-concurrent and --attempts must be at least 1")
        return 1
    return asyncio.run(_run(args, console))
