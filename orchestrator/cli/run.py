"""`trialbox run`: trials from the shell, with live progress and a summary table.

Options come from the command line, `TRIALBOX_*` variables and a job file (`settings`); a
job that died is finished with `--resume JOB_DIR`, which reads the job's own config.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from argparse import SUPPRESS
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.cli.cluster import add_ray_options, on_cluster, ray_config
from orchestrator.cli.common import (
    EXIT_INFRA,
    CancelOnSignal,
    add_agent_options,
    add_config_options,
    add_model_options,
    add_sandbox_options,
    add_task_options,
    announce_job,
    config_of,
    progress_bar,
    signal_exit_code,
    tasks_of,
)
from orchestrator.cli.labels import label_value, read_labels
from orchestrator.cli.model_check import MODEL_CHECK_TIMEOUT_SEC, check_model
from orchestrator.common.defaults import BASE_IMAGE_MAP_ENV

if TYPE_CHECKING:
    from orchestrator.cli.settings import RunSettings
    from orchestrator.service.job import JobRecord
    from orchestrator.tasks.task import Task
    from orchestrator.trials.result import TrialResult

# The parser is built from the imports above alone (`trialbox run --help` loads no engine
# SDK or HTTP stack); what a run needs is imported where it runs.

DESCRIPTION = f"""\
Run trials and print a summary. Exit code 0 when every trial ran, 1 on bad input or a task
that could not be used (it fails before its agent runs, and is never counted as a scored
zero), {EXIT_INFRA} when any trial failed for infrastructure reasons or the host could not write
the job's files (a full disk: the job goes on, each trial it hit is infra). SIGINT (Ctrl-C),
SIGTERM and SIGHUP cancel the running trials, which write their result.json and remove their
containers; the exit code is then 128 + the signal's number (130, 143, 129). The job id and
owner are printed to stderr at the start: after a SIGKILL, `trialbox reap --job JOB` removes
the leftovers and `trialbox run --resume JOBS_DIR/JOB` finishes the job.

Where options come from: command line > TRIALBOX_<OPTION> environment variables
(TRIALBOX_N_CONCURRENT=8; lists as JSON or comma-separated; --base-image is
${BASE_IMAGE_MAP_ENV}) > the job file of -c > the defaults shown. A job file (.toml, .yaml,
.yml, .json) holds any option by its long name with _ for - (n_concurrent = 8), paths
relative to the file; an unknown key is an error. The job folder gets config.json (every
option; never a secret) at the start and job.json after every trial.
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run",
        help="run trials of one task folder, or of every task folder inside PATH",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_task_options(run, optional_path=True, exclude=True)
    add_agent_options(run)
    run.add_argument(
        "--workflow-config",
        type=Path,
        metavar="FILE",
        help="with --agent bundle:WHEEL_OR_PROJECT: a JSON object every trial's workflow gets "
        "as workflow_config (the same as bundle:…?config=FILE)",
    )
    run.add_argument(
        "--agent-config",
        type=Path,
        metavar="FILE",
        help="with --agent mini-swe-agent: its own YAML configuration (step and cost limits, "
        "templates, the action timeout), merged over its default.yaml (the same as "
        "mini-swe-agent?config=FILE)",
    )
    run.add_argument("--attempts", type=int, default=1, help="trials per task (default: 1)")
    run.add_argument(
        "--max-retries",
        type=int,
        default=0,
        metavar="N",
        help="run a trial that failed for infrastructure reasons (category infra) again, up to "
        "N times, after a short backoff (default: 0); every attempt is kept, the last counts",
    )
    add_config_options(run)
    run.add_argument(
        "--job-name",
        metavar="NAME",
        help="the job folder's name under --jobs-dir, refused if it exists (default: the UTC "
        "time and a random part, e.g. 2026-12-01__14-03-07__1a2b3c4d)",
    )
    run.add_argument(
        "--backend",
        choices=["docker", "fake"],
        default="docker",
        help="where sandboxes run: docker (default), or fake: in memory, no engine (tasks' "
        "commands run through a tiny shell; for trying trialbox and for tests)",
    )
    add_sandbox_options(run)
    add_ray_options(run)
    run.add_argument(
        "--label", help="ground-truth label (JSON or a plain string) for the verifier only"
    )
    run.add_argument(
        "--labels",
        type=Path,
        metavar="FILE",
        help='a label per task, JSON Lines: {"task": "<task name>", "label": ...} a line (a '
        "task without one gets none); not with --label",
    )
    run.add_argument("--json", action="store_true", help="print the job result as JSON")
    add_model_options(run)
    run.add_argument(
        "--no-model-check",
        action="store_true",
        help="do not check before the job that the model answers (one GET <--model-url>/models "
        f"within {MODEL_CHECK_TIMEOUT_SEC:g} s; any answer below 500 passes)",
    )
    job = run.add_argument_group("job file and resume")
    job.add_argument(
        "-c", "--config", type=Path, metavar="FILE", help="a job file (.toml/.yaml/.yml/.json)"
    )
    job.add_argument(
        "--resume",
        type=Path,
        metavar="JOB_DIR",
        help="finish a job that stopped, in its folder and id, as its config.json says: "
        "(task, attempt) pairs with no result, or whose result is infra or cancelled, run "
        "again; every other result is kept untouched. Only -n/--n-concurrent, --max-retries, "
        "--keep-containers, --json, --ray and --registry may be given with it (environment and "
        "-c do not apply)",
    )
    for action in run._actions:  # only what the user typed reaches the namespace
        action.default = SUPPRESS
    run.set_defaults(handler=handle)


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The options typed on the command line, by RunOptions' field names."""
    from orchestrator.cli.settings import RunOptions

    given = {"json_output" if k == "json" else k: v for k, v in vars(args).items()}
    # An optional positional left out still arrives: its SUPPRESS default through its type.
    return {k: v for k, v in given.items() if k in RunOptions.model_fields and str(v) != SUPPRESS}


@dataclass
class _Job:
    """What `trialbox run` hands to the job runner."""

    job_id: str
    jobs_dir: Path
    owner: str
    json_output: bool
    total: int
    title: str
    start: Callable[[dict[str, Any]], Coroutine[Any, Any, JobRecord]]


def _labels(settings: RunSettings, tasks: list[Task]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(job-wide metadata, per-task metadata) from --label or --labels."""
    from orchestrator.common.errors import TaskError
    from orchestrator.tasks.task import task_folders

    if settings.label is not None and settings.labels is not None:
        raise ValueError("--label and --labels: give one of them")
    if settings.labels is None:
        return ({} if settings.label is None else {"label": label_value(settings.label)}), {}
    assert settings.path is not None
    existing = {t.name for t in tasks}  # and those --task-id or --exclude-task left out:
    with contextlib.suppress(TaskError):  # a labels file may cover the whole dataset
        existing |= {folder.resolve().name for folder in task_folders(settings.path)}
    per_task = read_labels(settings.labels, existing)
    selected = {t.name for t in tasks}
    return {}, {name: {"label": v} for name, v in per_task.items() if name in selected}


def _new_job(settings: RunSettings) -> _Job:
    from orchestrator.cli.dataset_checks import check_base_images
    from orchestrator.common.ids import check_id
    from orchestrator.jobs.ids import fresh_job_id
    from orchestrator.service.job import run_job
    from orchestrator.trials.agents import parse_agent

    if settings.path is None:
        raise ValueError("give PATH (a task folder, or a folder of task folders), or --resume")
    tasks = tasks_of(settings)
    metadata, task_metadata = _labels(settings, tasks)
    agent = parse_agent(settings.agent_spec())
    for task in tasks:  # a ${VAR} the host does not set: said once, before any container
        task.check_env_vars(include_solution=agent.runs_solution)
    config = config_of(settings)
    check_model(agent, config.model, probe=not settings.no_model_check)
    config = on_cluster(config, settings)
    check_base_images(config, tasks)  # before the job folder and any container
    jobs_dir = config.jobs_dir.resolve()
    if settings.job_name is None:
        job_id = fresh_job_id(jobs_dir)
    else:
        job_id = check_id(settings.job_name, "--job-name")
        if (jobs_dir / job_id).exists():
            raise ValueError(
                f"{jobs_dir / job_id}: the job folder exists; finish that job with --resume "
                f"{jobs_dir / job_id}, or choose another --job-name"
            )

    def start(hooks: dict[str, Any]) -> Coroutine[Any, Any, JobRecord]:
        return run_job(
            tasks, agent, n_concurrent=settings.n_concurrent, attempts=settings.attempts,
            config=config, job_id=job_id, metadata=metadata, task_metadata=task_metadata,
            max_retries=settings.max_retries, options=settings.saved(), **hooks,
        )  # fmt: skip

    return _Job(
        job_id, jobs_dir, config.owner, settings.json_output, len(tasks) * settings.attempts,
        f"{settings.agent} on {len(tasks)} task(s)", start,
    )  # fmt: skip


def _this_owner() -> str:
    """The owner a resumed job's sandboxes get: this process's (the first run's is gone)."""
    from orchestrator.trials.config import TrialConfig

    return str(TrialConfig.model_fields["owner"].get_default(call_default_factory=True))


def _resumed_job(job_dir: Path, given: dict[str, Any], args: argparse.Namespace) -> _Job:
    from orchestrator.cli.settings import resume_overrides
    from orchestrator.jobs.config import JobConfigFile
    from orchestrator.jobs.store import CONFIG_FILE
    from orchestrator.service.job import resume_job

    overrides = resume_overrides(given)
    job_dir = job_dir.resolve()
    try:
        saved = JobConfigFile.model_validate_json((job_dir / CONFIG_FILE).read_bytes())
    except OSError as exc:
        raise ValueError(f"{job_dir}: not a job folder to resume ({exc.strerror})") from None
    json_output = overrides.get("json_output", (saved.options or {}).get("json", False))
    options = None
    if saved.options is not None:
        options = saved.options | {k: v for k, v in overrides.items() if k != "json_output"}

    cluster = ray_config(args, environment=False)  # a resumed job may name its cluster anew

    def start(hooks: dict[str, Any]) -> Coroutine[Any, Any, JobRecord]:
        return resume_job(
            job_dir, n_concurrent=overrides.get("n_concurrent"),
            max_retries=overrides.get("max_retries"),
            keep_containers=overrides.get("keep_containers"), options=options,
            cluster=cluster, **hooks,
        )  # fmt: skip

    return _Job(
        saved.job_id, job_dir.parent, _this_owner(), bool(json_output),
        len(saved.tasks) * saved.attempts, f"{saved.agent}, resumed", start,
    )  # fmt: skip


def _summary_table(job: JobRecord) -> Table:
    table = Table(title=f"job {job.job_id}")
    for column in ("trial", "status", "reward", "agent", "error", "seconds"):
        # Nothing is cut (no ellipsis): a long reason or id wraps, words broken where needed.
        table.add_column(column, overflow="fold")
    for trial in job.trials:
        agent: str = trial.agent.termination or "-"
        if trial.agent.exit_code is not None:
            agent += f" ({trial.agent.exit_code})"
        error = Text(f"{trial.error.category}: {trial.error.message}" if trial.error else "")
        reward = "-" if trial.reward is None else f"{trial.reward:g}"
        style = {"success": "green", "failure": "red"}.get(trial.status, "yellow")
        table.add_row(
            trial.trial_id, f"[{style}]{trial.status}[/]", reward, agent, error,
            f"{trial.timings.total:.1f}",
        )  # fmt: skip
    return table


def _totals(job: JobRecord) -> str:
    parts = [f"{job.n_trials} trials"]
    parts += [f"{n} {status}" for status, n in sorted(job.counts_by_status.items())]
    if job.superseded:
        parts.append(f"{len(job.superseded)} superseded by a rerun")
    if job.mean_reward is not None:
        parts.append(f"mean reward {job.mean_reward:.3f}")
    parts += [f"pass@{k} {v:.3f}" for k, v in job.pass_at_k.items()]
    used = [t.usage for t in job.trials if t.usage is not None]
    if used:
        tokens = sum(u.prompt_tokens + u.completion_tokens for u in used)
        parts.append(f"{sum(u.calls for u in used)} model calls, {tokens} tokens")
    return ", ".join(parts) + f"\nresults in {job.job_dir}"


async def _drive(plan: _Job, console: Console) -> int:
    from orchestrator.jobs.results import needs_rerun
    from orchestrator.service.job import task_unusable

    announce_job(plan.job_id, plan.owner)
    job: JobRecord | None = None
    with progress_bar(console, disable=plan.json_output) as progress:
        bar = progress.add_task(plan.title, total=plan.total)

        def started(record: JobRecord) -> None:
            kept = sum(1 for t in record.trials if not needs_rerun(t))
            if kept:
                progress.update(bar, completed=kept)
                progress.console.print(f"kept {kept} finished trial(s) of {record.n_expected}")

        def done(result: TrialResult) -> None:
            progress.advance(bar)
            shown = "-" if result.reward is None else f"{result.reward:g}"
            progress.console.print(
                f"{result.trial_id}: {result.status} (reward {shown}, {result.timings.total:.1f} s)"
            )

        def retrying(result: TrialResult) -> None:
            progress.update(bar, total=(progress.tasks[0].total or 0) + 1)
            progress.console.print(f"{result.trial_id}: {result.status}, running it again")

        hooks = {"on_trial_done": done, "on_retry": retrying, "on_start": started}
        running = asyncio.create_task(plan.start(hooks))
        with CancelOnSignal(running, progress.console, job_id=plan.job_id) as stop:
            try:
                job = await running
            except asyncio.CancelledError:
                if stop.received is None:
                    raise  # not ours: let it go on
    if job is not None:  # also when a signal came too late to cancel anything
        if plan.json_output:
            print(job.model_dump_json(indent=2))
        else:
            console.print(_summary_table(job))
            console.print(_totals(job), soft_wrap=True)  # the folder's path on one line
    if stop.received is not None:
        name = signal.Signals(stop.received).name
        job_dir = plan.jobs_dir / plan.job_id
        console.print(
            f"[yellow]interrupted by {name}: running trials were cancelled and torn down; "
            f"their result.json is under {job_dir}; finish the job with "
            f"trialbox run --resume {job_dir}[/]",
            soft_wrap=True,
        )
        return signal_exit_code(stop.received)
    assert job is not None
    if job.counts_by_error_category.get("infra") or job.write_errors:
        return EXIT_INFRA
    return 1 if any(task_unusable(t) for t in job.trials) else 0


def handle(args: argparse.Namespace, console: Console) -> int:
    from orchestrator.cli.settings import load_settings

    given = _given(args)
    resume: Path | None = getattr(args, "resume", None)
    if resume is not None:
        if getattr(args, "config", None) is not None:
            raise ValueError("-c/--config: not with --resume, which reads the job's config.json")
        plan = _resumed_job(resume, given, args)
    else:
        plan = _new_job(load_settings(given, getattr(args, "config", None)))
    if plan.json_output and not console.stderr:
        console = Console(stderr=True)  # stdout is the JSON's alone
    return asyncio.run(_drive(plan, console))
