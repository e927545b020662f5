"""The contracts of the rollout service: requests, status documents, cancel dispositions."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, model_validator

from orchestrator.common.errors import TrialboxError
from orchestrator.common.ids import ROLLOUT_ID_PATTERN
from orchestrator.gateway.record import Usage
from orchestrator.gateway.settings import ModelOverride
from orchestrator.trials.result import TrialStatus

Disposition = Literal["cancelled_queued", "cancelled_running", "not_found"]


class RolloutRequest(BaseModel):
    """One rollout to run: which task, which agent, what the verifier may know."""

    model_config = ConfigDict(extra="forbid")

    rollout_id: str = Field(
        pattern=ROLLOUT_ID_PATTERN,
        description="Caller-chosen id: 1-128 of letters, digits and _ . : @ -; a prefix such "
        "as 'tenant-a::' lets one cancel select a whole adapter.",
    )
    task: str | None = Field(None, description="A task folder on the server's host.")
    task_id: str | None = Field(None, description="Dataset mode: a folder under tasks_dir.")
    agent: str | None = Field(None, description="Agent spec; the engine's default when unset.")
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Given to the agent, except `label` (verifier only)."
    )
    prompt: str | None = Field(
        None, description="Replaces the task's instruction.md for this rollout (template mode)."
    )
    model: ModelOverride | None = Field(
        None,
        description="This rollout's model name, sampling, max_turns or upstream URL, over the "
        "engine's model settings.",
    )
    session_id: str | None = Field(
        None, max_length=128, description="Scope for a trainer's abort(scope)."
    )
    workflow_complete_url: AnyHttpUrl | None = Field(
        None, description="POSTed when verification starts."
    )
    grader_complete_url: AnyHttpUrl | None = Field(
        None, description="POSTed with the reward when the rollout ends."
    )

    @model_validator(mode="after")
    def _one_task(self) -> RolloutRequest:
        if self.task is not None and self.task_id is not None:
            raise ValueError("give task or task_id, not both")
        return self


class RolloutStatus(BaseModel):
    """What GET /rollouts/{id} answers."""

    rollout_id: str
    status: TrialStatus
    reward: float | None = None
    rewards: dict[str, float] = Field(default_factory=dict)
    error: str | None = None
    error_category: str | None = None
    trial_dir: str | None = None
    finished_at: datetime | None = None
    usage: Usage | None = Field(None, description="Model calls and tokens, once finished.")
    model_limit: str | None = None


class CancelRequest(BaseModel):
    """Exactly one selector: ids, a prefix, or all."""

    model_config = ConfigDict(extra="forbid")

    ids: list[str] | None = None
    prefix: str | None = Field(None, min_length=1)
    all: bool | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> CancelRequest:
        given = [self.ids is not None, self.prefix is not None, bool(self.all)]
        if sum(given) != 1:
            raise ValueError("give exactly one selector: ids, prefix, or all: true")
        return self


class QueueFull(TrialboxError):
    """The engine's queue is at max_queue_depth; try again after `retry_after` seconds."""

    def __init__(self, retry_after: int, depth: int) -> None:
        self.retry_after = retry_after
        super().__init__(f"the queue is full ({depth} waiting); retry in {retry_after} s")


class EngineClosed(TrialboxError):
    """The engine is shutting down and accepts no new rollouts."""


class DuplicateRollout(TrialboxError, ValueError):
    """A rollout with this id is still in flight."""

    category = "validation"
