"""`trialbox prewarm`: build every distinct image some tasks need, with progress and a table."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, cast

from rich.console import Console
from rich.table import Table

from orchestrator.cli.cluster import add_ray_options, on_cluster
from orchestrator.cli.common import (
    add_base_image_option,
    add_task_options,
    config_of,
    print_error,
    progress_bar,
    tasks_of,
)
from orchestrator.common.defaults import DEFAULT_PARALLEL_BUILDS

if TYPE_CHECKING:
    from orchestrator.sandbox import ImageMaker
    from orchestrator.service.prewarm import PrewarmRow
    from orchestrator.trials.bundle_agent import BundleAgent
    from orchestrator.trials.config import TrialConfig


class _Cluster(Protocol):
    """Images made on many nodes (a Ray cluster's), each node's to warm."""

    async def nodes(self) -> Sequence[ImageMaker]: ...


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "prewarm",
        help="build the images of one task folder or of every task folder inside PATH",
        description="Build every distinct image the tasks need, reusing what exists (with "
        "--bundle: the images that bundle's trials use). Exit code 1 when any build failed.",
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
    parser.add_argument(
        "--bundle",
        metavar="WHEEL_OR_PROJECT",
        help="build the images this workflow bundle's trials use: each task's with the "
        "bundle's dependencies in its venv (a project folder is built first)",
    )
    add_ray_options(parser)
    parser.set_defaults(handler=handle)


def _table(rows: list[PrewarmRow], title: str = "images") -> Table:
    table = Table(title=title)
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


async def _prewarm_nodes(args: argparse.Namespace, console: Console, config: TrialConfig) -> int:
    """Every node of the cluster warmed, with progress per node. With a registry the first
    node builds and pushes, then the others pull; without one each node builds."""
    from orchestrator.executors.base import executor_for
    from orchestrator.service.prewarm import PrewarmError, prewarm

    started = time.monotonic()
    tasks = tasks_of(args)
    nodes = await cast(_Cluster, executor_for(config).images).nodes()
    rows: dict[str, list[PrewarmRow]] = {}
    with progress_bar(console) as progress:

        async def warm(node: ImageMaker) -> None:
            bar = progress.add_task(f"{node.name}: {len(tasks)} task(s)", total=None)
            try:
                rows[node.name] = await prewarm(
                    tasks, base_image_map=config.base_image_map, max_parallel=args.max_parallel,
                    backend=node, force_build=args.force_build,
                    on_done=lambda _row: progress.advance(bar),
                )  # fmt: skip
            except PrewarmError as exc:
                rows[node.name] = exc.rows

        first, *others = nodes
        if args.registry is not None:
            await warm(first)
            nodes = others
        await asyncio.gather(*(warm(node) for node in nodes))
    for name, node_rows in rows.items():
        console.print(_table(node_rows, title=f"images on {name}"))
        console.print(_totals(node_rows, time.monotonic() - started))
    failed = any(row.status == "failed" for node_rows in rows.values() for row in node_rows)
    if failed:
        print_error(console, "some images failed to build; see the tables above")
    return 1 if failed else 0


async def _prewarm(
    args: argparse.Namespace, console: Console, bundle: BundleAgent | None = None
) -> int:
    from orchestrator.executors.base import executor_for
    from orchestrator.service.prewarm import PrewarmError, prewarm

    started = time.monotonic()
    config = on_cluster(config_of(args), args)
    if config.backend.type == "ray":
        return await _prewarm_nodes(args, console, config)
    tasks = tasks_of(args)
    title = f"images of {len(tasks)} task(s)"
    if bundle is not None:
        title += f" with bundle {bundle.info.name}'s dependencies"
    with progress_bar(console) as progress:
        bar = progress.add_task(title, total=None)
        try:
            rows = await prewarm(
                tasks, base_image_map=config.base_image_map, max_parallel=args.max_parallel,
                backend=executor_for(config).images, force_build=args.force_build,
                on_done=lambda _row: progress.advance(bar), agent=bundle,
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
    if args.bundle is not None and args.ray is not None:
        # Refused rather than half done: a node is sent each task's folder alone, so it would
        # warm the task's own image, not the bundle's, in a table that looks complete.
        print_error(
            console,
            "--bundle with a cluster (--ray, or $TRIALBOX_RAY): not supported; a cluster's "
            "nodes get each task's folder, not the bundle's dependencies, so only the tasks' own "
            "images would be warmed. Leave out --bundle to warm those on every node, or prewarm "
            "the bundle's images on each node's engine without a cluster",
        )
        return 1
    from orchestrator.trials.bundle_agent import BundleAgent

    bundle = None if args.bundle is None else BundleAgent.load(args.bundle)  # builds a project
    return asyncio.run(_prewarm(args, console, bundle))
