"""Reading trajectories in every accepted shape, and writing ATIF."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from container_runtime import __version__, paths
from container_runtime.atif import validate_trajectory
from container_runtime.trajectory import (
    SCHEMA_VERSION,
    load_messages,
    messages_from_trajectory,
    write_trajectory,
)

MESSAGES = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
]


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(paths.LOGS_DIR_ENV, str(tmp_path / "logs"))
    monkeypatch.setenv(paths.TESTS_DIR_ENV, str(tmp_path / "tests"))
    return tmp_path


def test_plain_list_is_returned_as_copies() -> None:
    result = messages_from_trajectory(MESSAGES)
    assert result == MESSAGES
    result[0]["content"] = "changed"
    assert MESSAGES[0]["content"] == "You are helpful."


def test_messages_wrapper() -> None:
    assert messages_from_trajectory({"messages": MESSAGES}) == MESSAGES


def test_atif_steps_map_sources_tool_calls_and_observations() -> None:
    doc = {
        "schema_version": "ATIF-v1.7",
        "session_id": "s-1",
        "agent": {"name": "other-agent", "version": "2.0"},
        "steps": [
            {"step_id": 1, "source": "system", "message": "You are helpful."},
            {"step_id": 2, "source": "user", "message": "What is 2+2?"},
            {
                "step_id": 3,
                "source": "agent",
                "message": "",
                "tool_calls": [
                    {"tool_call_id": "c1", "function_name": "calc", "arguments": {"x": "2+2"}}
                ],
                "observation": {"results": [{"source_call_id": "c1", "content": "4"}]},
            },
            {"step_id": 4, "source": "agent", "message": "4"},
        ],
    }
    assert messages_from_trajectory(doc) == [
        *MESSAGES[:2],
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "calc", "arguments": '{"x": "2+2"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        MESSAGES[2],
    ]


def test_atif_steps_are_read_without_the_root_metadata() -> None:
    steps = [{"step_id": 1, "source": "agent", "message": "4"}]
    assert messages_from_trajectory({"steps": steps}) == [{"role": "assistant", "content": "4"}]


@pytest.mark.parametrize(
    "doc",
    [
        "hello",
        42,
        None,
        {"other": []},
        ["not a message"],
        [{"content": "no role"}],
        {"messages": "nope"},
        {"steps": [{"source": "robot", "message": "hi"}]},
        {"steps": [{"step_id": 1, "source": "user"}]},
        {"steps": [{"step_id": 1, "source": "user", "message": "hi", "metrics": {}}]},
        {"steps": "nope"},
    ],
)
def test_anything_else_is_refused(doc: object) -> None:
    with pytest.raises(ValueError):
        messages_from_trajectory(doc)


def test_write_trajectory_writes_valid_atif(roots: Path) -> None:
    target = write_trajectory(MESSAGES, model_name="m-1", session_id="trial-1")
    assert target == paths.trajectory_path()
    doc = json.loads(target.read_text())
    validate_trajectory(doc)
    assert doc["schema_version"] == SCHEMA_VERSION == "ATIF-v1.7"
    assert doc["session_id"] == "trial-1"
    assert doc["agent"] == {"name": "trialbox", "version": __version__, "model_name": "m-1"}
    assert [(s["step_id"], s["source"], s["message"]) for s in doc["steps"]] == [
        (1, "system", "You are helpful."),
        (2, "user", "What is 2+2?"),
        (3, "agent", "4"),
    ]


def test_write_trajectory_defaults_a_fresh_session_id(tmp_path: Path) -> None:
    first = json.loads(write_trajectory(MESSAGES, tmp_path / "a.json").read_text())
    second = json.loads(write_trajectory(MESSAGES, tmp_path / "b.json").read_text())
    assert first["session_id"] and first["session_id"] != second["session_id"]


def test_round_trip_through_file(roots: Path) -> None:
    write_trajectory(MESSAGES)
    assert load_messages(paths.trajectory_path()) == MESSAGES


def test_tool_messages_become_the_observation_of_their_call(tmp_path: Path) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "assistant", "content": "a.txt"},
    ]
    doc = json.loads(write_trajectory(messages, tmp_path / "t.json").read_text())
    assert [s["source"] for s in doc["steps"]] == ["user", "agent", "agent"]
    assert doc["steps"][1]["observation"] == {
        "results": [{"source_call_id": "c1", "content": "a.txt"}]
    }
    assert load_messages(tmp_path / "t.json") == messages


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([{"role": "tool", "content": "x"}], "tool message answering tool call None"),
        ([{"role": "tool", "tool_call_id": "c9", "content": "x"}], "'c9'"),
        ([{"role": "robot", "content": "x"}], "role 'robot'"),
        ([], "steps"),
    ],
)
def test_write_trajectory_refuses_what_atif_cannot_hold(
    tmp_path: Path, messages: list, problem: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        write_trajectory(messages, tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


def test_load_messages_missing_file_is_empty(tmp_path: Path) -> None:
    assert load_messages(tmp_path / "absent.json") == []


def test_load_messages_reads_plain_list_file(tmp_path: Path) -> None:
    target = tmp_path / "t.json"
    target.write_text(json.dumps(MESSAGES))
    assert load_messages(target) == MESSAGES
