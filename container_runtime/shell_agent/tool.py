"""The ``bash`` tool as the model sees it: its schema, the system prompt, the result text."""

from __future__ import annotations

import signal
from typing import Any, Dict

from container_runtime.shell_agent.command import OUTPUT_LIMIT_BYTES, CommandResult

TOOL_NAME = "bash"
BASH_TOOL: Dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "Run a shell command in a new non-interactive shell started in the task's working "
            "directory; returns its combined stdout and stderr and its exit code."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The shell command to run."}
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
}

SYSTEM_PROMPT = """\
You are an agent working on a task in a Linux sandbox. You have one tool, `bash`, which runs \
a shell command and returns its combined stdout and stderr (at most {limit_kib} KiB, the \
middle cut out when longer) and its exit code. Each command runs in a new shell started in \
{workdir}, so `cd` and variables do not carry over between calls; a command is stopped after \
{timeout} s and cannot read input. Start servers in the background with their output \
redirected to a file. When the task is done, reply with a short summary and no tool call; \
that ends your work."""


def system_prompt(workdir: str, command_timeout_sec: float) -> str:
    return SYSTEM_PROMPT.format(
        limit_kib=OUTPUT_LIMIT_BYTES // 1024,
        workdir=workdir,
        timeout=seconds(command_timeout_sec),
    )


def describe_result(result: CommandResult, timeout_sec: float, at_deadline: bool) -> str:
    """The tool message's text: the output, then notes on cuts and how the command ended."""
    text = result.head.decode("utf-8", errors="replace")
    if result.cut_bytes:
        text += f"\n[... {result.cut_bytes} bytes cut ...]\n"
    text += result.tail.decode("utf-8", errors="replace")
    if not text:
        text = "[no output]"
    lines = [text.rstrip("\n")]
    if result.cut_bytes:
        lines.append(
            f"[output cut: {result.cut_bytes} of {result.total_bytes} bytes cut from the middle; "
            f"the first {len(result.head)} and the last {len(result.tail)} are shown]"
        )
    if result.timed_out:
        why = (
            "the agent's deadline came"
            if at_deadline
            else f"it timed out after {seconds(timeout_sec)} s"
        )
        lines.append(f"[the command was killed with its process group: {why}]")
    elif result.returncode is not None and result.returncode < 0:
        try:
            name = signal.Signals(-result.returncode).name
        except ValueError:
            name = f"signal {-result.returncode}"
        lines.append(f"[killed by {name}; exit code: {128 - result.returncode}]")
    else:
        lines.append(f"[exit code: {result.returncode}]")
    if result.held_open:
        lines.append(
            "[background processes still hold this command's output; redirect theirs to a file]"
        )
    return "\n".join(lines)


def seconds(value: float) -> str:
    return f"{value:g}"
