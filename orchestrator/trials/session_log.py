"""A session's record: one ATIF step per call, and the counts and timings `result.json` keeps.

A session (`session.py`) has no agent process whose output a trial would collect: its
caller's commands are its agent's actions. Each call that reached the sandbox is noted here
as it ends, however it ends: a command as an `exec` tool call (its command or argv, timeout,
cwd, user and the names of the env it was given, never their values) whose observation is
its output, scrubbed with the trial's scrubber and then cut at
`Limits.session_trajectory_output_cap_bytes`; a write or a read as a `write_file` or
`read_file` tool call (path and size, never the bytes). Exit code, timeout, truncation,
duration and any error go into the step's `extra.session`. Step 1 is the task's instruction
(so a session without a call still has a valid trajectory).

When the session ends, the trial's finish calls `SessionAgent.keep` (`session.py`), which
writes the document to `<trial>/logs/agent/trajectory.json` (ATIF, validated, scrubbed again
as a whole, written atomically), where `trialbox view` reads an agent's trajectory; one the
caller's commands left in the sandbox's `/logs/agent` is kept beside it as
`trajectory.agent.json`, as a model-backed agent's own is.

`SessionLog` is the record; `CallNote` what one call tells it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from container_runtime import __version__, atif
from orchestrator.common.atomic_write import write_atomic
from orchestrator.common.offload import run_blocking
from orchestrator.common.scrub import Scrubber
from orchestrator.trials.result import SessionCalls

Tool = Literal["exec", "write_file", "read_file"]
TRAJECTORY = "trajectory.json"  # in the trial's logs/agent/
CALLERS_TRAJECTORY = "trajectory.agent.json"  # one the caller's commands wrote, kept beside
AGENT_NAME = "trialbox-session"

# The calls as function-calling tools, so a reader of the trajectory knows their arguments.
TOOL_DEFINITIONS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "exec",
            "description": "Run a command in the task's sandbox (sh -c COMMAND, or ARGV as it "
            "is); its output is stdout and stderr merged.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "argv": {"type": "array", "items": {"type": "string"}},
                    "timeout_sec": {"type": "number"},
                    "cwd": {"type": "string"},
                    "user": {"type": "string"},
                    "env": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write bytes to an absolute path in the sandbox.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "size": {"type": "integer"},
                    "mode": {"type": "string"},
                },
                "required": ["path", "size"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a regular file at an absolute path in the sandbox.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "max_bytes": {"type": "integer"}},
                "required": ["path"],
            },
        },
    },
]


@dataclass
class CallNote:
    """What one call tells the record as it runs: its observation (`content`, already
    scrubbed and cut), its outcome for `extra.session`, and the bytes it moved."""

    content: str = ""
    outcome: dict[str, Any] = field(default_factory=dict)
    timed_out: bool = False
    moved_bytes: int = 0
    error: str | None = None


def cut_text(text: str, cap: int) -> tuple[str, bool]:
    """`text` cut to at most `cap` UTF-8 bytes (never inside a character), and whether it was."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= cap:
        return text, False
    return data[:cap].decode("utf-8", errors="ignore"), True


class SessionLog:
    """The steps of one session and the counts `result.json` keeps (`calls`)."""

    def __init__(self, *, output_cap: int) -> None:
        """`output_cap`: each command's output is cut here in the trajectory (bytes)."""
        self.output_cap = output_cap
        self.calls = SessionCalls()
        self.steps: list[dict[str, Any]] = []
        self.opened = False
        self._session_id = ""
        self._scrubber = Scrubber(())

    def open(self, *, session_id: str, instruction: str, scrubber: Scrubber) -> None:
        """The session is ready: step 1 is the task's instruction; `scrubber` is the trial's
        (final once its sandbox is ready), applied to every observation as it is noted."""
        self.opened = True
        self._session_id = session_id
        self._scrubber = scrubber
        self.steps.append(
            {
                "step_id": 1,
                "timestamp": _now(),
                "source": "user",
                "message": scrubber.text(instruction),
            }
        )

    def output(self, text: str) -> tuple[str, bool]:
        """A command's output for the trajectory: scrubbed first (so no cut leaves a piece
        of a secret), then cut at the cap; and whether it was cut."""
        return cut_text(self._scrubber.text(text), self.output_cap)

    @contextlib.contextmanager
    def call(self, tool: Tool, arguments: dict[str, Any]) -> Iterator[CallNote]:
        """Note one call that reached the sandbox, as a step, once it ends: returned, raised
        or cancelled (its error then in `extra.session.error`)."""
        note = CallNote()
        stamp = _now()
        started = time.monotonic()
        try:
            yield note
        except asyncio.CancelledError:
            note.error = "cancelled while it ran (the session was closed or aborted)"
            raise
        except BaseException as exc:
            note.error = self._scrubber.text(f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self._add(tool, arguments, stamp, time.monotonic() - started, note)

    def _add(
        self, tool: Tool, arguments: dict[str, Any], stamp: str, duration: float, note: CallNote
    ) -> None:
        calls = self.calls
        if tool == "exec":
            calls.commands += 1
            calls.commands_sec += duration
            calls.longest_command_sec = max(calls.longest_command_sec, duration)
            calls.timed_out += int(note.timed_out)
        else:
            calls.files_sec += duration
            if tool == "write_file":
                calls.writes += 1
                calls.bytes_written += note.moved_bytes
            else:
                calls.reads += 1
                calls.bytes_read += note.moved_bytes
        calls.failed += int(note.error is not None)
        call_id = f"call-{len(self.steps)}"
        outcome = {**note.outcome, "duration_sec": round(duration, 6)}
        if note.error is not None:
            outcome["error"] = note.error
        self.steps.append(
            {
                "step_id": len(self.steps) + 1,
                "timestamp": stamp,
                "source": "agent",
                "message": "",
                "llm_call_count": 0,
                "tool_calls": [
                    {"tool_call_id": call_id, "function_name": tool, "arguments": arguments}
                ],
                "observation": {"results": [{"source_call_id": call_id, "content": note.content}]},
                "extra": {"session": outcome},
            }
        )

    def document(self, *, trial_id: str) -> dict[str, Any]:
        """The ATIF document of the steps so far, validated."""
        doc = {
            "schema_version": atif.SCHEMA_VERSION,
            "session_id": self._session_id or trial_id,
            "agent": {
                "name": AGENT_NAME,
                "version": __version__,
                "tool_definitions": TOOL_DEFINITIONS,
            },
            "steps": self.steps,
            "final_metrics": {"total_steps": len(self.steps)},
            "extra": {"trial_id": trial_id, "calls": self.calls.model_dump(mode="json")},
        }
        return atif.dump_trajectory(atif.validate_trajectory(doc))

    async def write(self, agent_dir: Path, *, trial_id: str, scrubber: Scrubber) -> None:
        """`agent_dir/trajectory.json`, scrubbed as a whole and written atomically; a
        trajectory the caller's commands left there (collected from the sandbox) is kept as
        `trajectory.agent.json`."""
        text = scrubber.text(json.dumps(self.document(trial_id=trial_id), indent=2))
        await run_blocking(agent_dir.mkdir, parents=True, exist_ok=True)
        own = agent_dir / TRAJECTORY
        if await run_blocking(own.is_file):
            await run_blocking(own.replace, agent_dir / CALLERS_TRAJECTORY)
        await write_atomic(own, text)


def _now() -> str:
    return datetime.now(UTC).isoformat()


__all__ = ["CALLERS_TRAJECTORY", "TRAJECTORY", "CallNote", "SessionLog", "Tool", "cut_text"]
