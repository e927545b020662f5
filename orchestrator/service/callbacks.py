"""Optional per-rollout callbacks: workflow-complete (verification starts) and grader-complete.

Delivery is best effort: bounded retries with backoff, failures logged, never a reason to lose
a result. The payload is serialised once, so a redelivery carries the very same bytes (with
the same `delivery_id`), and a receiver can drop duplicates. Each delivery is a task of its
own in an `Outbox`, so a slow receiver never holds up the rollout that triggered it.

Delivered with httpx, retried with tenacity; `deliver` sends one, `Outbox` holds those under
way.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import httpx
from pydantic import BaseModel, Field
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

if TYPE_CHECKING:
    from orchestrator.service.rollouts import RolloutRequest
    from orchestrator.trials.result import TrialResult

log = logging.getLogger(__name__)

CallbackEvent = Literal["workflow_complete", "grader_complete"]


class CallbackPayload(BaseModel):
    """What a callback endpoint receives."""

    event: CallbackEvent
    delivery_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    rollout_id: str
    status: str
    reward: float | None = None
    rewards: dict[str, float] = Field(default_factory=dict)
    error: str | None = None


def callback_of(
    request: RolloutRequest, event: CallbackEvent, status: str, result: TrialResult | None
) -> tuple[str, CallbackPayload] | None:
    """The URL and payload of a rollout's `event` callback, or None when it asked for none."""
    url = (
        request.workflow_complete_url
        if event == "workflow_complete"
        else request.grader_complete_url
    )
    if url is None:
        return None
    payload = CallbackPayload(
        event=event,
        rollout_id=request.rollout_id,
        status=status,
        reward=result.reward if result else None,
        rewards=result.rewards if result else {},
        error=result.error.message if result and result.error else None,
    )
    return str(url), payload


class _NotDelivered(Exception):
    """The endpoint answered, but not with a 2xx."""


def _log_failure(
    payload: CallbackPayload, url: str, attempts: int
) -> Callable[[RetryCallState], None]:
    def log_it(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "callback %s for %s to %s failed (attempt %d of %d): %s",
            payload.event, payload.rollout_id, url, state.attempt_number, attempts, exc,
        )  # fmt: skip

    return log_it


async def deliver(
    url: str,
    payload: CallbackPayload,
    *,
    attempts: int = 3,
    backoff_sec: float = 0.5,
    timeout_sec: float = 10.0,
) -> bool:
    """POST the payload, retrying a bounded number of times; True once a 2xx answer came."""
    body = payload.model_dump_json().encode()
    headers = {"Content-Type": "application/json"}
    retrying = AsyncRetrying(
        retry=retry_if_exception_type((httpx.HTTPError, _NotDelivered)),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=backoff_sec),
        after=_log_failure(payload, url, attempts),
    )
    async with httpx.AsyncClient(timeout=timeout_sec) as client:
        try:
            async for attempt in retrying:
                with attempt:
                    response = await client.post(url, content=body, headers=headers)
                    if not response.is_success:
                        raise _NotDelivered(f"HTTP {response.status_code}")
        except RetryError:
            return False
    return True


class Outbox:
    """The engine's callbacks on their way: each posted as its own task and held here, so
    the loop cannot drop a task still running, and shutdown can wait for the last ones."""

    def __init__(self) -> None:
        self._sending: set[asyncio.Task[bool]] = set()

    def post(self, url: str, payload: CallbackPayload) -> None:
        """Start delivering `payload` to `url`; returns at once."""
        sent = asyncio.create_task(deliver(url, payload))
        self._sending.add(sent)
        sent.add_done_callback(self._sending.discard)

    async def drain(self, timeout_sec: float) -> None:
        """Wait up to `timeout_sec` for the deliveries under way (the rest go on unwaited)."""
        if self._sending:
            await asyncio.wait(set(self._sending), timeout=timeout_sec)
