"""`trialbox serve`: the rollout engine over HTTP (needs the `serve` extra)."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from orchestrator.cli.cluster import add_ray_options, on_cluster
from orchestrator.cli.common import (
    add_agent_options,
    add_config_options,
    add_model_options,
    add_sandbox_options,
    announce_job,
    config_of,
    print_error,
)
from orchestrator.common.defaults import (
    DEFAULT_HEADER_TIMEOUT_SEC,
    DEFAULT_KEEP_ALIVE_TIMEOUT_SEC,
    DEFAULT_RETENTION_SEC,
    MAX_BODY_BYTES,
    MAX_METADATA_BYTES,
    default_max_connections,
)

if TYPE_CHECKING:
    from orchestrator.service.http_limits import HttpLimits
    from orchestrator.trials.bundle_agent import BundleAgent

TOKEN_ENV = "TRIALBOX_ADMIN_TOKEN"
TENANT_TOKENS_ENV = "TRIALBOX_TENANT_TOKENS"
PREWARM_POOL = 2  # sandboxes kept waiting per shape under --prewarm, unless --warm-pool is given


def tenant_tokens(env_value: str | None, flags: list[str]) -> dict[str, str]:
    """PREFIX=TOKEN pairs from `TRIALBOX_TENANT_TOKENS` ('p1=t1,p2=t2') and the repeated
    `--tenant-token PREFIX=TOKEN`; a prefix given twice, or a pair without `=`, is an error."""
    pairs = [p for p in (env_value or "").split(",") if p.strip()] + flags
    tokens: dict[str, str] = {}
    for pair in pairs:
        prefix, sep, token = pair.strip().partition("=")
        if not sep or not prefix or not token.strip():
            # The pair may be a bare token: never echo it.
            raise ValueError("each tenant token is given as PREFIX=TOKEN; one is not")
        if prefix in tokens:
            raise ValueError(f"tenant prefix {prefix!r} is given twice")
        tokens[prefix] = token.strip()
    return tokens


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "serve",
        help="serve rollouts over HTTP: submit, status, cancel",
        description="Serve POST /rollouts (202, or 429 with Retry-After when full), "
        "GET /rollouts/{id} (?wait=N: a long poll), POST /rollouts/cancel and GET /healthz; "
        "POST /rollout, GET /rollout/{id}/status and POST /rollout/cancel are aliases. "
        f"Cancel is guarded by ${TOKEN_ENV} and tenant tokens (docs/serving.md, 'Who may cancel').",
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
        "--bundle",
        metavar="WHEEL_OR_PROJECT",
        help="the default agent is this workflow bundle (a project folder is built first): "
        "rollouts run its workflow, and tasks without tests/ are scored by its grader",
    )
    parser.add_argument(
        "--workflow-config",
        type=Path,
        metavar="FILE",
        help="with --bundle: a JSON object every rollout's workflow gets as workflow_config",
    )
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
        "--orphan-timeout",
        type=float,
        default=None,
        metavar="SEC",
        help="cancel a rollout whose id nobody submitted, polled or long-polled for SEC "
        "seconds (a trainer that died, a lost cancel); its status says why (default: off)",
    )
    parser.add_argument(
        "--max-retries",
        type=int,
        default=0,
        metavar="N",
        help="run a rollout whose trial failed for infra reasons again under the same id, up "
        "to N more times, before its status reports (each try its own trial folder; the "
        "status says which try it is and why the earlier ones failed) (default: 0)",
    )
    parser.add_argument(
        "--prewarm",
        action="store_true",
        help="build the images of the template task or of every task in --tasks-dir first, "
        f"and keep {PREWARM_POOL} sandboxes waiting per image once one was asked for (unless "
        "--warm-pool says otherwise)",
    )
    parser.add_argument(
        "--allow-model-url",
        action="append",
        default=[],
        metavar="PREFIX",
        help="let requests route their model calls to an upstream URL under PREFIX "
        "(repeatable; the host's model key is sent there)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=MAX_BODY_BYTES,
        help=f"larger request bodies are answered 413 (default: {MAX_BODY_BYTES})",
    )
    parser.add_argument(
        "--max-metadata-bytes",
        type=int,
        default=MAX_METADATA_BYTES,
        help=f"a rollout's metadata larger than this as JSON is answered 413 "
        f"(default: {MAX_METADATA_BYTES})",
    )
    parser.add_argument(
        "--tenant-token",
        action="append",
        default=[],
        metavar="PREFIX=TOKEN",
        help="a bearer token that may cancel rollouts whose id starts with PREFIX, and only "
        f"those (repeatable; also ${TENANT_TOKENS_ENV}='p1=t1,p2=t2')",
    )
    add_connection_options(parser)
    add_config_options(parser)
    add_sandbox_options(parser)
    add_model_options(parser)
    add_ray_options(parser)
    parser.set_defaults(handler=handle)


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """The HTTP connection limits (docs/serving.md, 'Connection limits')."""
    group = parser.add_argument_group("connection limits")
    group.add_argument(
        "--header-timeout",
        type=float,
        default=DEFAULT_HEADER_TIMEOUT_SEC,
        metavar="SEC",
        help="a request head not complete SEC seconds after its first byte, or a body that "
        f"sends nothing for SEC seconds, is answered 408 and closed (default: "
        f"{DEFAULT_HEADER_TIMEOUT_SEC:g})",
    )
    group.add_argument(
        "--keep-alive-timeout",
        type=float,
        default=DEFAULT_KEEP_ALIVE_TIMEOUT_SEC,
        metavar="SEC",
        help="a connection with no request under way is closed after SEC seconds "
        f"(default: {DEFAULT_KEEP_ALIVE_TIMEOUT_SEC:g})",
    )
    group.add_argument(
        "--max-connections",
        type=int,
        default=None,
        metavar="N",
        help="connections served at once; more are answered 503 with Retry-After (default: "
        f"{default_max_connections()} here: 1000, or a quarter of `ulimit -n` when lower)",
    )


def connection_limits(args: argparse.Namespace) -> HttpLimits:
    """`HttpLimits` of the flags; a ValueError naming the flag when one is not above 0."""
    from orchestrator.service.http_limits import HttpLimits

    flags = {
        "header_timeout": ("--header-timeout", args.header_timeout),
        "keep_alive_timeout": ("--keep-alive-timeout", args.keep_alive_timeout),
        "max_connections": ("--max-connections", args.max_connections),
    }
    for flag, value in flags.values():
        if value is not None and not value > 0:  # also NaN
            raise ValueError(f"{flag} must be more than 0 (got {value:g})")
        if isinstance(value, float) and value == float("inf"):
            raise ValueError(f"{flag} must be a finite number of seconds (got inf)")
    given = {name: value for name, (_flag, value) in flags.items() if value is not None}
    return HttpLimits(**given)


def bundle_agent(args: argparse.Namespace) -> BundleAgent:
    """The agent of `--bundle` (built now when a project: never on the server's loop)."""
    from orchestrator.trials.bundle_agent import BundleAgent

    if args.agent != "oracle":
        raise ValueError("--bundle is the default agent: give it or --agent, not both")
    return BundleAgent.load(args.bundle, config_file=args.workflow_config)


def handle(args: argparse.Namespace, console: Console) -> int:
    try:
        from orchestrator.service.http_protocol import serve_app
        from orchestrator.service.server import create_app
    except ImportError:
        print_error(console, "serving needs the extra: pip install 'trialbox[serve]'")
        return 1
    from orchestrator.cli.dataset_checks import check_base_images, serve_tasks
    from orchestrator.service.engine import TrialEngine

    if args.max_queue_depth is not None and args.max_queue_depth < 1:
        print_error(console, "--max-queue-depth must be at least 1 (omit it for no bound)")
        return 1
    if args.max_body_bytes < 1 or args.max_metadata_bytes < 1:
        print_error(console, "--max-body-bytes and --max-metadata-bytes must be at least 1")
        return 1
    if args.orphan_timeout is not None and not args.orphan_timeout > 0:
        print_error(console, "--orphan-timeout must be more than 0 seconds (omit it for none)")
        return 1
    if args.max_retries < 0:
        print_error(console, "--max-retries must be 0 or more")
        return 1
    if args.workflow_config is not None and args.bundle is None:
        print_error(console, "--workflow-config configures a --bundle; give one")
        return 1
    try:
        tenants = tenant_tokens(os.environ.get(TENANT_TOKENS_ENV), args.tenant_token)
        limits = connection_limits(args)
    except ValueError as exc:
        print_error(console, str(exc))
        return 1
    # The dataset checked as `run` checks its own, before the port is taken: refused when a
    # task cannot be used, or a base-image mapping cannot work.
    tasks = serve_tasks(args.task, args.tasks_dir)
    config = on_cluster(config_of(args), args)
    if args.prewarm and args.warm_pool is None:
        config.warm_pool = PREWARM_POOL  # prewarmed images, and sandboxes of them waiting
    check_base_images(config, tasks, every_task=not args.allow_task_paths)
    bundle = None if args.bundle is None else bundle_agent(args)
    engine = TrialEngine(
        n_concurrent=args.n_concurrent, max_queue_depth=args.max_queue_depth,
        config=config,
        agent=args.agent if bundle is None else bundle.spec,
        task=args.task, tasks_dir=args.tasks_dir, retention_sec=args.retention_sec,
        orphan_timeout_sec=args.orphan_timeout, max_retries=args.max_retries,
    )  # fmt: skip
    prewarm_tasks = []
    if args.prewarm:
        prewarm_tasks = tasks
        if bundle is not None:  # the images with the bundle's dependencies, as it runs them
            prewarm_tasks = [bundle.for_task(task) for task in prewarm_tasks]
    try:
        app = create_app(
            engine,
            admin_token=os.environ.get(TOKEN_ENV),
            tenant_tokens=tenants,
            prewarm_tasks=prewarm_tasks,
            drain_sec=args.drain_sec,
            agents=args.allow_agent,
            task_paths=args.allow_task_paths,
            model_urls=args.allow_model_url,
            max_body_bytes=args.max_body_bytes,
            max_metadata_bytes=args.max_metadata_bytes,
        )
    except ValueError as exc:
        print_error(console, str(exc))
        return 1
    logging.basicConfig(
        level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True
    )
    announce_job(engine.job_id, engine.config.owner)
    serve_app(app, host=args.host, port=args.port, limits=limits)
    return 0
