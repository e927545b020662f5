"""Trajectories: the agent's conversation, read from and written as ATIF-v1 steps.

Agents write what they like: a plain list of chat messages, ``{"messages": [...]}``, or an
ATIF document (``{"steps": [{"source": ..., "message": ...}]}``). Graders want one shape,
chat messages, so reading normalises all three; writing always produces ATIF.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from container_runtime import paths
from container_runtime.contract import PathArg, write_json

SCHEMA_VERSION = "ATIF-v1"

_ROLE_BY_SOURCE = {"agent": "assistant", "user": "user", "system": "system"}
_SOURCE_BY_ROLE = {role: source for source, role in _ROLE_BY_SOURCE.items()}


def messages_from_trajectory(doc: Any) -> List[Dict[str, Any]]:
    """Return the chat messages held by any of the accepted trajectory shapes."""
    if isinstance(doc, list):
        return _checked_messages(doc)
    if isinstance(doc, dict) and "messages" in doc:
        return _checked_messages(doc["messages"])
    if isinstance(doc, dict) and "steps" in doc:
        return _messages_from_steps(doc["steps"])
    raise ValueError(
        "a trajectory must be a list of chat messages, {'messages': [...]}, or an ATIF "
        f"document {{'steps': [...]}}; got {type(doc).__name__}"
    )


def load_messages(path: Optional[PathArg] = None) -> List[Dict[str, Any]]:
    """Read the messages of a trajectory file; a missing file means no messages."""
    source = Path(paths.trajectory_path() if path is None else path)
    if not source.is_file():
        return []
    return messages_from_trajectory(json.loads(source.read_text(encoding="utf-8")))


def write_trajectory(messages: Sequence[Dict[str, Any]], path: Optional[PathArg] = None) -> Path:
    """Write chat messages as an ATIF-v1 document (``trajectory.json`` by default).

    Roles without an ATIF source (``tool``, ...) are refused rather than silently relabelled.
    """
    steps = []
    for index, message in enumerate(_checked_messages(messages)):
        role = message["role"]
        if role not in _SOURCE_BY_ROLE:
            raise ValueError(
                f"message {index} has role {role!r}; ATIF-v1 steps only know "
                f"{sorted(_SOURCE_BY_ROLE)}"
            )
        steps.append(
            {
                "step_id": index + 1,
                "source": _SOURCE_BY_ROLE[role],
                "message": message.get("content"),
            }
        )
    doc = {"schema_version": SCHEMA_VERSION, "steps": steps}
    return write_json(paths.trajectory_path() if path is None else path, doc)


def _checked_messages(messages: Any) -> List[Dict[str, Any]]:
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"messages must be a list, got {type(messages).__name__}")
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError(f"message {index} is not a chat message with a 'role': {message!r}")
        checked.append(dict(message))
    return checked


def _messages_from_steps(steps: Any) -> List[Dict[str, Any]]:
    if not isinstance(steps, list):
        raise ValueError(f"ATIF 'steps' must be a list, got {type(steps).__name__}")
    messages = []
    for index, step in enumerate(steps):
        if not isinstance(step, dict):
            raise ValueError(f"ATIF step {index} is not an object: {step!r}")
        if step.get("message") is None:
            continue
        source = step.get("source")
        if source not in _ROLE_BY_SOURCE:
            raise ValueError(
                f"ATIF step {index} has source {source!r}; expected one of "
                f"{sorted(_ROLE_BY_SOURCE)}"
            )
        messages.append({"role": _ROLE_BY_SOURCE[source], "content": step["message"]})
    return messages
