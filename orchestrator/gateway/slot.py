"""One trial's place in the gateway: its socket, its token, its limits and its record.

The slot is reached only through its own unix socket, which only that trial's sandbox has
mounted, and only with its own random token: one trial can never read or write another's
record. Limits are checked before a request goes upstream; the first one reached is kept in
the record, so the result can say what stopped the agent.

`Slot` holds the socket's folder, the token, the agent's clock, the limits and the record;
`settle` adds the record's verdict on its token ids (`drift.token_drift`) once it is closed.
"""

from __future__ import annotations

import hmac
import secrets
import time
from pathlib import Path

from orchestrator.gateway.drift import token_drift
from orchestrator.gateway.record import Exchange, GatewayRecord, TokenDrift
from orchestrator.gateway.settings import ModelConfig

SOCKET_NAME = "gateway.sock"


class Slot:
    """A trial's endpoint: open it before the sandbox exists (its folder is mounted), start
    the clock when the agent starts, close it when the agent is done."""

    def __init__(
        self, folder: Path, *, trial_id: str, rollout_id: str | None, model: ModelConfig
    ) -> None:
        self.folder = folder
        self.model = model
        self.token = "tb-" + secrets.token_urlsafe(32)
        self.tag = rollout_id or trial_id
        self.record = GatewayRecord(trial_id=trial_id, rollout_id=rollout_id, model=model.name)
        self._deadline: float | None = None
        self._arrivals = 0
        self._in_flight = 0
        self.closed = False

    @property
    def socket_path(self) -> Path:
        return self.folder / SOCKET_NAME

    def start_clock(self, seconds: float) -> None:
        """The agent starts now and may use the model for `seconds` (its timeout)."""
        self._deadline = time.monotonic() + seconds

    def remaining_sec(self) -> float | None:
        return None if self._deadline is None else self._deadline - time.monotonic()

    def authorized(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header.removeprefix("Bearer ").encode(), self.token.encode())

    def refusal(self) -> str | None:
        """The limit this request would break, or None when it may go upstream."""
        limits, usage = self.model.limits, self.record.usage
        remaining = self.remaining_sec()
        if remaining is not None and remaining <= 0:
            return "deadline"
        if limits.max_calls is not None and usage.calls + self._in_flight >= limits.max_calls:
            return "calls"  # calls still in flight count: concurrent calls cannot overshoot
        if limits.max_total_tokens is not None and usage.total_tokens >= limits.max_total_tokens:
            return "tokens"
        return None

    def describe(self, limit: str) -> str:
        limits = self.model.limits
        return {
            "deadline": "the agent's time is up",
            "calls": f"the trial's limit of {limits.max_calls} model calls is reached",
            "tokens": f"the trial's limit of {limits.max_total_tokens} tokens is reached",
        }[limit]

    def admit(self) -> None:
        """A request passed the limits and goes upstream: it holds a call until `add`."""
        self._in_flight += 1

    def add(self, exchange: Exchange, *, admitted: bool = False) -> None:
        if admitted:
            self._in_flight -= 1
        record = self.record
        record.exchanges.append(exchange)
        record.exchanges.sort(key=lambda e: e.index)  # concurrent calls finish out of order
        if exchange.limit is not None:
            if exchange.limit != "closed":  # a call after the agent's phase stopped nothing
                record.stopped_by = record.stopped_by or exchange.limit
            return
        if exchange.request is None:
            return  # refused before it went upstream (a malformed body)
        record.usage.calls += 1
        record.usage.prompt_tokens += exchange.prompt_tokens
        record.usage.completion_tokens += exchange.completion_tokens

    def next_index(self) -> int:
        """The index of a request that arrives now (arrival order, whenever it finishes)."""
        self._arrivals += 1
        return self._arrivals - 1

    def settle(self) -> None:
        """The record is complete (the slot is closed): judge its token ids' drift. A
        verdict that fails is `unknown`, never a reason to lose the record."""
        try:
            self.record.token_drift = token_drift(self.record)
        except Exception as exc:  # the record is a bonus: keep it, say why there is no verdict
            why = f"the gateway could not compare the calls' token ids: {exc!r}"
            self.record.token_drift = TokenDrift(kind="unknown", detail=why)
