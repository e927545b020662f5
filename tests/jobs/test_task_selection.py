"""Which tasks a run takes (--exclude-task) and the label each gets (--labels)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import TaskError
from orchestrator.cli import main
from orchestrator.cli.common import tasks_of
from orchestrator.cli.labels import read_labels
from orchestrator.cli.settings import load_settings
from orchestrator.service.job import JobRecord
from tests.conftest import write_task
from tests.jobs.helpers import make_tasks


def names(tmp_path: Path, *exclude: str, task_id: tuple[str, ...] = ()) -> list[str]:
    given = {"path": tmp_path / "tasks", "exclude_task": list(exclude), "task_id": list(task_id)}
    return [task.name for task in tasks_of(load_settings(given, None, {}))]


def test_exclude_globs_leave_out_matching_task_names(tmp_path: Path) -> None:
    make_tasks(tmp_path, "big-1", "big-2", "small-1", "small-22", "other")

    assert names(tmp_path) == ["big-1", "big-2", "other", "small-1", "small-22"]
    assert names(tmp_path, "big-*") == ["other", "small-1", "small-22"]
    assert names(tmp_path, "big-*", "small-?") == ["other", "small-22"]
    assert names(tmp_path, "[bs]*") == ["other"]
    assert names(tmp_path, "big-*", task_id=("big-1", "other")) == ["other"]
    with pytest.raises(ValueError, match="leaves no task"):
        names(tmp_path, "*")


def test_an_excluded_task_is_never_loaded(tmp_path: Path) -> None:
    make_tasks(tmp_path, "good")
    write_task(tmp_path / "tasks", "broken", task_toml='[agent]\ntimeout_sec = "soon"\n')

    assert names(tmp_path, "broken") == ["good"]
    with pytest.raises(TaskError, match=r"agent\.timeout_sec"):
        names(tmp_path)


def test_a_labels_file_gives_each_named_task_its_label(tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        '{"task": "a", "label": {"answer": 42}}\n\n{"task": "b", "label": "yes", "id": 7}\n'
    )
    assert read_labels(labels, {"a", "b", "c"}) == {"a": {"answer": 42}, "b": "yes"}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"task": "a", "label": 1}\n{"task": "a", "label": 2\n', r"labels\.jsonl:2: not JSON"),
        ('{"task": "a", "label": 1}\n\n{"task": "zz", "label": 2}\n', r":3: no task named 'zz'"),
        ('{"task": "a"}\n', r'labels\.jsonl:1: no "label" for task'),
        ('["a", 1]\n', r'labels\.jsonl:1: expected \{"task"'),
        ('{"task": "a", "label": 1}\n{"task": "a", "label": 2}\n', r":2: a second label"),
    ],
)
def test_a_bad_labels_line_names_the_file_and_the_line(
    tmp_path: Path, text: str, error: str
) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_text(text)
    with pytest.raises(ValueError, match=error):
        read_labels(labels, {"a", "b"})


def run(tmp_path: Path, *argv: str) -> int:
    tasks, jobs = str(tmp_path / "tasks"), str(tmp_path / "jobs")
    fixed = ["--backend", "fake", "--agent", "nop", "--jobs-dir", jobs, "--job-name", "labelled"]
    return main(["run", tasks, *fixed, *argv])


def test_labels_reach_only_their_task_s_verifier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_tasks(tmp_path, "a", "b", "c")
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"task": "a", "label": {"answer": 42}}\n{"task": "c", "label": 7}\n')

    assert run(tmp_path, "--labels", str(labels), "--exclude-task", "c") == 0, capsys.readouterr()

    job_dir = tmp_path / "jobs" / "labelled"
    job = JobRecord.model_validate_json((job_dir / "job.json").read_text())
    copies = {t.task_name: Path(t.trial_dir) / "task" / "tests" / "label.json" for t in job.trials}
    assert sorted(copies) == ["a", "b"]
    assert json.loads(copies["a"].read_text()) == {"answer": 42}
    assert not copies["b"].exists()  # no line, no label
    saved = json.loads((job_dir / "config.json").read_text())
    assert saved["task_metadata"] == {"a": {"label": {"answer": 42}}}


def test_a_bad_labels_file_or_both_label_options_stop_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_tasks(tmp_path, "a")
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"task": "a", "label": 1}\n{"task": "nope", "label": 1}\n')

    assert run(tmp_path, "--labels", str(labels)) == 1
    assert f"{labels}:2: no task named 'nope'" in capsys.readouterr().out
    assert run(tmp_path, "--labels", str(labels), "--label", "x") == 1
    assert "--label and --labels" in capsys.readouterr().out
    assert not (tmp_path / "jobs").exists()  # refused before anything started
