"""Trajectories: the agent's conversation, read back as chat messages.

Agents write what they like: a plain list of chat messages, ``{"messages": [...]}``, or an
ATIF document (``{"schema_version": ..., "agent": ..., "steps": [...]}``). Graders want one
shape, OpenAI chat messages, so reading normalises all three. Writing, which always produces
valid ATIF, lives in `atif_builder` (whose docstring gives the mapping) and is re-exported
here.

Reading undoes that mapping, and also maps an agent step's empty message back to
``content: null`` when the step has tool calls, and observation results without a
``source_call_id`` (actions that were not tool calls) to user messages.

`messages_from_trajectory` is the reader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from pydantic import BaseModel, ValidationError

from container_runtime import atif, paths
from container_runtime.atif_builder import (
    _ROLE_BY_SOURCE,
    DEFAULT_AGENT_NAME,
    MESSAGE_EXTRA,
    RAW_ARGUMENTS_EXTRA,
    SCHEMA_VERSION,
    TOOL_CALL_EXTRA,
    StepBuilder,
    _arguments_json,
    _checked_messages,
    trajectory_from_messages,
    write_trajectory,
)
from container_runtime.contract import PathArg

__all__ = [
    "DEFAULT_AGENT_NAME",
    "MESSAGE_EXTRA",
    "RAW_ARGUMENTS_EXTRA",
    "SCHEMA_VERSION",
    "TOOL_CALL_EXTRA",
    "StepBuilder",
    "load_messages",
    "messages_from_trajectory",
    "trajectory_from_messages",
    "write_trajectory",
]


def messages_from_trajectory(doc: Any) -> List[Dict[str, Any]]:
    """Return the chat messages held by any of the accepted trajectory shapes.

    An ATIF document's steps must be valid ATIF steps; its root metadata (``agent``,
    ``session_id``, ...) is not checked, since messages do not carry it.
    """
    if isinstance(doc, list):
        return _checked_messages(doc)
    if isinstance(doc, dict) and "messages" in doc:
        return _checked_messages(doc["messages"])
    if isinstance(doc, dict) and "steps" in doc:
        try:
            steps = _Steps.model_validate({"steps": doc["steps"]}).steps
        except ValidationError as exc:
            raise ValueError(f"invalid ATIF steps: {atif.describe_errors(exc)}") from None
        return _messages_from_steps(steps)
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


class _Steps(BaseModel):
    steps: List[atif.Step]


def _messages_from_steps(steps: List[atif.Step]) -> List[Dict[str, Any]]:
    messages: List[Dict[str, Any]] = []
    for step in steps:
        message: Dict[str, Any] = {
            "role": _ROLE_BY_SOURCE[step.source],
            "content": _content_from_atif(step.message),
        }
        if step.reasoning_content is not None:
            message["reasoning_content"] = step.reasoning_content
        if step.tool_calls is not None:
            message["tool_calls"] = [_tool_call_from_atif(call) for call in step.tool_calls]
            if step.tool_calls and step.message == "":
                message["content"] = None
        message.update((step.extra or {}).get(MESSAGE_EXTRA) or {})
        messages.append(message)
        for result in step.observation.results if step.observation else []:
            leftovers = (result.extra or {}).get(MESSAGE_EXTRA) or {}
            if result.source_call_id is None and result.content is None and not leftovers:
                continue  # e.g. only a subagent reference: nothing a chat message could say
            reply: Dict[str, Any] = {"role": "user"}
            if result.source_call_id is not None:
                reply = {"role": "tool", "tool_call_id": result.source_call_id}
            reply["content"] = _content_from_atif(result.content)
            reply.update(leftovers)
            messages.append(reply)
    return messages


def _content_from_atif(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    parts = []
    for part in content:
        if part.type == "text":
            parts.append({"type": "text", "text": part.text})
        else:
            parts.append({"type": "image_url", "image_url": {"url": part.source.path}})
    return parts


def _tool_call_from_atif(call: atif.ToolCall) -> Dict[str, Any]:
    extra = call.extra or {}
    if TOOL_CALL_EXTRA in extra:
        return extra[TOOL_CALL_EXTRA]
    arguments = extra.get(RAW_ARGUMENTS_EXTRA)
    if not isinstance(arguments, str):
        arguments = _arguments_json(call.arguments)
    return {
        "id": call.tool_call_id,
        "type": "function",
        "function": {"name": call.function_name, "arguments": arguments},
    }
