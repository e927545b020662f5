"""The `trialbox` command.

Progress bars and tables live here, never in the library, which reports through return
values and callbacks.

`build_parser` builds the parser from light imports only (no pydantic, none of the library: each
handler imports what it runs when it runs), so `trialbox --help` is fast; `main` runs a
subcommand and exits 1 on bad input, 3 when the host could not keep a file.
"""

from __future__ import annotations

import argparse
import logging
import sys

from rich.console import Console

from orchestrator.cli import bundle, export, prewarm, reap, run, serve, view
from orchestrator.cli.common import EXIT_INFRA, print_error
from orchestrator.common.errors import HostStorageError, TrialboxError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trialbox", description="Run AI-agent trials in Docker sandboxes and score them."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run.add_parser(commands)
    prewarm.add_parser(commands)
    serve.add_parser(commands)
    reap.add_parser(commands)
    view.add_parser(commands)
    export.add_parser(commands)
    bundle.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # What the library warns about (e.g. a resumed job's leftovers removed) reaches the user.
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    console = Console(stderr=getattr(args, "json", False))
    try:
        return args.handler(args, console)
    except HostStorageError as exc:  # the host's fault (a full disk), not the input's
        print_error(console, exc)
        return EXIT_INFRA
    except (TrialboxError, ValueError) as exc:
        print_error(console, exc)
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: running trials were cancelled and torn down[/]")
        return 130


if __name__ == "__main__":
    sys.exit(main())
