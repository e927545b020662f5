"""The ATIF models: what validates, what is refused (naming the field), and chat messages
through ATIF and back."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from container_runtime.atif import SCHEMA_VERSION, dump_trajectory, validate_trajectory
from container_runtime.trajectory import (
    StepBuilder,
    messages_from_trajectory,
    trajectory_from_messages,
)

# A document using every part of the format (our own example, not the RFC's).
FULL: dict[str, Any] = {
    "schema_version": "ATIF-v1.7",
    "session_id": "run-1",
    "trajectory_id": "main",
    "agent": {
        "name": "demo-agent",
        "version": "0.3.0",
        "model_name": "small-model",
        "tool_definitions": [{"type": "function", "function": {"name": "read_file"}}],
        "extra": {"prompting": "react"},
    },
    "notes": "hand-written test document",
    "steps": [
        {
            "step_id": 1,
            "timestamp": "2026-01-05T09:00:00Z",
            "source": "system",
            "message": "Be brief.",
        },
        {
            "step_id": 2,
            "source": "user",
            "message": [
                {"type": "text", "text": "What does this show?"},
                {"type": "image", "source": {"media_type": "image/png", "path": "images/a.png"}},
            ],
        },
        {
            "step_id": 3,
            "timestamp": "2026-01-05T09:00:02.5+01:00",
            "source": "agent",
            "model_name": "small-model-v2",
            "reasoning_effort": "low",
            "message": "Reading the notes first.",
            "reasoning_content": "The image is a chart; the notes explain it.",
            "tool_calls": [
                {
                    "tool_call_id": "call-1",
                    "function_name": "read_file",
                    "arguments": {"path": "notes.txt"},
                    "extra": {"timeout_sec": 5},
                },
                {"tool_call_id": "call-2", "function_name": "delegate", "arguments": {}},
            ],
            "observation": {
                "results": [
                    {"source_call_id": "call-1", "content": "sales by month", "extra": {"n": 1}},
                    {
                        "source_call_id": "call-2",
                        "subagent_trajectory_ref": [{"trajectory_id": "helper"}],
                    },
                    {"content": "an action that was not a tool call"},
                ]
            },
            "metrics": {
                "prompt_tokens": 120,
                "completion_tokens": 3,
                "cached_tokens": 100,
                "cost_usd": 0.001,
                "prompt_token_ids": [1, 2, 3],
                "completion_token_ids": [7, 8, 9],
                "logprobs": [-0.5, -0.25, 0.0],
                "extra": {"reasoning_tokens": 1},
            },
            "llm_call_count": 1,
            "extra": {"phase": "explore"},
        },
        {"step_id": 4, "source": "agent", "message": "dispatched", "llm_call_count": 0},
        {
            "step_id": 5,
            "source": "system",
            "message": "Context compacted",
            "observation": {"results": [{"content": "summary so far"}]},
            "is_copied_context": False,
            "extra": {"context_management": {"type": "compaction", "boundary": "replace"}},
        },
    ],
    "final_metrics": {
        "total_prompt_tokens": 120,
        "total_completion_tokens": 3,
        "total_cached_tokens": 100,
        "total_cost_usd": 0.001,
        "total_steps": 5,
        "extra": {},
    },
    "continued_trajectory_ref": "part-2.json",
    "extra": {"trial": "t-1"},
    "subagent_trajectories": [
        {
            "schema_version": "ATIF-v1.7",
            "trajectory_id": "helper",
            "agent": {"name": "helper", "version": "1"},
            "steps": [{"step_id": 1, "source": "agent", "message": "done"}],
        }
    ],
}


def changed(path: str, value: Any) -> dict[str, Any]:
    """FULL with one value replaced (``value`` DELETE removes it); path like steps.2.message."""
    doc = copy.deepcopy(FULL)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    target: Any = doc
    for part in parents:
        target = target[part]
    if value is DELETE:
        del target[last]
    else:
        target[last] = value
    return doc


DELETE = object()


def test_a_document_using_every_field_validates_and_dumps_unchanged() -> None:
    trajectory = validate_trajectory(FULL)
    assert trajectory.schema_version == SCHEMA_VERSION == "ATIF-v1.7"
    assert dump_trajectory(trajectory) == FULL


def test_metrics_keep_token_ids_and_logprobs() -> None:
    metrics = validate_trajectory(FULL).steps[2].metrics
    assert metrics is not None
    assert metrics.prompt_token_ids == [1, 2, 3]
    assert metrics.completion_token_ids == [7, 8, 9]
    assert metrics.logprobs == [-0.5, -0.25, 0.0]


@pytest.mark.parametrize("version", [f"ATIF-v1.{minor}" for minor in range(8)])
def test_every_1x_version_is_accepted(version: str) -> None:
    doc = {
        "schema_version": version,
        "session_id": "s",
        "agent": {"name": "a", "version": "1"},
        "steps": [{"step_id": 1, "source": "user", "message": ""}],
    }
    assert validate_trajectory(doc).schema_version == version


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        ("schema_version", "ATIF-v1", "schema_version: Input should be 'ATIF-v1.0'"),
        ("schema_version", DELETE, "schema_version: Field required"),
        ("agent.version", DELETE, "agent.version: Field required"),
        ("agent.name", 3, "agent.name: Input should be a valid string"),
        ("agent.tools", [], "agent.tools: Extra inputs are not permitted"),
        ("steps", [], "steps: List should have at least 1 item"),
        ("steps.1.step_id", 3, "steps[1].step_id is 3; step ids run 1, 2, 3, ... so it must be 2"),
        ("steps.0.step_id", "1", "steps[0].step_id: Input should be a valid integer"),
        ("steps.0.step_id", 0, "steps[0].step_id: Input should be greater than or equal to 1"),
        ("steps.0.source", "tool", "steps[0].source: Input should be 'system', 'user' or 'agent'"),
        ("steps.0.message", DELETE, "steps[0].message: Field required"),
        ("steps.0.message", 3, "steps[0].message: Input should be a string or a list of content"),
        ("steps.0.timestamp", "yesterday", "steps[0]: timestamp 'yesterday' is not an ISO 8601"),
        ("steps.0.timestamp", "2026-02-30T10:00:00Z", "not an ISO 8601 date and time"),
        (
            "steps.0.reasoning_content",
            "hm",
            "steps[0]: field 'reasoning_content' is only allowed on agent steps",
        ),
        ("steps.1.model_name", "m", "steps[1]: field 'model_name' is only allowed on agent steps"),
        ("steps.1.metrics", {}, "steps[1]: field 'metrics' is only allowed on agent steps"),
        ("steps.4.tool_calls", [], "steps[4]: field 'tool_calls' is only allowed on agent steps"),
        (
            "steps.4.reasoning_effort",
            0.5,
            "field 'reasoning_effort' is only allowed on agent steps",
        ),
        (
            "steps.3.metrics",
            {"prompt_tokens": 1},
            "steps[3]: field 'metrics' must be absent when llm_call_count is 0",
        ),
        (
            "steps.1.message.1.text",
            "x",
            "steps[1].message[1]: an 'image' content part needs 'source' and no 'text'",
        ),
        ("steps.1.message.0", {"type": "text"}, "a 'text' content part needs 'text'"),
        (
            "steps.1.message.1.source.media_type",
            "image/bmp",
            "steps[1].message[1].source.media_type: Input should be",
        ),
        (
            "steps.2.tool_calls.0.arguments",
            "{}",
            "steps[2].tool_calls[0].arguments: Input should be a valid dictionary",
        ),
        (
            "steps.2.tool_calls.0.name",
            "x",
            "steps[2].tool_calls[0].name: Extra inputs are not permitted",
        ),
        (
            "steps.2.tool_calls.1.tool_call_id",
            "call-1",
            "steps[2]: tool_call_id 'call-1' is used twice",
        ),
        (
            "steps.2.observation.results.0.source_call_id",
            "call-9",
            "steps[2]: observation source_call_id 'call-9' is not the tool_call_id of one",
        ),
        ("steps.2.observation", {}, "steps[2].observation.results: Field required"),
        (
            "steps.2.metrics.prompt_tokens",
            True,
            "steps[2].metrics.prompt_tokens: Input should be a valid integer",
        ),
        (
            "steps.2.metrics.completion_tokens",
            -1,
            "steps[2].metrics.completion_tokens: Input should be greater than or equal to 0",
        ),
        (
            "steps.2.metrics.logprobs",
            ["-0.5"],
            "steps[2].metrics.logprobs[0]: Input should be a valid number",
        ),
        (
            "steps.2.metrics.completion_token_ids",
            [1.5],
            "steps[2].metrics.completion_token_ids[0]: Input should be a valid integer",
        ),
        (
            "steps.2.observation.results.1.subagent_trajectory_ref.0",
            {"session_id": "x"},
            "step 3: a subagent_trajectory_ref needs a trajectory_id or a trajectory_path",
        ),
        (
            "steps.2.observation.results.1.subagent_trajectory_ref.0",
            {"trajectory_id": "gone"},
            "names trajectory_id 'gone', which is not in subagent_trajectories",
        ),
        (
            "steps.2.observation.results.1.subagent_trajectory_ref.0",
            {"trajectory_path": "sub.json"},
            None,
        ),
        (
            "subagent_trajectories.0.trajectory_id",
            DELETE,
            "subagent_trajectories[0] needs a trajectory_id",
        ),
        (
            "subagent_trajectories.0.steps.0.source",
            "robot",
            "subagent_trajectories[0].steps[0].source",
        ),
        (
            "final_metrics.total_steps",
            "5",
            "final_metrics.total_steps: Input should be a valid integer",
        ),
        ("session_id", DELETE, None),  # optional since v1.7
    ],
)
def test_validation_names_the_field(path: str, value: Any, problem: str | None) -> None:
    doc = changed(path, value)
    if problem is None:
        validate_trajectory(doc)
        return
    with pytest.raises(ValueError, match=re.escape(problem)):
        validate_trajectory(doc)


def test_before_v17_session_id_is_required_and_refs_resolve_by_session() -> None:
    doc: dict[str, Any] = {
        "schema_version": "ATIF-v1.6",
        "agent": {"name": "a", "version": "1"},
        "steps": [{"step_id": 1, "source": "user", "message": "hi"}],
    }
    with pytest.raises(
        ValueError, match=re.escape("session_id is required in ATIF-v1.6 documents")
    ):
        validate_trajectory(doc)
    doc["session_id"] = "s"
    doc["steps"].append(
        {
            "step_id": 2,
            "source": "agent",
            "message": "",
            "observation": {"results": [{"subagent_trajectory_ref": [{"trajectory_path": "x"}]}]},
        }
    )
    with pytest.raises(ValueError, match="step 2: a subagent_trajectory_ref needs a session_id"):
        validate_trajectory(doc)
    doc["steps"][1]["observation"]["results"][0]["subagent_trajectory_ref"][0]["session_id"] = "s2"
    validate_trajectory(doc)


@pytest.mark.parametrize(
    "timestamp",
    ["2026-01-05", "2026-01-05T09:00Z", "2026-01-05T09:00:00", "2026-01-05 09:00:00.123456+00:00"],
)
def test_iso_8601_timestamps(timestamp: str) -> None:
    validate_trajectory(changed("steps.0.timestamp", timestamp))


@pytest.mark.parametrize("doc", [None, [], "{}", 3])
def test_only_json_objects_are_trajectories(doc: Any) -> None:
    with pytest.raises(ValueError, match="an ATIF trajectory is a JSON object"):
        validate_trajectory(doc)


def test_every_problem_is_reported_at_once() -> None:
    doc = changed("agent.version", DELETE)
    doc["steps"][0]["step_id"] = "x"
    with pytest.raises(ValueError) as caught:
        validate_trajectory(doc)
    assert "agent.version" in str(caught.value) and "steps[0].step_id" in str(caught.value)


# --- chat messages through ATIF and back -------------------------------------------------


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


ROUND_TRIPS: dict[str, list[dict[str, Any]]] = {
    "plain": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ],
    "tools": [
        {"role": "user", "content": "look around"},
        {
            "role": "assistant",
            "content": "Listing and reading.",
            "reasoning_content": "two calls at once",
            "tool_calls": [call("c1", "ls", '{"path": "."}'), call("c2", "cat", '{"file": "a"}')],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
        {"role": "tool", "tool_call_id": "c2", "content": "text of a"},
        {"role": "assistant", "content": None, "tool_calls": [call("c3", "rm", "{}")]},
        {"role": "tool", "tool_call_id": "c3", "content": None},
        {"role": "assistant", "content": "done"},
    ],
    "ids reused across turns": [
        {"role": "assistant", "content": None, "tool_calls": [call("call_0", "ls", "{}")]},
        {"role": "tool", "tool_call_id": "call_0", "content": "1"},
        {"role": "assistant", "content": None, "tool_calls": [call("call_0", "ls", "{}")]},
        {"role": "tool", "tool_call_id": "call_0", "content": "2"},
    ],
    "ids repeated within a message": [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("same", "a", "{}"), call("same", "b", "{}")],
        },
        {"role": "tool", "tool_call_id": "same", "content": "for a"},
        {"role": "tool", "tool_call_id": "same", "content": "for b"},
    ],
    "arguments ATIF cannot hold as they are": [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call("c1", "f", '{"a":1}'),  # compact spelling
                call("c2", "f", '{"a": '),  # not JSON (models do this)
                call("c3", "f", "[1, 2]"),  # JSON, not an object
                {"id": "c4", "function": {"name": "f", "arguments": {"a": 1}}},  # no type, dict
                {"type": "custom", "custom": {"name": "g", "input": "x"}},  # no id at all
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "bad arguments"},
    ],
    "fields ATIF has no place for": [
        {"role": "developer", "content": "dev rules"},
        {"role": "user", "content": "hi", "name": "ann"},
        {"role": "user", "content": None},
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "assistant", "content": "x", "refusal": None, "tool_calls": None},
        {"role": "assistant", "content": "", "tool_calls": [call("c1", "f", "{}")]},
        {"role": "tool", "tool_call_id": "c1", "content": "r", "name": "f"},
    ],
    "multimodal": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                {"type": "image_url", "image_url": {"url": "data:image/webp;base64,AAAA"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                {"type": "input_audio", "input_audio": {"data": "..", "format": "wav"}},
                {"type": "text", "text": "and these?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "a cat"}]},
    ],
}


@pytest.mark.parametrize("name", ROUND_TRIPS)
def test_messages_round_trip_through_valid_atif(name: str) -> None:
    messages = ROUND_TRIPS[name]
    doc = json.loads(json.dumps(trajectory_from_messages(messages)))
    validate_trajectory(doc)
    assert messages_from_trajectory(doc) == messages


def test_tool_calls_and_observations_use_atif_fields() -> None:
    doc = trajectory_from_messages(ROUND_TRIPS["tools"])
    agent = doc["steps"][1]
    assert agent["source"] == "agent"
    assert agent["reasoning_content"] == "two calls at once"
    assert agent["tool_calls"] == [
        {"tool_call_id": "c1", "function_name": "ls", "arguments": {"path": "."}},
        {"tool_call_id": "c2", "function_name": "cat", "arguments": {"file": "a"}},
    ]
    assert agent["observation"] == {
        "results": [
            {"source_call_id": "c1", "content": "a"},
            {"source_call_id": "c2", "content": "text of a"},
        ]
    }
    assert "extra" not in agent
    assert [s["source"] for s in doc["steps"]] == ["user", "agent", "agent", "agent"]


def test_reused_ids_answer_the_latest_call() -> None:
    doc = trajectory_from_messages(ROUND_TRIPS["ids reused across turns"])
    assert [s["observation"]["results"][0]["content"] for s in doc["steps"]] == ["1", "2"]


def test_builder_metrics_and_model_only_on_agent_steps() -> None:
    builder = StepBuilder()
    builder.add({"role": "user", "content": "q"}, metrics={"prompt_tokens": 1}, model_name="m")
    step = builder.add(
        {"role": "assistant", "content": "a"},
        metrics={"prompt_tokens": 5, "completion_token_ids": [4], "logprobs": [-0.1]},
        model_name="m",
        timestamp="2026-01-05T09:00:00Z",
        extra={"k": 1},
    )
    assert builder.steps[0] == {"step_id": 1, "source": "user", "message": "q"}
    assert step == {
        "step_id": 2,
        "timestamp": "2026-01-05T09:00:00Z",
        "source": "agent",
        "message": "a",
        "model_name": "m",
        "metrics": {"prompt_tokens": 5, "completion_token_ids": [4], "logprobs": [-0.1]},
        "extra": {"k": 1},
    }


def test_lenient_builder_keeps_what_strict_refuses() -> None:
    builder = StepBuilder(strict=False)
    builder.add({"role": "tool", "tool_call_id": "early", "content": "before any call"})
    builder.add({"role": "ipython", "content": "odd role"})
    builder.add({"role": "assistant", "content": "ok"})
    builder.add({"role": "tool", "tool_call_id": "unknown", "content": "stray"})
    doc = {
        "schema_version": SCHEMA_VERSION,
        "agent": {"name": "a", "version": "1"},
        "steps": builder.steps,
    }
    assert messages_from_trajectory(dump_trajectory(validate_trajectory(doc))) == [
        {"role": "tool", "tool_call_id": "early", "content": "before any call"},
        {"role": "ipython", "content": "odd role"},
        {"role": "assistant", "content": "ok"},
        {"role": "tool", "tool_call_id": "unknown", "content": "stray"},
    ]
    assert builder.steps[2]["observation"]["results"][0].get("source_call_id") is None
