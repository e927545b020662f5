"""Reading trajectories in every accepted shape, and writing ATIF."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from container_runtime import paths
from container_runtime.trajectory import load_messages, messages_from_trajectory, write_trajectory

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


def test_atif_steps_map_sources_and_skip_steps_without_message() -> None:
    doc = {
        "schema_version": "ATIF-v1",
        "steps": [
            {"step_id": 1, "source": "system", "message": "You are helpful."},
            {"step_id": 2, "source": "user", "message": "What is 2+2?"},
            {"step_id": 3, "source": "agent", "tool_calls": [{"name": "calc"}]},
            {"step_id": 4, "source": "agent", "message": None},
            {"step_id": 5, "source": "agent", "message": "4"},
        ],
    }
    assert messages_from_trajectory(doc) == MESSAGES


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
        {"steps": "nope"},
    ],
)
def test_anything_else_is_refused(doc: object) -> None:
    with pytest.raises(ValueError):
        messages_from_trajectory(doc)


def test_write_trajectory_writes_atif(roots: Path) -> None:
    target = write_trajectory(MESSAGES)
    assert target == paths.trajectory_path()
    doc = json.loads(target.read_text())
    assert doc["schema_version"] == "ATIF-v1"
    assert [(s["step_id"], s["source"], s["message"]) for s in doc["steps"]] == [
        (1, "system", "You are helpful."),
        (2, "user", "What is 2+2?"),
        (3, "agent", "4"),
    ]


def test_round_trip_through_file(roots: Path) -> None:
    write_trajectory(MESSAGES)
    assert load_messages(paths.trajectory_path()) == MESSAGES


def test_write_trajectory_refuses_roles_atif_cannot_hold(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'tool'"):
        write_trajectory([{"role": "tool", "content": "x"}], tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()


def test_load_messages_missing_file_is_empty(tmp_path: Path) -> None:
    assert load_messages(tmp_path / "absent.json") == []


def test_load_messages_reads_plain_list_file(tmp_path: Path) -> None:
    target = tmp_path / "t.json"
    target.write_text(json.dumps(MESSAGES))
    assert load_messages(target) == MESSAGES
