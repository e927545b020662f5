"""`trialbox bundle build|inspect`: a rollout project as a bundle wheel, and what one declares."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from orchestrator.bundles import BundleInfo


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "bundle",
        help="build a rollout project into a bundle wheel, or inspect one",
        description="A bundle is a wheel of a Python project with an AgentWorkflow (and a "
        "Grader); run it with --agent bundle:WHEEL_OR_PROJECT (docs/bundles.md).",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    build = actions.add_parser(
        "build",
        help="build PROJECT into a bundle wheel (cached by the project's content)",
        description="Build the project's wheel with its own build backend, add an entry module "
        "binding the classes and the console scripts <package>-agent and <package>-grade. "
        "An unchanged project is not built again.",
    )
    build.add_argument("project", type=Path, help="the project folder (with pyproject.toml)")
    build.add_argument(
        "--workflow", metavar="MODULE:CLASS", help="the AgentWorkflow (default: [tool.trialbox])"
    )
    build.add_argument(
        "--grader", metavar="MODULE:CLASS", help="the Grader (default: [tool.trialbox], if any)"
    )
    build.add_argument("--json", action="store_true", help="print what was built as JSON")
    build.set_defaults(handler=handle_build)
    inspect = actions.add_parser("inspect", help="what a bundle wheel declares")
    inspect.add_argument("wheel", type=Path, help="a bundle wheel")
    inspect.add_argument("--json", action="store_true", help="print it as JSON")
    inspect.set_defaults(handler=handle_inspect)


def _show(info: BundleInfo, args: argparse.Namespace, console: Console) -> int:
    if args.json:
        print(info.model_dump_json(indent=2))
        return 0
    console.print(f"{escape(info.name)} {escape(info.version)}", soft_wrap=True)
    console.print(f"  agent script: {escape(info.agent_script)}", soft_wrap=True)
    console.print(f"  grade script: {escape(info.grade_script or '(none: no grader)')}")
    listed = ", ".join(info.requirements) or "(none)"
    console.print(f"  dependencies: {escape(listed)}", soft_wrap=True)
    console.print(str(info.wheel), soft_wrap=True, highlight=False)
    return 0


def handle_build(args: argparse.Namespace, console: Console) -> int:
    from orchestrator.bundles import build_bundle, inspect_bundle

    wheel = build_bundle(args.project, workflow=args.workflow, grader=args.grader)
    return _show(inspect_bundle(wheel), args, console)


def handle_inspect(args: argparse.Namespace, console: Console) -> int:
    from orchestrator.bundles import inspect_bundle

    return _show(inspect_bundle(args.wheel), args, console)
