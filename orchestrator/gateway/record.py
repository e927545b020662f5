"""What the model gateway records: every exchange of a trial with its model, and the totals.

One `Exchange` per request the sandbox sent. For chat completions the `response` is the full
`chat.completion` object, also when the answer was streamed (the chunks are assembled), so
readers never parse SSE. Token ids and logprobs stay where the upstream put them (vLLM's
`prompt_token_ids` at the top, `choices[i].token_ids` and `choices[i].logprobs`).

`GatewayRecord` (with `Usage`, the totals, and `TokenDrift`, whether the calls' token ids
make one prefix-extending sequence: `drift.token_drift`) is the file
`<trial>/logs/agent/gateway.json`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field


class Usage(BaseModel):
    """Model usage totals of a trial."""

    calls: int = Field(0, description="Requests forwarded to the upstream.")
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


DriftKind = Literal["none", "re-rendered", "truncated", "unknown"]


class TokenDrift(BaseModel):
    """Whether a trial's chat completions kept to one token sequence: each call's prompt
    token ids start with the previous call's prompt and completion token ids (a prefix
    extension), so a trainer can train on the recorded tokens as they are."""

    kind: DriftKind = Field(
        description="none: every call extended the previous call's prompt + completion; "
        "re-rendered: a call's prompt re-rendered the history (the previous prompt + "
        "completion is not its prefix); truncated: a call's prompt cut or summarised the "
        "context (shorter than the previous prompt + completion, or sharing only a short "
        "prefix with it); unknown: it could not be told (no token ids, no call)."
    )
    detail: str = Field(description="In words: where and why the tokens diverged, or why unknown.")
    calls: int = Field(0, description="Successful chat completions, compared in arrival order.")
    call: int | None = Field(
        None,
        description="The exchange index of the first call that diverged (or, unknown, the "
        "first without token ids).",
    )
    previous_call: int | None = Field(
        None, description="The exchange index of the call it was compared with."
    )
    first_difference: int | None = Field(
        None,
        description="Where the new prompt first differs from the previous prompt + "
        "completion: the length of the prefix they share, in tokens.",
    )
    previous_tokens: int | None = Field(
        None, description="The previous call's prompt + completion, in tokens."
    )
    previous_prompt_tokens: int | None = Field(
        None, description="The previous call's prompt alone, in tokens."
    )
    prompt_tokens: int | None = Field(None, description="The diverging call's prompt, in tokens.")
    diverged_calls: int = Field(
        0, description="Calls in all whose prompt did not extend the previous call's tokens."
    )


class Exchange(BaseModel):
    """One request from the sandbox and what came back."""

    index: int = Field(description="0, 1, 2, ... in the order requests arrived.")
    method: str
    path: str = Field(description="e.g. /v1/chat/completions")
    started_at: datetime
    latency_sec: float = Field(description="From the request's arrival to its last byte out.")
    status_code: int = Field(description="What the sandbox was answered.")
    streamed: bool = False
    request: Any = Field(None, description="The JSON body as sent upstream (never the key).")
    response: Any = Field(
        None, description="The JSON answer; a streamed chat completion, assembled."
    )
    raw_response: str | None = Field(
        None, description="The answer's text when it was not JSON (capped)."
    )
    error: str | None = Field(None, description="Why the exchange failed, when it did.")
    admitted: bool = Field(
        False, exclude=True, description="It passed the limits and held a call while it ran."
    )
    limit: str | None = Field(
        None,
        description="What refused it: calls, tokens, deadline, or closed (after the agent).",
    )
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def upstream_failed(self) -> bool:
        """Failed for the model service's reason, not the agent's nor the gateway's limits:
        unreachable or too slow (the gateway's 502/504), a 5xx, 429 or 401 from the upstream,
        or a stream that broke off."""
        if self.limit is not None or self.error is None:
            return False
        if self.error.startswith(("the upstream model ", "the stream broke off")):
            return True
        return self.error.startswith("upstream answered") and (
            self.status_code >= 500 or self.status_code in (401, 429)
        )


class GatewayRecord(BaseModel):
    """Everything the gateway saw for one trial (written to `agent/gateway.json`)."""

    trial_id: str
    rollout_id: str | None = None
    model: str | None = None
    exchanges: list[Exchange] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    stopped_by: str | None = Field(
        None, description="The first limit that refused a request (calls, tokens, deadline)."
    )
    token_drift: TokenDrift | None = Field(
        None,
        description="Whether the calls' token ids stayed one prefix-extending sequence; set "
        "when the slot closes (None: a record written before the gateway compared them).",
    )

    def outage(self) -> str | None:
        """Why the agent's last model call failed, when the model service failed it: the
        run ended amid an outage. None when it succeeded, or failed for the agent's reason."""
        if not self.exchanges:
            return None
        last = max(self.exchanges, key=lambda exchange: exchange.index)
        if not last.upstream_failed:
            return None
        failed = sum(exchange.upstream_failed for exchange in self.exchanges)
        return (
            f"the model service failed the agent's last call ({last.error}; {failed} of "
            f"{len(self.exchanges)} calls failed upstream): the run ended amid an outage, so "
            "the sample says nothing about the policy; check the model service and retry"
        )
