"""Harbor's deprecated size strings mean the same megabytes here as in Harbor."""

from __future__ import annotations

import pytest

from orchestrator import TaskError, load_task
from orchestrator.tasks.sizes import parse_size_mb


@pytest.mark.parametrize(
    ("text", "mb"),
    [
        ("8G", 8192),
        ("512M", 512),
        ("1.5G", 1536),
        ("2048K", 2),
        ("2047K", 1),  # int() truncation, as in Harbor
        (" 4g ", 4096),  # trimmed, case-insensitive
        ("0.1M", 0),
        ("1e1M", 10),  # float() syntax, as in Harbor
    ],
)
def test_size_strings(text: str, mb: int) -> None:
    assert parse_size_mb(text) == mb


@pytest.mark.parametrize("text", ["8", "8GB", "G", "", "lots", "infG", "nanM", "8 G B"])
def test_bad_size_strings(text: str) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size_mb(text)


def test_memory_string_sets_memory_mb_and_wins_over_it(make_task) -> None:
    task = load_task(make_task(task_toml='[environment]\nmemory_mb = 1024\nmemory = "8G"\n'))
    assert task.config.environment.memory_mb == 8192
    assert task.config.environment.memory is None
    assert "memory" not in task.config.environment.model_dump()


def test_storage_string_sets_storage_mb(make_task) -> None:
    task = load_task(make_task(task_toml='[environment]\nstorage = "1.5G"\n'))
    assert task.config.environment.storage_mb == 1536


def test_storage_mb_defaults_to_harbors(make_task) -> None:
    assert load_task(make_task()).config.environment.storage_mb == 10240


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ('memory = "lots"', "environment.memory"),
        ('memory = "8"', "environment.memory"),
        ('memory = "512K"', "environment.memory"),  # 0 MB: no sandbox runs in that
        ('storage = "2T"', "environment.storage"),
        ("memory = 8", "environment.memory"),
    ],
)
def test_bad_size_in_task_toml_names_the_field(make_task, toml: str, field: str) -> None:
    task = make_task(task_toml=f"[environment]\n{toml}\n")
    with pytest.raises(TaskError) as raised:
        load_task(task)
    assert str(task / "task.toml") in str(raised.value)
    assert f"field {field}:" in str(raised.value)
