"""Optional per-rollout callbacks: workflow-complete (verification starts) and grader-complete.

Delivery is best effort: bounded retries with backoff, failures logged, never a reason to lose
a result. The payload is serialised once, so a redelivery carries the very same bytes (with
the same `delivery_id`), and a receiver can drop duplicates.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.error
import urllib.request
import uuid
from typing import Literal

from pydantic import BaseModel, Field

from orchestrator.backends.docker import api as docker_api

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


def _post(url: str, body: bytes, timeout: float) -> int:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status


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
    for attempt in range(1, attempts + 1):
        try:
            status = await docker_api.in_thread(_post, url, body, timeout_sec)
            if 200 <= status < 300:
                return True
            problem = f"HTTP {status}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            problem = repr(exc)
        log.warning(
            "callback %s for %s to %s failed (attempt %d of %d): %s",
            payload.event, payload.rollout_id, url, attempt, attempts, problem,
        )  # fmt: skip
        if attempt < attempts:
            await asyncio.sleep(backoff_sec * 2 ** (attempt - 1))
    return False
