"""ATIF, the Agent Trajectory Interchange Format of the Harbor project, as pydantic models.

Written from the specification (Harbor's RFC 0001, "trajectory format"), version ATIF-v1.7,
the newest it defines. A trajectory is a root object (``schema_version``, ``session_id``,
``agent``, ``steps``, ...) whose ``steps`` are numbered from 1 and come from a ``system``, a
``user`` or an ``agent``. Only agent steps may carry ``model_name``, ``reasoning_effort``,
``reasoning_content``, ``tool_calls`` and ``metrics``; an observation's ``source_call_id``
must name a tool call of its own step. Unknown fields are refused at every level: custom
data belongs in the ``extra`` objects the format provides.

Documents of the earlier 1.x versions validate too (the format only ever added optional
fields), with the rules of their version where they differ: before 1.7 ``session_id`` was
required and a subagent reference was resolved by its ``session_id``.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Dict, List, Literal, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    model_validator,
)

SCHEMA_VERSION = "ATIF-v1.7"
SchemaVersion = Literal[
    "ATIF-v1.0",
    "ATIF-v1.1",
    "ATIF-v1.2",
    "ATIF-v1.3",
    "ATIF-v1.4",
    "ATIF-v1.5",
    "ATIF-v1.6",
    "ATIF-v1.7",
]

# Fields the specification allows on agent steps only.
AGENT_ONLY_FIELDS = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")
# Fields that describe an LLM inference: absent on agent steps with llm_call_count == 0.
LLM_ONLY_FIELDS = ("metrics", "reasoning_content")

# ISO 8601 date, optionally with a time and a UTC offset. Checked by hand rather than with
# datetime.fromisoformat, which accepts different strings on Python 3.9 and 3.11.
_ISO_8601 = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})"
    r"(?:[T ](?P<time>\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)"
    r"(?P<offset>Z|[+-]\d{2}(?::?\d{2})?)?)?"
)


def _minor(version: str) -> int:
    return int(version.rsplit(".", 1)[1])


class _Model(BaseModel):
    # strict: a step_id of "1" or a token count of true is an error, not something to coerce.
    # No protected namespaces: ATIF's "model_name" would make older pydantic versions warn.
    model_config = ConfigDict(extra="forbid", strict=True, protected_namespaces=())


class ImageSource(_Model):
    """Where an image of a multimodal message lives (a path next to the trajectory, or a URL)."""

    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    path: str


class ContentPart(_Model):
    """One part of a multimodal message or observation (v1.6+): text, or an image."""

    type: Literal["text", "image"]
    text: Optional[str] = None
    source: Optional[ImageSource] = None

    @model_validator(mode="after")
    def _matches_type(self) -> ContentPart:
        if self.type == "text" and (self.text is None or self.source is not None):
            raise ValueError("a 'text' content part needs 'text' and no 'source'")
        if self.type == "image" and (self.source is None or self.text is not None):
            raise ValueError("an 'image' content part needs 'source' and no 'text'")
        return self


def _content_kind(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return "str"
    return "list" if isinstance(value, (list, tuple)) else None


# Text, or content parts (v1.6+). Discriminated by hand so that errors point into the parts
# instead of also reporting that a list is not a string.
Content = Annotated[
    Union[Annotated[str, Tag("str")], Annotated[List[ContentPart], Tag("list")]],
    Discriminator(
        _content_kind,
        custom_error_type="content_type",
        custom_error_message="Input should be a string or a list of content parts",
    ),
]
# The names pydantic puts into an error's location for union members; not field names.
_UNION_TAGS = {"str", "list", "float", "int"}


class ToolCall(_Model):
    """One function the agent asked to run, in one step."""

    tool_call_id: str
    function_name: str
    arguments: Dict[str, Any] = Field(description="A JSON object; {} when there are none.")
    extra: Optional[Dict[str, Any]] = None


class SubagentTrajectoryRef(_Model):
    """A delegated subagent's trajectory: embedded (``trajectory_id``) or in a file."""

    trajectory_id: Optional[str] = None
    trajectory_path: Optional[str] = None
    session_id: Optional[str] = None
    extra: Optional[Dict[str, Any]] = None


class ObservationResult(_Model):
    """What one tool call (or an action without one, when ``source_call_id`` is unset) gave."""

    source_call_id: Optional[str] = None
    content: Optional[Content] = None
    subagent_trajectory_ref: Optional[List[SubagentTrajectoryRef]] = None
    extra: Optional[Dict[str, Any]] = None


class Observation(_Model):
    """The environment's feedback to a step."""

    results: List[ObservationResult]


class Metrics(_Model):
    """What one step's inference cost and produced; every field optional.

    ``prompt_tokens`` counts all input tokens, cached ones included (``cached_tokens`` is the
    cached subset). Token ids and ``logprobs`` are as the inference server returned them.
    """

    prompt_tokens: Optional[int] = Field(None, ge=0)
    completion_tokens: Optional[int] = Field(None, ge=0)
    cached_tokens: Optional[int] = Field(None, ge=0)
    cost_usd: Optional[float] = Field(None, ge=0)
    prompt_token_ids: Optional[List[int]] = None
    completion_token_ids: Optional[List[int]] = None
    logprobs: Optional[List[float]] = None
    extra: Optional[Dict[str, Any]] = None


class Step(_Model):
    """One system prompt, one user message, or one agent turn (inference, actions, results)."""

    step_id: int = Field(ge=1, description="Ordinal of the step, from 1.")
    timestamp: Optional[str] = Field(None, description="ISO 8601, e.g. 2025-10-16T14:30:00Z.")
    source: Literal["system", "user", "agent"]
    model_name: Optional[str] = None
    reasoning_effort: Optional[Union[str, float]] = None
    message: Content = Field(description="Required; may be the empty string.")
    reasoning_content: Optional[str] = None
    tool_calls: Optional[List[ToolCall]] = None
    observation: Optional[Observation] = None
    metrics: Optional[Metrics] = None
    is_copied_context: Optional[bool] = None
    llm_call_count: Optional[int] = Field(None, ge=0)
    extra: Optional[Dict[str, Any]] = None

    @model_validator(mode="after")
    def _step_rules(self) -> Step:
        if self.timestamp is not None:
            _check_timestamp(self.timestamp)
        if self.source != "agent":
            for name in AGENT_ONLY_FIELDS:
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"field '{name}' is only allowed on agent steps, not on a "
                        f"{self.source} step"
                    )
        elif self.llm_call_count == 0:
            for name in LLM_ONLY_FIELDS:
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"field '{name}' must be absent when llm_call_count is 0 (a step "
                        "without an LLM inference)"
                    )
        call_ids = set()
        for call in self.tool_calls or []:
            if call.tool_call_id in call_ids:
                raise ValueError(f"tool_call_id '{call.tool_call_id}' is used twice")
            call_ids.add(call.tool_call_id)
        for result in self.observation.results if self.observation else []:
            if result.source_call_id is not None and result.source_call_id not in call_ids:
                raise ValueError(
                    f"observation source_call_id '{result.source_call_id}' is not the "
                    "tool_call_id of one of this step's tool_calls"
                )
        return self


class Agent(_Model):
    """The agent system that produced the trajectory."""

    name: str
    version: str
    model_name: Optional[str] = Field(None, description="Default model; steps may override.")
    tool_definitions: Optional[List[Dict[str, Any]]] = Field(
        None, description="OpenAI function-calling definitions ({type, function}) (v1.5+)."
    )
    extra: Optional[Dict[str, Any]] = None


class FinalMetrics(_Model):
    """Totals over the whole trajectory; every field optional."""

    total_prompt_tokens: Optional[int] = Field(None, ge=0)
    total_completion_tokens: Optional[int] = Field(None, ge=0)
    total_cached_tokens: Optional[int] = Field(None, ge=0)
    total_cost_usd: Optional[float] = Field(None, ge=0)
    total_steps: Optional[int] = Field(None, ge=0)
    extra: Optional[Dict[str, Any]] = None


class Trajectory(_Model):
    """The root object of an ATIF document."""

    schema_version: SchemaVersion = Field(description=f"e.g. {SCHEMA_VERSION!r}")
    session_id: Optional[str] = Field(
        None, description="The run this trajectory belongs to (required before v1.7)."
    )
    trajectory_id: Optional[str] = Field(
        None, description="This document's own id; required on embedded subagents (v1.7)."
    )
    agent: Agent
    steps: List[Step] = Field(min_length=1)
    notes: Optional[str] = None
    final_metrics: Optional[FinalMetrics] = None
    continued_trajectory_ref: Optional[str] = None
    extra: Optional[Dict[str, Any]] = None
    subagent_trajectories: Optional[List[Trajectory]] = None

    @model_validator(mode="after")
    def _document_rules(self) -> Trajectory:
        for index, step in enumerate(self.steps):
            if step.step_id != index + 1:
                raise ValueError(
                    f"steps[{index}].step_id is {step.step_id}; step ids run 1, 2, 3, ... "
                    f"so it must be {index + 1}"
                )
        if _minor(self.schema_version) < 7 and self.session_id is None:
            raise ValueError(f"session_id is required in {self.schema_version} documents")
        embedded = set()
        for index, sub in enumerate(self.subagent_trajectories or []):
            if sub.trajectory_id is None:
                raise ValueError(f"subagent_trajectories[{index}] needs a trajectory_id")
            if sub.trajectory_id in embedded:
                raise ValueError(
                    f"subagent_trajectories[{index}].trajectory_id '{sub.trajectory_id}' "
                    "is not unique"
                )
            embedded.add(sub.trajectory_id)
        for step in self.steps:
            for result in step.observation.results if step.observation else []:
                for ref in result.subagent_trajectory_ref or []:
                    self._check_ref(step.step_id, ref, embedded)
        return self

    def _check_ref(self, step_id: int, ref: SubagentTrajectoryRef, embedded: set) -> None:
        where = f"step {step_id}: a subagent_trajectory_ref"
        if _minor(self.schema_version) < 7:
            if ref.session_id is None:
                raise ValueError(f"{where} needs a session_id in {self.schema_version}")
            return
        if ref.trajectory_id is None and ref.trajectory_path is None:
            raise ValueError(f"{where} needs a trajectory_id or a trajectory_path")
        if ref.trajectory_path is None and ref.trajectory_id not in embedded:
            raise ValueError(
                f"{where} names trajectory_id '{ref.trajectory_id}', which is not in "
                "subagent_trajectories"
            )


def validate_trajectory(doc: Any) -> Trajectory:
    """Return ``doc`` (a parsed JSON object) as a `Trajectory`, or raise ValueError naming
    every problem with its place, e.g. ``steps[2].tool_calls[0].arguments: ...``."""
    if isinstance(doc, Trajectory):
        doc = doc.model_dump(mode="json", exclude_none=True)
    if not isinstance(doc, dict):
        raise ValueError(f"an ATIF trajectory is a JSON object, got {type(doc).__name__}")
    try:
        return Trajectory.model_validate(doc)
    except ValidationError as exc:
        raise ValueError(f"invalid ATIF trajectory: {describe_errors(exc)}") from None


def dump_trajectory(trajectory: Trajectory) -> Dict[str, Any]:
    """The trajectory as a JSON-ready dict; unset optional fields are left out."""
    return trajectory.model_dump(mode="json", exclude_none=True)


def describe_errors(exc: ValidationError) -> str:
    """One line per pydantic error: where it is (``steps[1].message``) and what is wrong."""
    lines = []
    for error in exc.errors(include_url=False):
        message = str(error["msg"])
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        where = _location(error["loc"])
        lines.append(f"{where}: {message}" if where else message)
    return "; ".join(lines)


def _location(loc: Any) -> str:
    text = ""
    for part in loc:
        if part in _UNION_TAGS:
            continue
        if isinstance(part, int):
            text += f"[{part}]"
        elif text:
            text += f".{part}"
        else:
            text = str(part)
    return text


def _check_timestamp(value: str) -> None:
    match = _ISO_8601.fullmatch(value)
    try:
        if match is None:
            raise ValueError
        dt.date.fromisoformat(match["date"])
        if match["time"]:
            hour, minute, *rest = match["time"].split(":")
            second = int(float(rest[0].replace(",", "."))) if rest else 0
            dt.time(int(hour), int(minute), min(second, 59))
        if match["offset"] and match["offset"] != "Z":
            digits = match["offset"][1:].replace(":", "")
            if int(digits[:2]) > 23 or int(digits[2:] or 0) > 59:
                raise ValueError
    except ValueError:
        raise ValueError(f"timestamp {value!r} is not an ISO 8601 date and time") from None
