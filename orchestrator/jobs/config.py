"""`config.json`: everything a job was asked to do, written when it starts, so that a crash
leaves enough to resume it. Secrets never reach it: credentials appear by name only, the
model's key not at all (only the variable it came from), and any value of either that hid
elsewhere is scrubbed from the text as written.

`JobConfigFile` is the file's model.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.common.scrub import Scrubber
from orchestrator.trials.config import TrialConfig


def public_trial_config(config: TrialConfig) -> dict[str, Any]:
    """The trial config as JSON data, without a secret's value."""
    data = config.model_dump(mode="json", exclude={"credentials": True, "model": {"api_key"}})
    data["credentials"] = sorted(config.credentials)  # the names the agent gets
    return data


def secrets_of(config: TrialConfig) -> list[str]:
    found = list(config.credentials.values())
    if config.model is not None and config.model.api_key is not None:
        found.append(config.model.api_key.get_secret_value())
    return found


class JobConfigFile(BaseModel):
    """The contents of `<job_dir>/config.json`."""

    model_config = ConfigDict(extra="ignore")

    job_id: str
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    resumed_at: list[datetime] = Field(default_factory=list)
    tasks: list[str] = Field(description="The task folders, in the job's order.")
    agent: str
    n_concurrent: int
    attempts: int
    max_retries: int
    retry_backoff_sec: tuple[float, float] = Field(description="(first wait, longest wait)")
    metadata: dict[str, Any] = Field(default_factory=dict)
    task_metadata: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per task name, over `metadata` (labels)."
    )
    trial_config: dict[str, Any] = Field(description="TrialConfig, secrets by name only.")
    options: dict[str, Any] | None = Field(
        None, description="The caller's own settings (`trialbox run`: every option)."
    )

    def text(self, config: TrialConfig) -> str:
        """The file's text, with any secret value of `config` scrubbed out."""
        return Scrubber(secrets_of(config)).text(self.model_dump_json(indent=2))
