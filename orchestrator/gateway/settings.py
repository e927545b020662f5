"""Which model a trial's agent talks to, how, and within which limits.

The upstream is any OpenAI-compatible server: a trainer's vLLM or SGLang (often behind a
router) or a hosted API. Its key stays on the host: the gateway adds it to each forwarded
request, and the sandbox only ever holds a per-trial token that is worthless elsewhere.

`ModelConfig` holds the upstream URL, the key's variable (the key is read from the host's
environment), `sampling` and `extra_sampling_keys`, `limits` (`ModelLimits`), `max_turns` and
whether to ask for token ids; a rollout's `ModelOverride` is merged over it, its sampling keys
checked by `check_override`.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from orchestrator.common.defaults import DEFAULT_KEY_ENV
from orchestrator.gateway.sampling import Sampling, check_extra_keys, check_sampling_keys

STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)
"""The config of every model a request or a settings file fills: unknown keys and non-finite
numbers (NaN, Infinity, 1e999) are refused, naming the field, since JSON cannot carry them."""


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
    extra_sampling_keys: list[str] = Field(
        default_factory=list,
        description="Sampling keys trialbox does not know, sent to the upstream as given "
        "(still strict JSON); any other unknown key in `sampling` or a rollout's is refused.",
    )
    sampling: Sampling = Field(default_factory=Sampling)
    limits: ModelLimits = Field(default_factory=ModelLimits)
    max_turns: int | None = Field(None, ge=1, description="For the built-in shell agent.")
    request_token_ids: bool = Field(
        False,
        description="Ask the upstream for token ids and logprobs (vLLM's return_token_ids and "
        "logprobs), so the trajectory carries the exact tokens for RL.",
    )
    upstream_timeout_sec: float = Field(600.0, gt=0, description="One upstream request.")

    @field_validator("extra_sampling_keys")
    @classmethod
    def _usable_keys(cls, keys: list[str]) -> list[str]:
        check_extra_keys(keys)
        return keys

    @model_validator(mode="after")
    def _known_sampling(self) -> ModelConfig:
        check_sampling_keys(self.sampling, self.extra_sampling_keys, "sampling.")
        return self

    def check_override(self, override: ModelOverride | None) -> None:
        """Refuse (ValueError) a rollout's sampling key this config does not let through,
        named as the request's `model.sampling.KEY`."""
        if override is not None and override.sampling is not None:
            check_sampling_keys(override.sampling, self.extra_sampling_keys, "model.sampling.")

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
        self.check_override(override)
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
