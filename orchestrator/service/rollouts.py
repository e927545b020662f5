"""The contracts of the rollout service: requests, status documents, cancel dispositions,
the refusals of `TrialEngine.submit`, and the server's size and wait bounds.

`RolloutRequest`, `RolloutStatus` and `CancelRequest` are the documents; `QueueFull`,
`EngineClosed`, `DuplicateRollout`, `RolloutFinished`, `RolloutTombstoned` and
`TooManyLongPolls` the refusals, with `NoFreeSlot` and `DuplicateSession` a session's. The
body and metadata bounds come from `common/defaults.py`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Literal

from pydantic import AnyHttpUrl, BaseModel, Field, JsonValue, field_validator, model_validator

from orchestrator.common.defaults import MAX_BODY_BYTES as MAX_BODY_BYTES
from orchestrator.common.defaults import MAX_METADATA_BYTES as MAX_METADATA_BYTES
from orchestrator.common.errors import TrialboxError
from orchestrator.common.ids import ROLLOUT_ID_PATTERN
from orchestrator.gateway.record import Usage
from orchestrator.gateway.settings import STRICT, ModelOverride
from orchestrator.trials.result import TrialStatus

Disposition = Literal["cancelled_queued", "cancelled_running", "finishing", "not_found"]
"""What a cancel did to one rollout, a promise about how it ends: `cancelled_queued` (it never
ran) and `cancelled_running` (its trial was aborted) end `cancelled`; `finishing`: too late,
its trial's phases were over (verified, or a phase failed) and it ends with its own outcome,
`success` or `failure`; `not_found`: no live rollout of that id."""

MAX_WAIT_SEC = 25.0
"""The longest long poll (`GET /rollouts/{id}?wait=N`): every answer comes within it, so a
proxy that cuts slow responses may sit in between."""


class RolloutRequest(BaseModel):
    """One rollout to run: which task, which agent, what the verifier may know."""

    model_config = STRICT

    rollout_id: str = Field(
        pattern=ROLLOUT_ID_PATTERN,
        description="Caller-chosen id: 1-128 of letters, digits and _ . : @ -; a prefix such "
        "as 'tenant-a::' lets one cancel select a whole adapter.",
    )
    task: str | None = Field(None, description="A task folder on the server's host.")
    task_id: str | None = Field(None, description="Dataset mode: a folder under tasks_dir.")
    agent: str | None = Field(None, description="Agent spec; the engine's default when unset.")
    metadata: dict[str, JsonValue] = Field(
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

    @field_validator("metadata")
    @classmethod
    def _strict_json(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        """JsonValue lets NaN and Infinity through in JSON mode; the verifier's label.json
        and the agent's input must be strict JSON."""
        try:
            json.dumps(value, allow_nan=False)
        except ValueError as exc:
            raise ValueError(f"{exc}: NaN and Infinity are not JSON; give finite numbers") from exc
        return value

    @model_validator(mode="after")
    def _one_task(self) -> RolloutRequest:
        if self.task is not None and self.task_id is not None:
            raise ValueError("give task or task_id, not both")
        return self


class RetriedAttempt(BaseModel):
    """An earlier try of a rollout: infra, discarded and run again under the same id."""

    trial_id: str
    trial_dir: str | None = None
    error_type: str | None = None
    error: str | None = None


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
    attempt: int = Field(
        1,
        description="Which try of this rollout this is: 1, or more after infra failures "
        "retried under the same id (`serve --max-retries`).",
    )
    retried: list[RetriedAttempt] = Field(
        default_factory=list, description="The earlier tries, each an infra failure, oldest first."
    )


class CancelRequest(BaseModel):
    """Exactly one selector: ids, a prefix, a session, or all."""

    model_config = STRICT

    ids: list[str] | None = None
    prefix: str | None = Field(None, min_length=1)
    session_id: str | None = Field(None, min_length=1, max_length=128)
    all: bool | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> CancelRequest:
        given = [
            self.ids is not None,
            self.prefix is not None,
            self.session_id is not None,
            bool(self.all),
        ]
        if sum(given) != 1:
            raise ValueError("give exactly one selector: ids, prefix, session_id, or all: true")
        return self


class QueueFull(TrialboxError):
    """The engine's queue is at max_queue_depth; try again after `retry_after` seconds."""

    def __init__(self, retry_after: int, depth: int) -> None:
        self.retry_after = retry_after
        super().__init__(f"the queue is full ({depth} waiting); retry in {retry_after} s")


class NoFreeSlot(QueueFull):
    """A session could not open: every one of the engine's `n_concurrent` slots is held (by
    rollouts or sessions). Sessions do not wait in line; try again after `retry_after` s."""

    def __init__(self, retry_after: int, message: str) -> None:
        self.retry_after = retry_after
        TrialboxError.__init__(self, message)


class DuplicateSession(TrialboxError, ValueError):
    """A session (or a rollout) of this id is live: close it or use another id."""

    category = "validation"


class ScopeAborted(DuplicateSession):
    """The session's id falls in a scope `abort(scope)` ended lately: like a late rollout of
    that scope, it does not start (409)."""


class EngineClosed(TrialboxError):
    """The engine is shutting down and accepts no new rollouts."""


class DuplicateRollout(TrialboxError, ValueError):
    """A rollout with this id is still in flight; `status` is its live status document."""

    category = "validation"

    def __init__(self, message: str, status: RolloutStatus | None = None) -> None:
        self.status = status
        super().__init__(message)


class RolloutFinished(DuplicateRollout):
    """A rollout with this id already finished and is still retained: `status` is its outcome.

    Submitting it again does not run it again, so a client that retries a submit whose answer
    it lost learns the outcome instead.
    """


class RolloutTombstoned(TrialboxError, ValueError):
    """The rollout may not start: a cancel by its id, or an `abort` of its scope, came first.

    `status` is the document its id reads from now on (`cancelled`, with the reason).
    """

    category = "validation"

    def __init__(self, message: str, status: RolloutStatus) -> None:
        self.status = status
        super().__init__(message)


class TooManyLongPolls(TrialboxError):
    """The engine holds as many long polls (`watch`) as it allows; poll again in a moment."""

    retry_after = 1
