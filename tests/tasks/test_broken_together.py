"""A folder of tasks with several broken ones is refused once, naming every broken folder and
why, with the way to leave them out; one broken task is refused as before, in its own words."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.common.errors import TaskError
from orchestrator.tasks.task import discover_tasks
from tests.conftest import write_task


def dataset(root: Path) -> Path:
    write_task(root, "good")
    write_task(root, "bad-toml", task_toml="[agent\n")
    write_task(root, "bad-value", task_toml="[environment]\ncpus = 'one'\n")
    return root


def test_every_broken_task_is_named_in_one_refusal(tmp_path: Path) -> None:
    with pytest.raises(TaskError) as refused:
        discover_tasks(dataset(tmp_path / "tasks"))
    message = str(refused.value)
    assert message.startswith("2 of 3 task folders cannot be used:\n- ")
    assert "bad-toml" in message and "bad-value" in message and "environment.cpus" in message
    assert message.endswith("(trialbox run ... --exclude-task bad-toml --exclude-task bad-value)")
    assert "/good/" not in message  # the task that loads is not named


def test_one_broken_task_is_refused_in_its_own_words(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    write_task(root, "good")
    write_task(root, "bad-value", task_toml="[environment]\ncpus = 'one'\n")
    with pytest.raises(TaskError, match=r"bad-value/task\.toml.*environment\.cpus"):
        discover_tasks(root)


def test_the_cli_says_it_once_and_the_hint_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = dataset(tmp_path / "tasks")
    common = ["--backend", "fake", "--agent", "nop", "--jobs-dir", str(tmp_path / "jobs")]
    assert main(["run", str(root), *common]) == 1
    assert "2 of 3 task folders cannot be used" in capsys.readouterr().out
    left_out = ["--exclude-task", "bad-toml", "--exclude-task", "bad-value"]
    assert main(["run", str(root), *common, *left_out]) == 0
