"""`trialbox serve`: the rollout engine over HTTP (needs the `serve` extra)."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from rich.console import Console

from orchestrator.cli.common import (
    add_agent_options,
    add_config_options,
    add_model_options,
    config_of,
    print_error,
)
from orchestrator.service.engine import DEFAULT_RETENTION_SEC
from orchestrator.tasks.task import discover_tasks

TOKEN_ENV = "TRIALBOX_ADMIN_TOKEN"


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "serve",
        help="serve rollouts over HTTP: submit, status, cancel",
        description="Serve POST /rollouts (202, or 429 with Retry-After when full), "
        "GET /rollouts/{id}, POST /rollouts/cancel and GET /healthz.",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--task", type=Path, help="template mode: the task every rollout runs")
    where.add_argument(
        "--tasks-dir", type=Path, help="dataset mode: rollouts name a task_id under this folder"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    add_agent_options(parser, what="the default agent")
    parser.add_argument(
        "--allow-agent",
        action="append",
        default=[],
        metavar="SPEC",
        help="another agent spec a request may choose (repeatable); others are refused",
    )
    parser.add_argument(
        "--allow-task-paths",
        action="store_true",
        help="let requests name a task folder on this host by path (off: task_id or the "
        "template task only)",
    )
    parser.add_argument(
        "--max-queue-depth",
        type=int,
        default=None,
        help="rollouts that may wait for a slot before 429 (default: no bound; 0 is refused)",
    )
    parser.add_argument(
        "--retention-sec",
        type=float,
        default=DEFAULT_RETENTION_SEC,
        help=f"how long finished rollouts stay queryable (default: {DEFAULT_RETENTION_SEC:.0f})",
    )
    parser.add_argument(
        "--drain-sec",
        type=float,
        default=30.0,
        help="on shutdown, seconds to let rollouts finish before aborting them (default: 30)",
    )
    parser.add_argument(
        "--prewarm",
        action="store_true",
        help="build the images of the template task or of every task in --tasks-dir first",
    )
    parser.add_argument(
        "--allow-model-url",
        action="append",
        default=[],
        metavar="PREFIX",
        help="let requests route their model calls to an upstream URL under PREFIX "
        "(repeatable; the host's model key is sent there)",
    )
    add_config_options(parser)
    add_model_options(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    try:
        import uvicorn

        from orchestrator.service.server import create_app
    except ImportError:
        print_error(console, "serving needs the extra: pip install 'trialbox[serve]'")
        return 1
    from orchestrator.service.engine import TrialEngine

    if args.max_queue_depth is not None and args.max_queue_depth < 1:
        print_error(console, "--max-queue-depth must be at least 1 (omit it for no bound)")
        return 1
    engine = TrialEngine(
        n_concurrent=args.n_concurrent, max_queue_depth=args.max_queue_depth,
        config=config_of(args), agent=args.agent, task=args.task, tasks_dir=args.tasks_dir,
        retention_sec=args.retention_sec,
    )  # fmt: skip
    prewarm_tasks = []
    if args.prewarm:
        source = args.task or args.tasks_dir
        prewarm_tasks = discover_tasks(source) if source else []
    app = create_app(
        engine,
        admin_token=os.environ.get(TOKEN_ENV),
        prewarm_tasks=prewarm_tasks,
        drain_sec=args.drain_sec,
        agents=args.allow_agent,
        task_paths=args.allow_task_paths,
        model_urls=args.allow_model_url,
    )
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0
