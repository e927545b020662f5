"""A trial as a value: what it runs, for whom and as which try, written to `<trial>/trial.json`
the moment its folder is claimed.

Readers (the report, resume, exports) take a trial's task, attempt and place in a retry chain
from here and from `result.json`, never from the spelling of its id: a trial killed before it
wrote a result is still known by what it was running, and a rerun says which trial it reruns
(`retry_of`). The label is never written here (only whether there is one), nor any secret:
credentials are listed by name.

`TrialSpec` holds the ids, the task's name, folder and digest, the agent, the attempt,
`retry_of`, the metadata the agent sees and `has_label`, the prompt, the model's name and the
credentials' names; `spec_of` makes it, `write_spec` writes it scrubbed, `read_spec` reads it
back (None for a folder an older trialbox wrote).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from orchestrator.common.atomic_write import write_atomic_sync
from orchestrator.gateway.settings import ModelConfig
from orchestrator.tasks.task import Task
from orchestrator.trials.materialize import split_label
from orchestrator.trials.result import TrialResult

SPEC_FILE = "trial.json"


class TrialSpec(BaseModel):
    """What one trial is, independent of how it went."""

    spec_version: int = 1
    trial_id: str = Field(description="Names the trial's folder and sandbox.")
    job_id: str
    rollout_id: str | None = None
    session_id: str | None = None
    task_name: str
    task_path: str = Field(description="The task folder the trial copied, on the host that ran it.")
    task_digest: str | None = Field(
        None, description="The checksum of the task's files as copied (`task_checksum`)."
    )
    agent_spec: str
    attempt: int = Field(description="Which of the job's attempts at the task this trial is.")
    retry_of: str | None = Field(
        None,
        description="The trial id of the earlier try this one reruns (it ended in infra or "
        "was cancelled); None: a first try.",
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="The rollout's metadata as the agent sees it."
    )
    has_label: bool = Field(False, description="A label was given (it is never written here).")
    prompt: str | None = Field(None, description="The rollout's own instruction, when it had one.")
    model_name: str | None = Field(None, description="The model its agent is served, if any.")
    credentials: list[str] = Field(
        default_factory=list, description="The names of the credentials it is given."
    )
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


def spec_of(
    result: TrialResult,
    task: Task,
    metadata: Mapping[str, Any],
    *,
    prompt: str | None,
    model: ModelConfig | None,
    credentials: Mapping[str, str],
) -> TrialSpec:
    """The spec of a trial as it starts, from its initial result (ids, agent, attempt,
    `retry_of`) and what it was given; the label and every secret value left out."""
    visible, label = split_label(dict(metadata))
    return TrialSpec(
        trial_id=result.trial_id, job_id=result.job_id, rollout_id=result.rollout_id,
        session_id=result.session_id, task_name=result.task_name, task_path=str(task.path),
        agent_spec=result.agent_spec, attempt=result.attempt, retry_of=result.retry_of,
        metadata=visible, has_label=label is not None, prompt=prompt,
        model_name=model.name if model is not None else None,
        credentials=sorted(credentials),
    )  # fmt: skip


def write_spec(
    trial_dir: Path, spec: TrialSpec, scrub: Callable[[str], str] = str, *, durable: bool = True
) -> None:
    """`<trial_dir>/trial.json`, whole or not at all; `scrub` takes the trial's secrets out
    of the text (a credential pasted into the metadata or the prompt). `durable=False` for a
    first version written again moments later (no flush to disk on every trial's start)."""
    text = scrub(spec.model_dump_json(indent=2))
    write_atomic_sync(trial_dir / SPEC_FILE, text, durable=durable)


def read_spec(trial_dir: Path) -> TrialSpec | None:
    """The trial's spec, or None for a folder without a readable one (an older trialbox's,
    or a trial killed before its first phase ended)."""
    try:
        return TrialSpec.model_validate_json((trial_dir / SPEC_FILE).read_bytes())
    except (OSError, ValidationError):
        return None
