"""`trialbox serve`: the rollout engine over HTTP (FastAPI; install the `serve` extra).

Routes. POST /rollouts answers 202 or 429 with Retry-After; GET /rollouts/{id} is the status
document (with model usage), and with `?wait=N` (0 < N <= 25) a long poll; GET
/rollouts/{id}/trajectory the finished rollout's ATIF trajectory; POST /rollouts/cancel takes
exactly one selector; GET /healthz. For clients written against the other spelling, POST
/rollout, GET /rollout/{id}/status and POST /rollout/cancel are the same routes. The session
routes (/sessions...: a task's sandbox driven a call at a time) are `session_routes.py`'s. On
shutdown the server stops accepting, drains for a bounded time, then host-aborts what is left.
On start it removes the sandboxes a dead process left on the same jobs folder (`reclaim`).

The promises:

- Sizes. A request body over `max_body_bytes` (1 MiB) is answered 413 naming the limit: at
  once when its Content-Length says so (nothing of it is read), else as soon as the bytes
  read pass the limit (a chunked body is counted as it streams). A rollout whose `metadata`
  is over `max_metadata_bytes` (256 KiB) as compact UTF-8 JSON is answered 413 naming it.
- Echoes. A 422 shows each refused input cut to 256 characters of its JSON (with a note), at
  most 20 errors (echo.py). Connection limits (header time, idle, max connections) are the
  protocol's, not the app's: http_protocol.py.
- Submit is idempotent per rollout id. An id in flight answers 409 with its live status; an
  id that finished within retention answers 200 with its status document and is not run
  again; an id tombstoned (below) answers 409, its document reading `cancelled`.
- Tombstones. A cancel by ids that names an id the engine does not know (not live, not
  finished) answers `not_found` and tombstones it for the retention window (at most
  `max_tombstones` ids, the oldest forgotten first): its late submit is refused with 409
  and it reads `cancelled`. `abort(scope)` tombstones its scope in the same way (see abort.py).
- Long poll. `?wait=N` answers as soon as the status differs from the one the request found,
  or after N seconds with the status then; a settled outcome is answered at once. Over 25
  is 422; past the engine's `max_long_polls` long polls at once, 429 with Retry-After: 1.
- Cancel authorization. Tokens are bearer tokens (`Authorization: Bearer TOKEN`), compared
  in constant time. With no admin token and no tenant tokens configured, every selector
  (ids, prefix, session_id, all) is open, as before. As soon as any token is configured,
  every cancel needs one (no header, or a token that is none of them: 401):
  * the admin token (`TRIALBOX_ADMIN_TOKEN`) may use every selector;
  * a tenant token (`--tenant-token PREFIX=TOKEN`, `TRIALBOX_TENANT_TOKENS`) covers the
    rollout ids that start with its PREFIX: `ids` all within it (any outside: 403, nothing
    cancelled, and only ids within it are ever tombstoned); a `prefix` that starts with its
    PREFIX (else 403); a `session_id`, which cancels only that session's rollouts within its
    PREFIX; never `all` (403).
  Submit and status need no token.

`create_app` builds the FastAPI app.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import aiofiles
from fastapi import FastAPI, Header, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from orchestrator.common.errors import TaskError, TrialboxError
from orchestrator.common.ids import ROLLOUT_ID_PATTERN
from orchestrator.sandbox.reclaim import reclaim_dead
from orchestrator.service.auth import Tokens, scope_of
from orchestrator.service.echo import shown, validation_errors
from orchestrator.service.engine import TrialEngine
from orchestrator.service.fast_status import FastStatus
from orchestrator.service.guards import BodyLimit, json_size, url_under
from orchestrator.service.prewarm import PrewarmRow, prewarm
from orchestrator.service.rollouts import (
    MAX_BODY_BYTES,
    MAX_METADATA_BYTES,
    MAX_WAIT_SEC,
    CancelRequest,
    DuplicateRollout,
    EngineClosed,
    QueueFull,
    RolloutFinished,
    RolloutRequest,
    RolloutStatus,
    RolloutTombstoned,
    TooManyLongPolls,
)
from orchestrator.service.session_routes import MAX_FILE_BYTES, add_session_routes, upload_limit
from orchestrator.tasks.task import Task

log = logging.getLogger(__name__)

RolloutId = Annotated[str, PathParam(pattern=ROLLOUT_ID_PATTERN)]


# -- the app ---------------------------------------------------------------------------------


def _log_prewarmed(row: PrewarmRow) -> None:
    """The server's log says, task by task, what prewarm did (a failure with its reason)."""
    for line in row.task_lines():
        log.log(logging.WARNING if row.status == "failed" else logging.INFO, "prewarm: %s", line)


def _document(status: RolloutStatus, **extra: Any) -> dict[str, Any]:
    return {**extra, **status.model_dump(mode="json")}


async def _invalid(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse(validation_errors(exc.errors()), status_code=422)


def create_app(
    engine: TrialEngine,
    *,
    admin_token: str | None = None,
    tenant_tokens: Mapping[str, str] | None = None,
    prewarm_tasks: Sequence[Task | str | Path] = (),
    drain_sec: float = 30.0,
    agents: Collection[str] = (),
    task_paths: bool = False,
    model_urls: Collection[str] = (),
    max_body_bytes: int = MAX_BODY_BYTES,
    max_metadata_bytes: int = MAX_METADATA_BYTES,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> FastAPI:
    """An app serving `engine`.

    `admin_token` (stripped) and `tenant_tokens` (prefix -> token) guard cancel as the module
    docstring says; a token shared by two holders, or a prefix that cannot start a rollout
    id, is a ValueError. A request may pick the engine's default agent or one listed in
    `agents`, and a task folder by path only when `task_paths` is set: otherwise a client
    could make the server read any host path (a task folder, a workflow file) into a sandbox.
    A request may route its model calls to another upstream only under a prefix in
    `model_urls`: the gateway sends the host's model key there. Bodies over
    `max_body_bytes` and metadata over `max_metadata_bytes` (as JSON) are answered 413; a
    session's file upload or download over `max_file_bytes` too (session_routes.py).
    """
    if max_body_bytes < 1 or max_metadata_bytes < 1 or max_file_bytes < 1:
        raise ValueError("max_body_bytes, max_metadata_bytes and max_file_bytes must be at least 1")
    tokens = Tokens(admin_token, tenant_tokens or {})
    allowed_agents = {engine.default_agent, *agents}

    def check_request(request: RolloutRequest) -> None:
        if request.agent is not None and request.agent not in allowed_agents:
            raise HTTPException(
                422,
                f"agent {shown(repr(request.agent))} is not offered here; "
                f"one of {sorted(allowed_agents)}",
            )
        if request.task is not None and not task_paths:
            raise HTTPException(
                422, "this server takes task_id (dataset mode) or its template task, not task paths"
            )
        url = request.model.base_url if request.model is not None else None
        if url is not None and not any(url_under(url, prefix) for prefix in model_urls):
            raise HTTPException(
                422,
                f"model.base_url {shown(repr(url))} is not allowed here (the server sends its "
                "model key there); start the server with --allow-model-url PREFIX",
            )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # A predecessor on this jobs folder killed with SIGKILL left its sandboxes running.
        await reclaim_dead(engine.executor.leftovers, engine.config.jobs_dir)
        if prewarm_tasks:
            rows = await prewarm(
                prewarm_tasks, base_image_map=engine.config.base_image_map,
                backend=engine.executor.images, force_build=engine.config.force_build,
                on_done=_log_prewarmed,
            )  # fmt: skip
            log.info("prewarmed %d image(s)", len(rows))
        yield
        await engine.shutdown(drain_sec)

    app = FastAPI(title="trialbox", lifespan=lifespan)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes, limit_for=upload_limit(max_file_bytes))
    app.add_middleware(FastStatus, engine=engine)  # ahead of the routing: fast_status.py
    app.add_exception_handler(RequestValidationError, _invalid)

    @app.post("/rollouts", status_code=202)
    @app.post("/rollout", status_code=202)
    async def submit(request: RolloutRequest) -> Any:
        check_request(request)
        size = json_size(request.metadata)
        if size > max_metadata_bytes:
            raise HTTPException(
                413,
                f"metadata is {size} bytes of JSON; the limit is {max_metadata_bytes} bytes",
            )
        try:
            rollout_id = await engine.submit(request)
        except QueueFull as exc:
            return JSONResponse(
                status_code=429,
                content={"detail": str(exc), "retry_after": exc.retry_after},
                headers={"Retry-After": str(exc.retry_after)},
            )
        except RolloutFinished as exc:  # a retry: its outcome, and it does not run again
            assert exc.status is not None
            return JSONResponse(_document(exc.status), status_code=200)
        except (DuplicateRollout, RolloutTombstoned) as exc:
            content = {"detail": str(exc)}
            if exc.status is not None:
                content = _document(exc.status, detail=str(exc))
            return JSONResponse(content, status_code=409)
        except EngineClosed as exc:
            raise HTTPException(503, str(exc)) from exc
        except (TaskError, ValueError) as exc:
            raise HTTPException(422, str(exc)) from exc
        return {"rollout_id": rollout_id, "status": "queued"}

    @app.get("/rollouts/{rollout_id}")
    @app.get("/rollout/{rollout_id}/status")
    async def status(
        rollout_id: RolloutId,
        wait: Annotated[
            float | None,
            Query(
                ge=0,
                le=MAX_WAIT_SEC,
                allow_inf_nan=False,
                description="long poll: answer on a change, or at N s",
            ),
        ] = None,
    ) -> RolloutStatus:
        if not wait:
            return engine.status(rollout_id)
        try:
            return await engine.watch(rollout_id, wait)
        except TooManyLongPolls as exc:
            raise HTTPException(
                429, str(exc), headers={"Retry-After": str(exc.retry_after)}
            ) from exc

    @app.get("/rollouts/{rollout_id}/trajectory")
    async def trajectory(
        rollout_id: RolloutId,
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
    @app.post("/rollout/cancel")
    async def cancel(
        request: CancelRequest, authorization: Annotated[str | None, Header()] = None
    ) -> dict[str, Any]:
        caller = tokens.caller(authorization)
        if request.ids is not None:
            bad = [i for i in request.ids if not re.fullmatch(ROLLOUT_ID_PATTERN, i)]
            if bad:
                raise HTTPException(422, f"invalid rollout ids: {shown(repr(bad[:5]))}")
        within = scope_of(caller, request)
        try:
            dispositions = engine.cancel_nowait(
                ids=request.ids, prefix=request.prefix, all=bool(request.all),
                session_id=request.session_id, within=within,
            )  # fmt: skip
        except TrialboxError as exc:
            raise HTTPException(500, str(exc)) from exc
        return {"dispositions": dispositions}

    add_session_routes(
        app, engine, tokens=tokens, task_paths=task_paths,
        max_metadata_bytes=max_metadata_bytes, max_file_bytes=max_file_bytes,
    )  # fmt: skip

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {
            "ok": not engine.closed,
            "live": engine.live_count,
            "waiting": engine.waiting,
            "sessions": len(engine.sessions),
            "n_concurrent": engine.n_concurrent,
            "max_queue_depth": engine.max_queue_depth,
        }

    return app
