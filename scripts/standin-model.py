#!/usr/bin/env python3
"""Serve a stand-in model: an OpenAI-compatible server on 127.0.0.1 that answers every chat
completion with one fixed reply, until Ctrl-C.

A way to try model trials (the bundle example, `--agent shell`) with no model service:

    python3 scripts/standin-model.py --port 8001 --reply Paris
    trialbox run examples/qa-bundle/task ... --model policy \\
        --model-url http://127.0.0.1:8001/v1 --label Paris ...

It is the stand-in the tests use (tests/support/standin.py): streaming, usage, token ids and
logprobs as vLLM sends them. The base URL is the first line it prints on stdout.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

STANDIN = Path(__file__).resolve().parent.parent / "tests" / "support" / "standin.py"


def load_standin() -> ModuleType:
    """tests/support/standin.py, by its path (`tests` need not be importable from here)."""
    spec = importlib.util.spec_from_file_location("trialbox_standin", STANDIN)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{STANDIN}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--port", type=int, default=8001, help="default 8001; 0 picks a free one")
    parser.add_argument("--reply", default="ok", help="the answer to every chat completion")
    parser.add_argument("--model", default=None, help="the name GET /v1/models lists")
    args = parser.parse_args()
    standin = load_standin()
    model = args.model or standin.DEFAULT_MODEL
    print(
        f"stand-in model: every chat completion answers {args.reply!r}; Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    try:
        standin.main(["--port", str(args.port), "--model", model, "--content", args.reply])
    except OSError as exc:
        print(f"cannot serve on 127.0.0.1:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the stand-in had its own handler in place
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
