"""A trial's trajectory (`logs/agent/trajectory.json`, ATIF) read two ways: step by step for
people, and as chat messages with token ids and logprobs for trainers.

The gateway writes that file for any agent that used the model (`gateway/trajectory.py`), and
it is where token ids and logprobs are: each agent step's `metrics` holds the exchange's
`prompt_token_ids`, `completion_token_ids` and `logprobs`. An agent may also write one
itself (kept as `trajectory.agent.json` when the gateway wrote its own). The file came out of
the sandbox: a document that is not valid ATIF is still shown as far as it goes, with what
is wrong, and never breaks the page.

`load` reads the file, `view` gives the steps (`TrajectoryView`), `training_fields` the
messages, token ids and logprobs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from container_runtime import atif
from container_runtime.trajectory import messages_from_trajectory
from orchestrator.report.files import read_capped

TRAJECTORY = "logs/agent/trajectory.json"
AGENT_TRAJECTORY = "logs/agent/trajectory.agent.json"
# A trajectory file is read whole up to this size (it has to be parsed); beyond it the page
# says so instead of parsing a cut document.
MAX_TRAJECTORY_BYTES = 64_000_000
TEXT_CAP = 6_000
STEP_CAP = 400
_METRIC_COUNTS = ("prompt_token_ids", "completion_token_ids", "logprobs")


class ToolCallView(BaseModel):
    call_id: str
    name: str
    arguments: str = Field(description="The arguments as indented JSON, capped.")


class ObservationView(BaseModel):
    source_call_id: str | None = None
    content: str


class StepView(BaseModel):
    """One step as the page shows it: who spoke, what, which tools, what came back, cost."""

    step_id: int
    source: str
    model_name: str | None = None
    message: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCallView] = Field(default_factory=list)
    observations: list[ObservationView] = Field(default_factory=list)
    metrics: dict[str, float] = Field(
        default_factory=dict,
        description="Token counts and cost; for token ids and logprobs, how many there are.",
    )


class TrajectoryView(BaseModel):
    name: str = TRAJECTORY
    agent: str = ""
    model_name: str | None = None
    steps: list[StepView] = Field(default_factory=list)
    steps_cut: int = 0
    totals: dict[str, float] = Field(default_factory=dict)
    problem: str | None = Field(None, description="Why the document is not valid ATIF.")


class Completion(BaseModel):
    """One model answer of the trajectory with what a trainer needs of it."""

    step_id: int
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None


class TrainingFields(BaseModel):
    """What `--with-trajectories` adds to an export row."""

    messages: list[dict[str, Any]] = Field(default_factory=list)
    completions: list[Completion] = Field(default_factory=list)
    trajectory_problem: str | None = None


def load(trial_dir: Path, name: str = TRAJECTORY) -> tuple[Any, str | None]:
    """(the parsed document or None, why it could not be read); (None, None) when absent."""
    shown = read_capped(trial_dir, name, cap=MAX_TRAJECTORY_BYTES)
    if shown is None:
        return None, None
    if shown.note is not None:
        return None, f"{name}: {shown.note}"
    if shown.cut_bytes:
        return None, f"{name}: {shown.size} bytes, too large to show"
    try:
        return json.loads(shown.text), None
    except ValueError as exc:
        return None, f"{name}: not JSON ({exc})"


def view(doc: Any, name: str = TRAJECTORY) -> TrajectoryView:
    """The document step by step; tolerant of what ATIF forbids, which it names."""
    problem = None
    try:
        atif.validate_trajectory(doc)
    except ValueError as exc:
        problem = _cap(str(exc))
    if not isinstance(doc, dict):
        return TrajectoryView(name=name, problem=problem)
    agent = _dict(doc.get("agent"))
    raw_steps = _list(doc.get("steps"))
    steps = [_step(i, s) for i, s in enumerate(raw_steps[:STEP_CAP]) if isinstance(s, dict)]
    totals = _dict(doc.get("final_metrics"))
    return TrajectoryView(
        name=name,
        agent=" ".join(str(agent.get(k, "")) for k in ("name", "version")).strip(),
        model_name=_text_or_none(agent.get("model_name")),
        steps=steps,
        steps_cut=max(0, len(raw_steps) - STEP_CAP),
        totals={k: v for k, v in totals.items() if _is_number(v)},
        problem=problem,
    )


def training_fields(doc: Any) -> TrainingFields:
    """Chat messages (OpenAI shape) and, per model answer, its token ids and logprobs."""
    try:
        messages = messages_from_trajectory(doc)
    except ValueError as exc:
        return TrainingFields(trajectory_problem=str(exc))
    completions = []
    for step in doc.get("steps", []) if isinstance(doc, dict) else []:
        metrics = step.get("metrics") or {}
        if step.get("source") != "agent" or not any(metrics.get(k) for k in _METRIC_COUNTS):
            continue
        completions.append(
            Completion(
                step_id=step["step_id"],
                prompt_token_ids=metrics.get("prompt_token_ids"),
                completion_token_ids=metrics.get("completion_token_ids"),
                logprobs=metrics.get("logprobs"),
            )
        )
    return TrainingFields(messages=messages, completions=completions)


def _dict(value: object) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one: a trajectory is read as found."""
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _step(index: int, raw: dict[str, Any]) -> StepView:
    calls = _list(raw.get("tool_calls"))
    observation = _dict(raw.get("observation"))
    results = _list(observation.get("results"))
    metrics = _dict(raw.get("metrics"))
    shown: dict[str, float] = {k: v for k, v in metrics.items() if _is_number(v)}
    for key in _METRIC_COUNTS:
        if isinstance(metrics.get(key), list):
            shown[f"{key} (count)"] = len(metrics[key])
    step_id = raw.get("step_id")
    return StepView(
        step_id=step_id if isinstance(step_id, int) else index + 1,
        source=str(raw.get("source", "?")),
        model_name=_text_or_none(raw.get("model_name")),
        message=_content(raw.get("message")),
        reasoning=_text_or_none(raw.get("reasoning_content")),
        tool_calls=[
            ToolCallView(
                call_id=str(c.get("tool_call_id", "")),
                name=str(c.get("function_name", "?")),
                arguments=_cap(json.dumps(c.get("arguments"), indent=2, ensure_ascii=False)),
            )
            for c in calls
            if isinstance(c, dict)
        ],
        observations=[
            ObservationView(
                source_call_id=_text_or_none(r.get("source_call_id")),
                content=_content(r.get("content")),
            )
            for r in results
            if isinstance(r, dict)
        ],
        metrics=shown,
    )


def _content(value: Any) -> str:
    """Text, or content parts (text parts' text, an image as its path)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return _cap(value)
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict) and isinstance(part.get("source"), dict):
                parts.append(f"[image {part['source'].get('path', '')}]")
        return _cap("\n".join(parts))
    return _cap(json.dumps(value, ensure_ascii=False))


def _cap(text: str) -> str:
    if len(text) <= TEXT_CAP:
        return text
    return f"{text[:TEXT_CAP]}… ({len(text) - TEXT_CAP} more characters)"


def _text_or_none(value: Any) -> str | None:
    return _cap(value) if isinstance(value, str) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
