"""The conversation loop: model calls, the tool calls they ask for, and when to stop.

It stops when a reply has no tool call (done), after ``max_turns`` model calls, or when the
deadline comes (``DeadlineReached``); however it stopped, every tool call gets an answer and
the conversation is saved as the trajectory.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Tuple

from container_runtime import paths
from container_runtime.contract import write_json
from container_runtime.shell_agent.client import ChatClient
from container_runtime.shell_agent.command import run_command
from container_runtime.shell_agent.console import log, say
from container_runtime.shell_agent.outcomes import EXIT_DONE, EXIT_MAX_TURNS, DeadlineReached
from container_runtime.shell_agent.settings import Settings
from container_runtime.shell_agent.tool import TOOL_NAME, describe_result, seconds
from container_runtime.trajectory import write_trajectory


class ShellAgent:
    """The conversation and the loop; ``messages`` is what the trajectory saves."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client = ChatClient(settings)
        self.messages: List[Dict[str, Any]] = [
            {"role": "system", "content": settings.system_prompt()},
            {"role": "user", "content": settings.instruction},
        ]

    def run(self) -> int:
        """Model calls and tool calls until done; returns the exit code."""
        max_turns = self.settings.max_turns
        for turn in range(1, max_turns + 1):
            asked = time.monotonic()
            reply = self.client.complete(self.messages)
            head = f"turn {turn}/{max_turns}: model {time.monotonic() - asked:.1f}s"
            self.messages.append(reply)
            calls = reply.get("tool_calls") or []
            if not calls:
                say(f"{head}, done: {_short(reply)}")
                return EXIT_DONE
            notes: List[str] = []
            deadline_hit = False
            try:
                for call in calls:
                    content, note, deadline_hit = self._run_call(call)
                    self.messages.append(
                        {"role": "tool", "tool_call_id": _call_id(call), "content": content}
                    )
                    notes.append(note)
                    if deadline_hit:
                        break
            finally:
                say(f"{head}, " + ("; ".join(notes) or "no command run"))
            if deadline_hit:
                raise DeadlineReached("the deadline came during a command")
        return EXIT_MAX_TURNS

    def _run_call(self, call: Any) -> Tuple[str, str, bool]:
        """Run one tool call: (tool message text, summary note, whether the deadline hit)."""
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(function, dict) or name != TOOL_NAME:
            return (
                f"[error: unknown tool {name!r}; the only tool is {TOOL_NAME!r}]",
                f"unknown tool {name!r}",
                False,
            )
        args = function.get("arguments") or "{}"
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError as exc:
                return f"[error: the arguments are not valid JSON: {exc}]", "bad arguments", False
        command = args.get("command") if isinstance(args, dict) else None
        if not isinstance(command, str) or not command.strip():
            return "[error: `command` must be a non-empty string]", "bad arguments", False
        timeout = self.settings.command_timeout_sec
        clipped = False
        left = self.settings.time_left()
        if left is not None:
            if left <= 0:
                raise DeadlineReached("the deadline came before a command")
            if left < timeout:
                timeout, clipped = left, True
        result = run_command(
            command,
            cwd=self.settings.workdir,
            timeout_sec=timeout,
            shell=self.settings.shell,
            env=self.settings.command_env,
        )
        deadline_hit = clipped and result.timed_out
        if deadline_hit:
            end = "killed at the deadline"
        elif result.timed_out:
            end = f"killed after {seconds(timeout)}s timeout"
        else:
            end = f"exit {result.returncode}"
        if result.cut_bytes:
            end += f", {result.cut_bytes} bytes cut"
        note = f"bash {_clip(command)} -> {end} ({result.duration_sec:.1f}s)"
        return describe_result(result, timeout, deadline_hit), note, deadline_hit

    def answer_pending(self, why: str) -> None:
        """Give every tool call of the last reply that has no answer one that says why.

        Keeps the trajectory well-formed (each tool call answered) however the run ended.
        """
        last = len(self.messages) - 1
        while last >= 0 and self.messages[last]["role"] == "tool":
            last -= 1
        if last < 0 or self.messages[last]["role"] != "assistant":
            return
        answered = {m.get("tool_call_id") for m in self.messages[last + 1 :]}
        for call in self.messages[last].get("tool_calls") or []:
            call_id = _call_id(call)
            if call_id not in answered:
                self.messages.append(
                    {"role": "tool", "tool_call_id": call_id, "content": f"[no result: {why}]"}
                )

    def save(self) -> None:
        """Write the trajectory (ATIF if the writer takes it, else plain messages)."""
        try:
            write_trajectory(self.messages)
            return
        except (TypeError, ValueError) as exc:
            log(f"trajectory not written as ATIF ({exc}); writing plain messages")
        write_json(paths.trajectory_path(), {"messages": self.messages})


def _call_id(call: Any) -> str:
    call_id = call.get("id") if isinstance(call, dict) else None
    return call_id if isinstance(call_id, str) else ""


def _clip(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= width else flat[: width - 3] + "...")


def _short(reply: Dict[str, Any]) -> str:
    content = reply.get("content")
    return _clip(content) if isinstance(content, str) else "(no content)"
