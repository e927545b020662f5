#!/usr/bin/env python3
"""Serve a stand-in model: an OpenAI-compatible server on 127.0.0.1 that answers every chat
completion with one fixed reply, or plays a script of answers, until Ctrl-C.

A way to try model trials (the bundle example, `--agent shell`, any agent that speaks the chat
API) with no model service:

    python3 scripts/standin-model.py --port 8001 --reply Paris
    trialbox run examples/qa-bundle/task ... --model policy \\
        --model-url http://127.0.0.1:8001/v1 --label Paris ...

    python3 scripts/standin-model.py --port 8001 --script examples/standin/hello-shell.yaml
    trialbox run examples/hello-shell --agent shell --model standin-model \\
        --model-url http://127.0.0.1:8001/v1 ...

A script (JSON or YAML) is a list of answers, each a text reply or an assistant message with
tool calls; answer N goes to every conversation's N-th model call (counted from the
assistant messages the request carries), and past the end a text reply says the script is
exhausted. See docs/standin.md.

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
    answers = parser.add_mutually_exclusive_group()
    answers.add_argument("--reply", default="ok", help="the answer to every chat completion")
    answers.add_argument(
        "--script",
        metavar="FILE",
        help="a JSON or YAML list of answers (text, or {content, tool_calls}): answer N to "
        "each conversation's N-th model call",
    )
    parser.add_argument("--model", default=None, help="the name GET /v1/models lists")
    args = parser.parse_args()
    standin = load_standin()
    model = args.model or standin.DEFAULT_MODEL
    if args.script is None:
        what = f"every chat completion answers {args.reply!r}"
        answers = ["--content", args.reply]
    else:
        try:  # checked here too, so a broken script is said before "serving" is
            count = len(standin.load_script(Path(args.script)))
        except standin.ScriptError as exc:
            print(f"stand-in model: {exc}", file=sys.stderr)
            return 1
        what = f"playing {args.script} ({count} answers per conversation)"
        answers = ["--script", args.script]
    print(f"stand-in model: {what}; Ctrl-C stops it", file=sys.stderr, flush=True)
    try:
        standin.main(["--port", str(args.port), "--model", model, *answers])
    except OSError as exc:
        print(f"cannot serve on 127.0.0.1:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the stand-in had its own handler in place
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
