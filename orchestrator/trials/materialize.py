"""Give each trial its own copy of the task, and stage the agent's input without the label.

The source folder is only read. A symlink that leaves the task folder, or a special file,
is refused: copying it would let a task reach outside itself on the host. The ground-truth
label goes only into the trial's copy of `tests/`, which reaches the container at
verification time, after the agent is done.

`materialize` copies the task and stages `ContainerInput` (a rollout's `prompt` replaces the
instruction); `skeleton_tar` is the sandbox's `/logs` before the agent; `claim_folder` makes the
trial's own folder, never shared (a taken id gets `.2`, `.3`, ...).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from container_runtime import paths
from container_runtime.contract import ContainerInput
from orchestrator.common.archive import tar_of_files
from orchestrator.common.errors import TaskError
from orchestrator.common.ids import check_id
from orchestrator.tasks.task import Task
from orchestrator.tasks.tree import check_tree, checksum_tree
from relay.launcher import STATE_DIR as RELAY_STATE_DIR

LABEL_KEY = "label"


class Materialized(BaseModel):
    """Where a trial's files are on the host. `step`: the step of a multi-step task these
    files are for (`for_step`): its tests are the task's merged with the step's own
    (`trials/steps.py` makes the folder), its solution the step's own when it has one."""

    trial_dir: Path
    task_dir: Path
    checksum: str
    container_input: ContainerInput
    step: str | None = None

    def for_step(self, name: str) -> Materialized:
        """These files as the step `name` of a multi-step task sees them."""
        return self.model_copy(update={"step": name})

    @property
    def step_dir(self) -> Path | None:
        """The step's folder in the trial's copy of the task (None: no step)."""
        return None if self.step is None else self.task_dir / "steps" / self.step

    @property
    def tests_dir(self) -> Path:
        if self.step is not None:  # outside the task's copy: made at the step's verify time
            return self.trial_dir / "step-tests" / self.step
        return self.task_dir / "tests"

    @property
    def solution_dir(self) -> Path:
        own = self.step_dir
        if own is not None and (own / "solution" / "solve.sh").is_file():
            return own / "solution"
        return self.task_dir / "solution"

    @property
    def logs_dir(self) -> Path:
        return self.trial_dir / "logs"


INSTRUCTION = f"{paths.AGENT_DIR}/instruction.md"  # for CLI agents that take a file


def skeleton_tar(container_input: ContainerInput) -> bytes:
    """The sandbox's /logs before the agent: its input (and the instruction as a file), in
    folders that are root's where they must be. An agent running as another user can write
    only its own folders, and cannot swap the verifier's folder for one of its own."""
    return tar_of_files(
        {
            paths.CONTAINER_INPUT.lstrip("/"): container_input.model_dump_json().encode(),
            INSTRUCTION.lstrip("/"): container_input.instruction.encode(),
        },
        dirs={
            paths.LOGS_DIR.lstrip("/"): 0o755,
            paths.AGENT_DIR.lstrip("/"): 0o777,
            paths.ARTIFACTS_DIR.lstrip("/"): 0o777,
            paths.VERIFIER_DIR.lstrip("/"): 0o755,
            RELAY_STATE_DIR.lstrip("/"): 0o777,  # the agent's user writes its pid there
        },
    )


def claim_folder(job_dir: Path, trial_id: str) -> str:
    """Make the trial's folder, never sharing one: when `trial_id`'s exists already (the same
    rollout id run again after its retention window), the first free `.2`, `.3`, ... suffix
    is taken, so an earlier trial's files and result are never touched. Returns the id."""
    candidate, n = trial_id, 1
    while True:
        try:
            (job_dir / candidate).mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError:
            n += 1
            candidate = check_id(f"{trial_id[: 127 - len(str(n))]}.{n}", "trial id")


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
    rollout_id: str | None = None,
    prompt: str | None = None,
    chat_completions_url: str | None = None,
    credentials_ref: str | None = None,
) -> Materialized:
    """Copy the task into `trial_dir/task`, stage the input, put the label into tests/.

    `prompt`, when given (a rollout's own), replaces the task's instruction.md for the agent.
    """
    entries = check_tree(task.path)
    checksum = checksum_tree(task.path, entries)
    task_dir = trial_dir / "task"
    if task_dir.exists():
        raise TaskError(f"{trial_dir}: already holds a trial; trial ids must be unique")
    trial_dir.mkdir(parents=True, exist_ok=True)
    shutil.copytree(task.path, task_dir, symlinks=True)

    visible, label = split_label(metadata)
    if label is not None:
        (task_dir / "tests").mkdir(exist_ok=True)  # a task without tests/ (a bundle's grader)
        try:
            text = json.dumps(label, allow_nan=False)
        except ValueError as exc:  # a bare NaN or Infinity: strict JSON parsers reject it
            raise TaskError(f"metadata.label: {exc}; give finite numbers only") from exc
        (task_dir / "tests" / "label.json").write_text(text, encoding="utf-8")
    container_input = ContainerInput(
        trial_id=trial_id,
        rollout_id=rollout_id,
        instruction=task.instruction if prompt is None else prompt,
        metadata=visible,
        chat_completions_url=chat_completions_url,
        credentials_ref=credentials_ref,
    )
    return Materialized(
        trial_dir=trial_dir, task_dir=task_dir, checksum=checksum, container_input=container_input
    )
