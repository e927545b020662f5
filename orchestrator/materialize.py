"""Give each trial its own copy of the task, and stage the agent's input without the label.

The source folder is only read. A symlink that leaves the task folder, or a special file,
is refused: copying it would let a task reach outside itself on the host. The ground-truth
label goes only into the trial's copy of `tests/`, which reaches the container at
verification time, after the agent is done.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from container_runtime.contract import ContainerInput
from orchestrator.errors import TaskError
from orchestrator.task import Task

LABEL_KEY = "label"


class Materialized(BaseModel):
    """Where a trial's files are on the host."""

    trial_dir: Path
    task_dir: Path
    checksum: str
    container_input: ContainerInput

    @property
    def tests_dir(self) -> Path:
        return self.task_dir / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.task_dir / "solution"

    @property
    def logs_dir(self) -> Path:
        return self.trial_dir / "logs"


def check_tree(root: Path) -> list[Path]:
    """Every entry under `root`, sorted; refuses escaping symlinks and special files."""
    entries: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                target = path.resolve()
                if not target.is_relative_to(root):
                    raise TaskError(f"{path}: a symlink pointing outside the task ({target})")
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise TaskError(f"{path}: a special file (not a regular file or folder)")
            entries.append(path)
    return entries


def checksum_tree(root: Path, entries: list[Path]) -> str:
    """A content hash of a task folder: names, link targets, executable bits and bytes."""
    digest = hashlib.sha256()
    for path in entries:
        name = path.relative_to(root).as_posix()
        if path.is_symlink():
            digest.update(f"L\0{name}\0{os.readlink(path)}\0".encode())
        elif path.is_file():
            executable = path.stat().st_mode & 0o111 != 0
            digest.update(f"F\0{name}\0{executable:d}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def split_label(metadata: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The metadata the agent may see, and the label it must not."""
    visible = {k: v for k, v in metadata.items() if k != LABEL_KEY}
    return visible, metadata.get(LABEL_KEY)


def materialize(
    task: Task,
    trial_dir: Path,
    *,
    trial_id: str,
    metadata: dict[str, Any],
    chat_completions_url: str | None = None,
    credentials_ref: str | None = None,
) -> Materialized:
    """Copy the task into `trial_dir/task`, stage the input, put the label into tests/."""
    entries = check_tree(task.path)
    checksum = checksum_tree(task.path, entries)
    task_dir = trial_dir / "task"
    if task_dir.exists():
        raise TaskError(f"{trial_dir}: already holds a trial; trial ids must be unique")
    trial_dir.mkdir(parents=True, exist_ok=True)
    shutil.copytree(task.path, task_dir, symlinks=True)

    visible, label = split_label(metadata)
    if label is not None:
        (task_dir / "tests" / "label.json").write_text(json.dumps(label), encoding="utf-8")
    container_input = ContainerInput(
        trial_id=trial_id,
        instruction=task.instruction,
        metadata=visible,
        chat_completions_url=chat_completions_url,
        credentials_ref=credentials_ref,
    )
    return Materialized(
        trial_dir=trial_dir, task_dir=task_dir, checksum=checksum, container_input=container_input
    )
