"""Where the shell agent reports: a line per turn on stdout, its own notes on stderr."""

from __future__ import annotations

import sys


def say(line: str) -> None:
    print(line, flush=True)


def log(line: str) -> None:
    print(f"shell agent: {line}", file=sys.stderr, flush=True)
