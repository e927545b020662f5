"""Command line: ``python -m container_runtime agent|forward|grade|shell``; exits with its code."""

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
  shell                            the built-in agent: a tool-calling loop with one tool,
                                   bash(command), run from the working directory; writes
                                   /logs/agent/trajectory.json and a line per turn to stdout

Modules are imported with the working directory first on sys.path. The roots /logs and
/tests can be moved with TRIALBOX_LOGS_DIR and TRIALBOX_TESTS_DIR. Exit code of agent and
grade: 0 on success, 1 otherwise.

The shell agent calls OPENAI_BASE_URL + /chat/completions (else the input's
chat_completions_url) with the key in OPENAI_API_KEY and the model TRIALBOX_MODEL (else the
input's model), sending the input's sampling settings. Each command runs in a new bash (or
sh) with stdout and stderr merged and cut to 16 KiB; it is killed with its process group
after TRIALBOX_SHELL_TIMEOUT_SEC (default 60 s). 5xx answers and connection errors are
retried 3 times, 4xx never. It stops after the input's max_turns model calls (default 30),
near agent_timeout_sec, and on SIGTERM. Exit code: 0 the model was done, 1 a model error,
2 max_turns reached, 3 the deadline or SIGTERM."""


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
    commands.add_parser("shell", help="run the built-in bash tool-calling agent")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "agent":
        return agent_main(args.workflow)
    if args.command == "shell":
        from container_runtime.shell_agent import main as shell_main

        return shell_main()
    if args.command == "forward":
        from container_runtime.forward import forward_main

        return forward_main(args.listen, args.to, args.daemon)
    return grade_main(args.grader)


if __name__ == "__main__":
    sys.exit(main())
