"""Which model a trial's agent talks to, how, and within which limits.

The upstream is any OpenAI-compatible server: a trainer's vLLM or SGLang (often behind a
router) or a hosted API. Its key stays on the host: the gateway adds it to each forwarded
request, and the sandbox only ever holds a per-trial token that is worthless elsewhere.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

DEFAULT_KEY_ENV = "OPENAI_API_KEY"

STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)
"""The config of every model a request or a settings file fills: unknown keys and non-finite
numbers (NaN, Infinity, 1e999) are refused, naming the field, since JSON cannot carry them."""


class Sampling(BaseModel):
    """Sampling settings added to each request the agent does not set itself."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = None

    def as_body(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class ModelLimits(BaseModel):
    """Per-trial bounds; past one, the agent gets a 403 that names it."""

    model_config = STRICT

    max_calls: int | None = Field(None, ge=1, description="Requests forwarded upstream.")
    max_total_tokens: int | None = Field(
        None, ge=1, description="Prompt plus completion tokens over the whole trial."
    )


class ModelConfig(BaseModel):
    """The model of a trial: the upstream's URL and key, the model name, sampling, limits."""

    model_config = STRICT

    name: str = Field(min_length=1, description="The model name sent upstream.")
    base_url: str = Field(
        description="The upstream's OpenAI base URL, e.g. http://host:8000/v1 (no trailing "
        "/chat/completions)."
    )
    api_key: SecretStr | None = Field(
        None,
        description="The upstream's key; by default read from the host's $OPENAI_API_KEY "
        "(or the variable `api_key_env` names). Never reaches the sandbox.",
        repr=False,
    )
    api_key_env: str = Field(DEFAULT_KEY_ENV, description="Where the key comes from.")
    sampling: Sampling = Field(default_factory=Sampling)
    limits: ModelLimits = Field(default_factory=ModelLimits)
    max_turns: int | None = Field(None, ge=1, description="For the built-in shell agent.")
    request_token_ids: bool = Field(
        False,
        description="Ask the upstream for token ids and logprobs (vLLM's return_token_ids and "
        "logprobs), so the trajectory carries the exact tokens for RL.",
    )
    upstream_timeout_sec: float = Field(600.0, gt=0, description="One upstream request.")

    @model_validator(mode="after")
    def _key_from_env(self) -> ModelConfig:
        if self.api_key is None and os.environ.get(self.api_key_env):
            self.api_key = SecretStr(os.environ[self.api_key_env])
        self.base_url = self.base_url.rstrip("/")
        return self

    def merged(self, override: ModelOverride | None) -> ModelConfig:
        """This config with a rollout's overrides applied."""
        if override is None:
            return self
        update: dict[str, Any] = {}
        if override.name is not None:
            update["name"] = override.name
        if override.base_url is not None:
            update["base_url"] = override.base_url.rstrip("/")
        if override.sampling is not None:
            update["sampling"] = Sampling(
                **{**self.sampling.model_dump(), **override.sampling.as_body()}
            )
        if override.max_turns is not None:
            update["max_turns"] = override.max_turns
        return self.model_copy(update=update)


class ModelOverride(BaseModel):
    """What one rollout may change: a trainer can route and sample each rollout on its own."""

    model_config = STRICT

    name: str | None = Field(None, min_length=1)
    base_url: str | None = Field(None, description="Route this rollout to another upstream.")
    sampling: Sampling | None = None
    max_turns: int | None = Field(None, ge=1)
