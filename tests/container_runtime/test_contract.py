"""The contract models, atomic writes and reward validation."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from container_runtime import paths
from container_runtime.contract import (
    ContainerInput,
    ContainerResult,
    InvalidRewardError,
    read_model,
    write_model,
    write_reward,
)


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(paths.LOGS_DIR_ENV, str(tmp_path / "logs"))
    monkeypatch.setenv(paths.TESTS_DIR_ENV, str(tmp_path / "tests"))
    return tmp_path


def test_paths_default_to_container_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(paths.LOGS_DIR_ENV, raising=False)
    monkeypatch.delenv(paths.TESTS_DIR_ENV, raising=False)
    assert str(paths.container_input_path()) == paths.CONTAINER_INPUT
    assert str(paths.container_result_path()) == paths.CONTAINER_RESULT
    assert str(paths.trajectory_path()) == paths.TRAJECTORY
    assert str(paths.reward_json_path()) == paths.REWARD_JSON
    assert str(paths.reward_txt_path()) == paths.REWARD_TXT
    assert str(paths.artifacts_dir()) == paths.ARTIFACTS_DIR
    assert str(paths.label_path()) == paths.LABEL


def test_paths_follow_env_at_call_time(roots: Path) -> None:
    assert paths.reward_json_path() == roots / "logs" / "verifier" / "reward.json"
    assert paths.label_path() == roots / "tests" / "label.json"


def test_write_reward_bare_number(roots: Path) -> None:
    assert write_reward(0.5) == {"reward": 0.5}
    assert json.loads(paths.reward_json_path().read_text()) == {"reward": 0.5}


def test_write_reward_int_is_written_as_float(roots: Path) -> None:
    written = write_reward(1)
    assert written == {"reward": 1.0}
    assert isinstance(written["reward"], float)


def test_write_reward_map_to_explicit_path(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "r.json"
    assert write_reward({"accuracy": 1, "style": 0.25}, target) == {
        "accuracy": 1.0,
        "style": 0.25,
    }
    assert json.loads(target.read_text()) == {"accuracy": 1.0, "style": 0.25}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_write_reward_refuses_non_finite(roots: Path, bad: float) -> None:
    with pytest.raises(InvalidRewardError, match="'score' must be finite"):
        write_reward({"ok": 1.0, "score": bad})
    assert not paths.reward_json_path().exists()


@pytest.mark.parametrize("bad", [True, False, "1.0", None, [1.0]])
def test_write_reward_refuses_non_numbers(roots: Path, bad: Any) -> None:  # wrong on purpose
    with pytest.raises(ValueError, match="'score' must be a number"):
        write_reward({"score": bad})
    assert not paths.reward_json_path().exists()


def test_write_reward_refuses_bare_bool_naming_default_key(roots: Path) -> None:
    with pytest.raises(InvalidRewardError, match="'reward' must be a number, got bool"):
        write_reward(True)


def test_write_reward_refuses_empty_map(roots: Path) -> None:
    with pytest.raises(InvalidRewardError, match="empty"):
        write_reward({})


def test_input_round_trip(tmp_path: Path) -> None:
    original = ContainerInput(
        trial_id="t-1",
        instruction="Fix the bug.",
        metadata={"difficulty": "easy", "tags": ["a", "b"]},
        chat_completions_url="http://host:8000/v1/chat/completions",
        credentials_ref="OPENAI_API_KEY",
    )
    target = write_model(tmp_path / "a" / "b" / "in.json", original)
    assert read_model(target, ContainerInput) == original
    assert json.loads(target.read_text(encoding="utf-8"))["credentials_ref"] == "OPENAI_API_KEY"


def test_input_forbids_unknown_fields_such_as_a_label() -> None:
    with pytest.raises(ValidationError, match="label"):
        ContainerInput(trial_id="t", instruction="i", label="secret")  # type: ignore[call-arg]  # unknown on purpose


def test_result_round_trip_keeps_output(tmp_path: Path) -> None:
    original = ContainerResult(
        status="failure", error="boom", error_type="RuntimeError", output=None, duration_sec=1.5
    )
    target = write_model(tmp_path / "result.json", original)
    assert read_model(target, ContainerResult) == original
    ok = ContainerResult(status="success", output={"answer": [1, 2]}, duration_sec=0.0)
    assert read_model(write_model(target, ok), ContainerResult).output == {"answer": [1, 2]}


def test_result_rejects_unknown_status() -> None:
    with pytest.raises(ValidationError):
        ContainerResult(status="done", duration_sec=0.0)


def test_write_model_is_atomic_and_readable(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    target.write_text("old")
    write_model(target, ContainerResult(status="success", duration_sec=0.1))
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temp file left behind
    assert target.stat().st_mode & 0o044 == 0o044  # readable by a different user
    assert read_model(target, ContainerResult).status == "success"
