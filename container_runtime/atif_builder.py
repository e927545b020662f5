"""Writing chat messages as ATIF (see `atif`): `write_trajectory`, `StepBuilder`.

Messages map to steps one to one (system and developer messages to system steps, user
messages to user steps, assistant messages to agent steps with their ``tool_calls`` and
``reasoning_content``), except ``tool`` messages: they become the ``observation`` of the
agent step whose tool call they answer. What ATIF has no field for is kept in ``extra``: a
message's other fields (``name``, a content list ATIF cannot express, ...) under
``"chat_message"``, a tool call that is not a plain function call under
``"chat_tool_call"``, arguments that are not the canonical JSON text of an object under
``"raw_arguments"``. So messages → ATIF → messages (`trajectory.messages_from_trajectory`)
gives the messages back.
"""

from __future__ import annotations

import json
import mimetypes
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from container_runtime import atif, paths
from container_runtime.contract import PathArg, write_json

SCHEMA_VERSION = atif.SCHEMA_VERSION
DEFAULT_AGENT_NAME = "trialbox"

MESSAGE_EXTRA = "chat_message"
TOOL_CALL_EXTRA = "chat_tool_call"
RAW_ARGUMENTS_EXTRA = "raw_arguments"

_SOURCE_BY_ROLE = {"system": "system", "developer": "system", "user": "user", "assistant": "agent"}
_ROLE_BY_SOURCE = {"system": "system", "user": "user", "agent": "assistant"}
_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def trajectory_from_messages(
    messages: Sequence[Dict[str, Any]],
    *,
    agent_name: str = DEFAULT_AGENT_NAME,
    agent_version: Optional[str] = None,
    model_name: Optional[str] = None,
    session_id: Optional[str] = None,
) -> Dict[str, Any]:
    """Return chat messages as a validated ATIF document (a JSON-ready dict).

    ``agent_version`` defaults to this package's version and ``session_id`` to a fresh id.
    Raises ValueError for what ATIF cannot hold: no messages, a role it has no step for, or
    a tool message that answers no earlier assistant tool call.
    """
    builder = StepBuilder()
    for index, message in enumerate(_checked_messages(messages)):
        builder.add(message, label=f"message {index}")
    agent: Dict[str, Any] = {"name": agent_name, "version": agent_version or _package_version()}
    if model_name is not None:
        agent["model_name"] = model_name
    doc = {
        "schema_version": SCHEMA_VERSION,
        "session_id": session_id or uuid.uuid4().hex,
        "agent": agent,
        "steps": builder.steps,
    }
    return atif.dump_trajectory(atif.validate_trajectory(doc))


def write_trajectory(
    messages: Sequence[Dict[str, Any]],
    path: Optional[PathArg] = None,
    *,
    agent_name: str = DEFAULT_AGENT_NAME,
    agent_version: Optional[str] = None,
    model_name: Optional[str] = None,
    session_id: Optional[str] = None,
) -> Path:
    """Write chat messages as an ATIF document (``trajectory.json`` by default).

    Nothing is written when the messages cannot be expressed (see `trajectory_from_messages`).
    """
    doc = trajectory_from_messages(
        messages,
        agent_name=agent_name,
        agent_version=agent_version,
        model_name=model_name,
        session_id=session_id,
    )
    return write_json(paths.trajectory_path() if path is None else path, doc)


class StepBuilder:
    """Turns chat messages, in conversation order, into ATIF steps (plain dicts).

    ``strict`` (the default) refuses what has no faithful ATIF form: roles other than system,
    developer, user, assistant and tool, and tool messages that answer no tool call seen so
    far. Lenient builders (for conversations recorded elsewhere, which must never fail) make
    such messages user steps, or observation results without ``source_call_id``, and keep
    what they were in ``extra``.
    """

    def __init__(self, *, strict: bool = True) -> None:
        self.strict = strict
        self.steps: List[Dict[str, Any]] = []
        # tool_call_id as the messages spell it -> [(step, id in ATIF, answered)], oldest first
        self._calls: Dict[Any, List[List[Any]]] = {}

    def add(
        self,
        message: Dict[str, Any],
        *,
        label: str = "message",
        timestamp: Optional[str] = None,
        metrics: Optional[Dict[str, Any]] = None,
        model_name: Optional[str] = None,
        extra: Optional[Dict[str, Any]] = None,
    ) -> Optional[Dict[str, Any]]:
        """Add one message: return the new step, or None when a tool message became an
        observation result. ``metrics`` and ``model_name`` only apply to assistant messages."""
        role = message.get("role")
        if role == "tool":
            return self._add_tool_result(message, label, timestamp)
        source = _SOURCE_BY_ROLE.get(role) if isinstance(role, str) else None
        if source is None:
            if self.strict:
                raise ValueError(
                    f"{label} has role {role!r}; ATIF holds system, developer, user, "
                    "assistant and tool messages"
                )
            source = "user"
        step = self._new_step(source, timestamp)
        calls = message.get("tool_calls")
        has_calls = source == "agent" and isinstance(calls, list) and bool(calls)
        text, stash = _content_to_atif(message.get("content"), has_tool_calls=has_calls)
        step["message"] = text
        leftovers = {k: v for k, v in message.items() if k not in ("role", "content")}
        leftovers.update(stash)
        if role != _ROLE_BY_SOURCE[source]:
            leftovers["role"] = role
        if source == "agent":
            if isinstance(message.get("reasoning_content"), str):
                step["reasoning_content"] = leftovers.pop("reasoning_content")
            if isinstance(calls, list):
                step["tool_calls"] = self._tool_calls(step, leftovers.pop("tool_calls"))
            if model_name is not None:
                step["model_name"] = model_name
            if metrics:
                step["metrics"] = metrics
        step_extra = dict(extra or {})
        if leftovers:
            step_extra[MESSAGE_EXTRA] = leftovers
        if step_extra:
            step["extra"] = step_extra
        self.steps.append(step)
        return step

    def _new_step(self, source: str, timestamp: Optional[str]) -> Dict[str, Any]:
        step: Dict[str, Any] = {"step_id": len(self.steps) + 1}
        if timestamp is not None:
            step["timestamp"] = timestamp
        step["source"] = source
        return step

    def _tool_calls(self, step: Dict[str, Any], calls: List[Any]) -> List[Any]:
        converted = []
        used = set()
        for index, call in enumerate(calls):
            tool_call, original_id = _tool_call_to_atif(call)
            if tool_call["tool_call_id"] is None:
                tool_call["tool_call_id"] = f"call_{step['step_id']}_{index}"
            if tool_call["tool_call_id"] in used:
                # ATIF needs unique ids within a step; keep the call as it was in extra.
                tool_call["tool_call_id"] = f"{tool_call['tool_call_id']}#{index}"
                tool_call["extra"] = {TOOL_CALL_EXTRA: call}
            used.add(tool_call["tool_call_id"])
            converted.append(tool_call)
            if original_id is not None:
                self._calls.setdefault(original_id, []).append(
                    [step, tool_call["tool_call_id"], False]
                )
        return converted

    def _add_tool_result(
        self, message: Dict[str, Any], label: str, timestamp: Optional[str]
    ) -> Optional[Dict[str, Any]]:
        call_id = message.get("tool_call_id")
        target = self._answered_call(call_id)
        content, stash = _content_to_atif(message.get("content"), observation=True)
        leftovers = {k: v for k, v in message.items() if k not in ("role", "content")}
        leftovers.update(stash)
        result: Dict[str, Any] = {}
        if target is not None:
            step, atif_id = target[0], target[1]
            target[2] = True
            result["source_call_id"] = atif_id
            if atif_id == call_id:
                leftovers.pop("tool_call_id")
        else:
            if self.strict:
                raise ValueError(
                    f"{label} is a tool message answering tool call {call_id!r}, which no "
                    "earlier assistant message made"
                )
            step = next((s for s in reversed(self.steps) if s["source"] == "agent"), None)
            if step is None:
                # Nothing to attach it to: a user step that remembers it was a tool message.
                user_step = self.add({**message, "role": "user"}, label=label, timestamp=timestamp)
                assert user_step is not None
                user_step.setdefault("extra", {}).setdefault(MESSAGE_EXTRA, {})["role"] = "tool"
                return user_step
            leftovers["role"] = "tool"
        if content is not None:
            result["content"] = content
        if leftovers:
            result["extra"] = {MESSAGE_EXTRA: leftovers}
        step.setdefault("observation", {"results": []})["results"].append(result)
        return None

    def _answered_call(self, call_id: Any) -> Optional[List[Any]]:
        """The call a tool message answers: the first unanswered call with its id in the
        latest step that made one, else the latest call with that id."""
        entries = self._calls.get(call_id) if isinstance(call_id, str) else None
        if not entries:
            return None
        latest = entries[-1][0]
        for entry in entries:
            if entry[0] is latest and not entry[2]:
                return entry
        return entries[-1]


def _checked_messages(messages: Any) -> List[Dict[str, Any]]:
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"messages must be a list, got {type(messages).__name__}")
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ValueError(f"message {index} is not a chat message with a 'role': {message!r}")
        checked.append(dict(message))
    return checked


def _content_to_atif(
    content: Any, *, has_tool_calls: bool = False, observation: bool = False
) -> Tuple[Any, Dict[str, Any]]:
    """ATIF's form of a chat message's content, and what to keep in extra to restore it."""
    if isinstance(content, str):
        if content == "" and has_tool_calls:
            return "", {"content": ""}  # reading maps "" + tool calls to null
        return content, {}
    if content is None:
        if observation:
            return None, {}
        return "", ({} if has_tool_calls else {"content": None})
    if isinstance(content, list):
        parts = [_part_to_atif(part) for part in content]
        if all(part is not None for part in parts):
            return parts, {}
        text = "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
        return text, {"content": content}
    return json.dumps(content, ensure_ascii=False), {"content": content}


def _part_to_atif(part: Any) -> Optional[Dict[str, Any]]:
    """A chat content part as an ATIF content part, or None if that would lose something."""
    if not isinstance(part, dict):
        return None
    if set(part) == {"type", "text"} and part["type"] == "text" and isinstance(part["text"], str):
        return {"type": "text", "text": part["text"]}
    image = part.get("image_url")
    if set(part) == {"type", "image_url"} and part["type"] == "image_url":
        if isinstance(image, dict) and set(image) == {"url"} and isinstance(image["url"], str):
            media_type = _media_type(image["url"])
            if media_type is not None:
                return {"type": "image", "source": {"media_type": media_type, "path": image["url"]}}
    return None


def _media_type(url: str) -> Optional[str]:
    if url.startswith("data:"):
        media_type = url[5:].split(";", 1)[0].split(",", 1)[0]
    else:
        media_type = mimetypes.guess_type(url.split("?", 1)[0])[0] or ""
    return media_type if media_type in _IMAGE_TYPES else None


def _tool_call_to_atif(call: Any) -> Tuple[Dict[str, Any], Optional[str]]:
    """An OpenAI tool call as an ATIF one (its id None if it had none), and its own id."""
    function = call.get("function") if isinstance(call, dict) else None
    call_id = call.get("id") if isinstance(call, dict) else None
    call_id = call_id if isinstance(call_id, str) else None
    name = function.get("name") if isinstance(function, dict) else None
    raw = function.get("arguments") if isinstance(function, dict) else None
    arguments: Any = raw
    if isinstance(raw, str):
        try:
            arguments = json.loads(raw)
        except ValueError:
            arguments = None
    tool_call: Dict[str, Any] = {
        "tool_call_id": call_id,
        "function_name": name if isinstance(name, str) else "",
        "arguments": arguments if isinstance(arguments, dict) else {},
    }
    standard = (
        isinstance(call, dict)
        and set(call) == {"id", "type", "function"}
        and call["type"] == "function"
        and call_id is not None
        and isinstance(function, dict)
        and set(function) == {"name", "arguments"}
        and isinstance(name, str)
        and isinstance(raw, str)
    )
    if not standard:
        tool_call["extra"] = {TOOL_CALL_EXTRA: call}
    elif not isinstance(arguments, dict) or _arguments_json(arguments) != raw:
        # Not a JSON object, or not spelled the way reading would spell it: keep the text.
        tool_call["extra"] = {RAW_ARGUMENTS_EXTRA: raw}
    return tool_call, call_id


def _arguments_json(arguments: Dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)


def _package_version() -> str:
    from container_runtime import __version__  # the package imports this module first

    return __version__
