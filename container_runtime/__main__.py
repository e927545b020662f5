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
  forward --listen HOST:PORT --to SOCKET [--daemon]
                                   pipe TCP connections on HOST:PORT to a unix socket (how
                                   an agent reaches its model gateway); prints the port
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
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    agent = commands.add_parser("agent", help="run an agent workflow and write its result")
    agent.add_argument(
        "--workflow", required=True, metavar="module:Class", help="an AgentWorkflow subclass"
    )
    forward = commands.add_parser("forward", help="pipe a local TCP port to a unix socket")
    forward.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT")
    forward.add_argument("--to", required=True, metavar="SOCKET", help="the unix socket")
    forward.add_argument("--daemon", action="store_true", help="detach once listening")
    grade = commands.add_parser("grade", help="run a grader and write reward.json")
    grade.add_argument("--grader", required=True, metavar="module:Class", help="a Grader subclass")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "agent":
        return agent_main(args.workflow)
    if args.command == "forward":
        from container_runtime.forward import forward_main

        return forward_main(args.listen, args.to, args.daemon)
    return grade_main(args.grader)


if __name__ == "__main__":
    sys.exit(main())
