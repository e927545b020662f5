"""Command line: ``python -m container_runtime agent|grade``; exits with the runner's code."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from container_runtime.runner import agent_main, grade_main

DESCRIPTION = """\
Run user code inside a trialbox task container.

  agent  --workflow module:Class   run an AgentWorkflow on /logs/agent/container_input.json;
                                   always writes /logs/agent/container_result.json
  grade  --grader module:Class     run a Grader (label in /tests/label.json, trajectory in
                                   /logs/agent/trajectory.json); writes
                                   /logs/verifier/reward.json only if it set a reward

Modules are imported with the working directory first on sys.path. The roots /logs and
/tests can be moved with TRIALBOX_LOGS_DIR and TRIALBOX_TESTS_DIR. Exit code: 0 on success,
1 otherwise."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m container_runtime",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{agent,grade}")
    agent = commands.add_parser("agent", help="run an agent workflow and write its result")
    agent.add_argument(
        "--workflow", required=True, metavar="module:Class", help="an AgentWorkflow subclass"
    )
    grade = commands.add_parser("grade", help="run a grader and write reward.json")
    grade.add_argument("--grader", required=True, metavar="module:Class", help="a Grader subclass")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "agent":
        return agent_main(args.workflow)
    return grade_main(args.grader)


if __name__ == "__main__":
    sys.exit(main())
