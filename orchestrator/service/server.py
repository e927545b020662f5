"""`trialbox serve`: the rollout engine over HTTP (FastAPI; install the `serve` extra).

POST /rollouts answers 202 or 429 with Retry-After; GET /rollouts/{id} is the status document
(with model usage); GET /rollouts/{id}/trajectory the finished rollout's ATIF trajectory;
POST /rollouts/cancel takes exactly one selector; GET /healthz. On shutdown the server stops
accepting, drains for a bounded time, then host-aborts what is left.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import aiofiles
from fastapi import FastAPI, Header, HTTPException
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse

from orchestrator.common.errors import TaskError, TrialboxError
from orchestrator.common.ids import ROLLOUT_ID_PATTERN
from orchestrator.service.engine import TrialEngine
from orchestrator.service.prewarm import prewarm
from orchestrator.service.rollouts import (
    CancelRequest,
    DuplicateRollout,
    EngineClosed,
    QueueFull,
    RolloutRequest,
    RolloutStatus,
)
from orchestrator.tasks.task import Task

log = logging.getLogger(__name__)


def _authorized(configured: str | None, header: str | None) -> bool:
    if configured is None:
        return True
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), configured.encode())


def create_app(
    engine: TrialEngine,
    *,
    admin_token: str | None = None,
    prewarm_tasks: Sequence[Task | str | Path] = (),
    drain_sec: float = 30.0,
    agents: Collection[str] = (),
    task_paths: bool = False,
    model_urls: Collection[str] = (),
) -> FastAPI:
    """An app serving `engine`. `admin_token` (stripped) guards cancel-all.

    A request may pick the engine's default agent or one listed in `agents`, and a task
    folder by path only when `task_paths` is set: otherwise a client could make the server
    read any host path (a task folder, a workflow file) into a sandbox. A request may route
    its model calls to another upstream only under a prefix in `model_urls`: the gateway
    sends the host's model key there.
    """
    token = admin_token.strip() if admin_token and admin_token.strip() else None
    allowed_agents = {engine.default_agent, *agents}

    def check_request(request: RolloutRequest) -> None:
        if request.agent is not None and request.agent not in allowed_agents:
            raise HTTPException(
                422, f"agent {request.agent!r} is not offered here; one of {sorted(allowed_agents)}"
            )
        if request.task is not None and not task_paths:
            raise HTTPException(
                422, "this server takes task_id (dataset mode) or its template task, not task paths"
            )
        url = request.model.base_url if request.model is not None else None
        if url is not None and not any(url.startswith(prefix) for prefix in model_urls):
            raise HTTPException(
                422,
                f"model.base_url {url!r} is not allowed here (the server sends its model key "
                "there); start the server with --allow-model-url PREFIX",
            )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if prewarm_tasks:
            rows = await prewarm(
                prewarm_tasks, base_image_map=engine.config.base_image_map, backend=engine.backend
            )
            log.info("prewarmed %d image(s)", len(rows))
        yield
        await engine.shutdown(drain_sec)

    app = FastAPI(title="trialbox", lifespan=lifespan)

    @app.post("/rollouts", status_code=202)
    async def submit(request: RolloutRequest) -> Any:
        check_request(request)
        try:
            rollout_id = await engine.submit(request)
        except QueueFull as exc:
            return JSONResponse(
                status_code=429,
                content={"detail": str(exc), "retry_after": exc.retry_after},
                headers={"Retry-After": str(exc.retry_after)},
            )
        except EngineClosed as exc:
            raise HTTPException(503, str(exc)) from exc
        except DuplicateRollout as exc:
            raise HTTPException(409, str(exc)) from exc
        except (TaskError, ValueError) as exc:
            raise HTTPException(422, str(exc)) from exc
        return {"rollout_id": rollout_id, "status": "queued"}

    @app.get("/rollouts/{rollout_id}")
    async def status(
        rollout_id: Annotated[str, PathParam(pattern=ROLLOUT_ID_PATTERN)],
    ) -> RolloutStatus:
        return engine.status(rollout_id)

    @app.get("/rollouts/{rollout_id}/trajectory")
    async def trajectory(
        rollout_id: Annotated[str, PathParam(pattern=ROLLOUT_ID_PATTERN)],
    ) -> Any:
        """The rollout's ATIF trajectory (with token ids when the upstream gave them)."""
        found = engine.status(rollout_id)
        if found.status == "unknown":
            raise HTTPException(404, f"rollout {rollout_id!r} is not known (or past retention)")
        if found.finished_at is None or not found.trial_dir:
            raise HTTPException(409, f"rollout {rollout_id!r} is {found.status}; not finished")
        path = Path(found.trial_dir) / "logs" / "agent" / "trajectory.json"
        try:
            async with aiofiles.open(path, encoding="utf-8") as handle:
                return JSONResponse(json.loads(await handle.read()))
        except FileNotFoundError as exc:
            raise HTTPException(404, f"rollout {rollout_id!r} has no trajectory") from exc

    @app.post("/rollouts/cancel")
    async def cancel(
        request: CancelRequest, authorization: Annotated[str | None, Header()] = None
    ) -> dict[str, Any]:
        if request.all and not _authorized(token, authorization):
            raise HTTPException(401, "cancelling all rollouts needs the admin bearer token")
        if request.ids is not None:
            bad = [i for i in request.ids if not re.fullmatch(ROLLOUT_ID_PATTERN, i)]
            if bad:
                raise HTTPException(422, f"invalid rollout ids: {bad[:5]}")
        try:
            dispositions = await engine.cancel(
                ids=request.ids, prefix=request.prefix, all=bool(request.all), wait=False
            )
        except TrialboxError as exc:
            raise HTTPException(500, str(exc)) from exc
        return {"dispositions": dispositions}

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {
            "ok": not engine.closed,
            "live": engine.live_count,
            "waiting": engine.waiting,
            "n_concurrent": engine.n_concurrent,
            "max_queue_depth": engine.max_queue_depth,
        }

    return app
