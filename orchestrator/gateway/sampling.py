"""Sampling settings: a checked set of request keys, each with the range its servers accept.

The keys are OpenAI's and the extensions vLLM and SGLang users commonly send (top_k, min_p,
repetition_penalty, stop_token_ids, chat_template_kwargs, ...). A key outside the set is
refused, naming it and the known key it is probably a typo of, unless the model settings name
it as a pass-through (`ModelConfig.extra_sampling_keys`): a misspelt `top_kk` would otherwise
reach the upstream, which ignores what it does not know, and the run would sample with the
server's default while its config says otherwise. Whatever the key, its value must be strict
JSON (no NaN, no Infinity), which is all a request can carry.

`Sampling` is the checked set; `check_sampling_keys` refuses an unknown key with a did-you-mean
unless it is a pass-through; `agent_sampling_problem` holds the agent's own values to the same
ranges (a 400). docs/sampling.md is the user's page.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from orchestrator.common.suggest import did_you_mean

# The gateway's own keys of a request: never a sampling default, not even a pass-through one.
RESERVED_KEYS = frozenset({"model", "messages", "user", "stream", "stream_options"})


class Sampling(BaseModel):
    """Sampling settings added to each request the agent does not set itself.

    Only the fields below are known; any other key (kept as an extra) is refused by the model
    settings unless they name it in `extra_sampling_keys` (`check_sampling_keys`)."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    # OpenAI's chat completions.
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int | None = Field(None, ge=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = None
    stop: str | list[str] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0)
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = Field(
        None, description="Token id (as a string) to a bias in -100..100."
    )
    reasoning_effort: str | None = Field(None, min_length=1)
    # vLLM's and SGLang's extensions.
    top_k: int | None = Field(None, ge=-1, description="-1 (or 0 on vLLM): every token.")
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0)
    min_tokens: int | None = Field(None, ge=0)
    stop_token_ids: list[int] | None = None
    ignore_eos: bool | None = None
    skip_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    return_token_ids: bool | None = None
    chat_template_kwargs: dict[str, JsonValue] | None = Field(
        None, description='e.g. {"enable_thinking": false} for Qwen3 on vLLM or SGLang.'
    )

    @model_validator(mode="after")
    def _strict_json(self) -> Sampling:
        """Every value as strict JSON: the typed floats already refuse NaN and Infinity, but a
        pass-through key's value and a JSON-valued field are not floats pydantic checks."""
        for key, value in self.as_body().items():
            try:
                json.dumps(value, allow_nan=False)
            except ValueError:
                raise ValueError(
                    f"{key}: holds NaN or Infinity, which JSON cannot carry; give finite numbers"
                ) from None
        return self

    def as_body(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def unknown_keys(self) -> list[str]:
        """The keys set here that are not fields: pass-through keys, or typos."""
        return sorted(self.model_extra or {})


KNOWN_KEYS = frozenset(Sampling.model_fields)


def check_sampling_keys(sampling: Sampling, extra: Collection[str], where: str) -> None:
    """Refuse (ValueError) a key of `sampling` that is neither known nor in `extra`, naming it
    as `where` + KEY (`model.sampling.top_kk`), with the known key it is probably a typo of."""
    for key in sampling.unknown_keys():
        if key not in extra:
            raise ValueError(
                f"{where}{key}: not a sampling key trialbox knows (to send it to the upstream "
                "as it is, name it in the model settings' extra_sampling_keys, on the command "
                "line --extra-sampling-key KEY)" + did_you_mean(key, sorted(KNOWN_KEYS))
            )


def check_extra_keys(keys: Collection[str]) -> None:
    """Refuse (ValueError) a pass-through key that is the gateway's own or no key at all."""
    for key in keys:
        if not key.strip():
            raise ValueError("extra_sampling_keys: an empty key")
        if key in RESERVED_KEYS:
            raise ValueError(
                f"extra_sampling_keys: {key!r} is set by the agent or the gateway, not a "
                f"sampling default (reserved: {', '.join(sorted(RESERVED_KEYS))})"
            )


def first_error(exc: ValidationError) -> tuple[str, str]:
    """A validation error's first problem as (where, message): `top_k`, `logit_bias.50256`
    (empty for a whole-model check, whose message names the key first)."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return where, str(error["msg"]).removeprefix("Value error, ")


def sampling_problem(values: Mapping[str, Any]) -> str | None:
    """What is wrong with sampling values, one line naming the key first, or None."""
    try:
        Sampling.model_validate(values)
    except ValidationError as exc:
        where, message = first_error(exc)
        return f"{where}: {message}" if where else message
    return None


def agent_sampling_problem(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first known sampling key whose value in an agent's request is out of range, as
    (key, message), or None: the same checks as the trainer's defaults, so what reaches the
    upstream obeys one rule whoever set it. Other keys are the agent's business."""
    picked = {k: v for k, v in body.items() if k in KNOWN_KEYS and v is not None}
    problem = sampling_problem(picked) if picked else None
    if problem is None:
        return None
    return problem.partition(".")[0].partition(":")[0], problem
