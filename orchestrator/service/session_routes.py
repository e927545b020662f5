"""Sessions over HTTP (docs/sessions.md, "Over HTTP"): the routes `trialbox serve` answers for
`TrialEngine.open_session` and the calls of the `Session` it returns, so a trainer in another
process drives a task's sandbox a call at a time.

Routes. POST /sessions opens one (201 once ready; 429 with Retry-After when every slot is
held, since sessions and rollouts share the `-n` slots; 409 for a live id); POST
/sessions/{id}/exec runs a command; PUT and GET /sessions/{id}/files move a file's bytes in and
out; POST /sessions/{id}/verify scores it and ends it (200, the status document a finished
rollout has); GET /sessions/{id} is its status document; DELETE /sessions/{id} ends it without
verifying.

The promises: a call on a session that has ended, or a second verify, answers 409 with the
session's document; a command past the session's budget answers 409 too; a relative path, or
one under /tests or /logs/verifier, answers 400; a missing file 404, a file past the cap 413
(an upload past `max_file_bytes` is refused by the body limit before it is read); unknown
fields 422. Once any token is configured, exec, files, verify and delete need one (401): the
admin token, or a tenant's token for sessions whose id starts with its prefix (403 for
another's); opening and reading the status need none, as submitting and reading a rollout do.

`add_session_routes` adds them to the app; `upload_limit` is the body limit of an upload.
"""

from __future__ import annotations

import json
import re
import time
import weakref
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import FastAPI, Header, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, JsonValue, field_validator, model_validator
from starlette.types import Scope

from orchestrator.common.errors import (
    SessionBudgetError,
    SessionClosedError,
    SessionPathError,
    TaskError,
    TrialboxError,
)
from orchestrator.common.ids import ROLLOUT_ID_PATTERN
from orchestrator.gateway.settings import STRICT
from orchestrator.service.auth import Tokens, check_covers
from orchestrator.service.engine import TrialEngine
from orchestrator.service.guards import json_size
from orchestrator.service.rollouts import DuplicateSession, EngineClosed, QueueFull
from orchestrator.service.status import settled_status
from orchestrator.trials.session import DEFAULT_IDLE_TTL_SEC, SessionHandle

SessionId = Annotated[str, PathParam(pattern=ROLLOUT_ID_PATTERN)]
MAX_FILE_BYTES = 16 * 1024 * 1024  # an upload's body and a download's bytes, by default
MAX_IDLE_TTL_SEC = 24 * 3600.0
_UPLOAD = re.compile(r"^/sessions/[^/]+/files$")
_MODE = r"^(0o|0)?[0-7]{1,4}$"


class OpenSessionRequest(BaseModel):
    """POST /sessions: which task, the session's id, what its verifier may know."""

    model_config = STRICT

    session_id: str | None = Field(
        None, pattern=ROLLOUT_ID_PATTERN,
        description="Caller-chosen id (the rollout id grammar); a tenant's prefix first.",
    )  # fmt: skip
    task_id: str | None = Field(None, description="A folder under the server's tasks_dir.")
    task: str | None = Field(None, description="A task folder (under --allow-task-paths).")
    metadata: dict[str, JsonValue] = Field(
        default_factory=dict, description="Given to the sandbox, except `label` (verifier only)."
    )
    idle_ttl_sec: float = Field(
        DEFAULT_IDLE_TTL_SEC, gt=0, le=MAX_IDLE_TTL_SEC,
        description="With no call for this long the session expires.",
    )  # fmt: skip
    fast_path: bool = Field(
        True,
        description="Commands through a command channel where the sandbox has one (stdout "
        "and stderr apart, a few ms a command); false: each command a plain exec.",
    )

    @field_validator("metadata")
    @classmethod
    def _strict_json(cls, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        try:
            json.dumps(value, allow_nan=False)
        except ValueError as exc:
            raise ValueError(f"{exc}: NaN and Infinity are not JSON; give finite numbers") from exc
        return value

    @model_validator(mode="after")
    def _one_task(self) -> OpenSessionRequest:
        if self.task is not None and self.task_id is not None:
            raise ValueError("give task or task_id, not both")
        return self


class ExecRequest(BaseModel):
    """POST /sessions/{id}/exec: a command for `sh -c`, or an argv run as it is."""

    model_config = STRICT

    command: str | None = Field(None, min_length=1)
    argv: list[str] | None = Field(None, min_length=1)
    timeout_sec: float | None = Field(None, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    user: str | None = None

    @model_validator(mode="after")
    def _one_command(self) -> ExecRequest:
        if (self.command is None) == (self.argv is None):
            raise ValueError("give command or argv, exactly one")
        return self


class Refused(Exception):
    """A session call answered with an error status and a JSON body (the session's document
    beside the detail), not FastAPI's `{"detail": ...}` alone."""

    def __init__(self, status_code: int, content: dict[str, Any]) -> None:
        super().__init__(content.get("detail"))
        self.status_code = status_code
        self.content = content


async def _refused(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Refused)
    return JSONResponse(exc.content, status_code=exc.status_code)


def upload_limit(max_file_bytes: int) -> Any:
    """The body limit of `PUT /sessions/{id}/files` (the other routes keep the app's)."""

    def limit_for(scope: Scope) -> int | None:
        if scope.get("method") == "PUT" and _UPLOAD.match(scope.get("path", "")):
            return max_file_bytes
        return None

    return limit_for


def _iso(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).isoformat()


def add_session_routes(
    app: FastAPI,
    engine: TrialEngine,
    *,
    tokens: Tokens,
    task_paths: bool,
    max_metadata_bytes: int,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> None:
    """Add the session routes (the module's docstring) to `app`, serving `engine`'s sessions.
    `task_paths`: a session may name a task folder by path; `max_file_bytes`: the most an
    upload or a download carries (install `upload_limit` as the upload's body limit)."""
    app.add_exception_handler(Refused, _refused)
    last_call: weakref.WeakKeyDictionary[SessionHandle, float] = weakref.WeakKeyDictionary()

    def expires_at(session: SessionHandle) -> str | None:
        """When the session expires unless a call comes first (None: it has ended)."""
        if session.status != "ready" or session.idle_ttl_sec is None:
            return None
        return _iso(last_call.get(session, time.time()) + session.idle_ttl_sec)

    def document(session: SessionHandle) -> dict[str, Any]:
        ended = session.status in ("closed", "expired")
        result = settled_status(session.session_id, session.result) if ended else None
        return {
            "session_id": session.session_id,
            "status": session.status,
            "workdir": session.workdir,
            "user": session.user,
            "expires_at": expires_at(session),
            "remaining_sec": 0.0 if ended else round(session.remaining_sec, 3),
            "instruction": session.instruction,
            "trial_dir": str(session.trial_dir),
            "result": None if result is None else result.model_dump(mode="json"),
        }

    def found(session_id: str) -> SessionHandle:
        session = engine.session(session_id)
        if session is None:
            raise HTTPException(404, f"session {session_id!r} is not known (or past retention)")
        return session

    def reached(session_id: str, authorization: str | None, doing: str) -> SessionHandle:
        """The session a guarded call names: the caller's token first, then the session."""
        check_covers(tokens.caller(authorization, f"{doing} a session"), session_id)
        return found(session_id)

    def refusal(session: SessionHandle, status_code: int, exc: BaseException) -> Refused:
        """The answer to a call the session's state refuses: the detail, the error's type
        (the client raises the same) and the session's document."""
        content = {"detail": str(exc), "error_type": type(exc).__name__}
        return Refused(status_code, {**content, **document(session)})

    async def run(session: SessionHandle, call: Any, *, cut_is_too_large: bool = False) -> Any:
        """Await a session call, answering its refusals as the module's docstring says
        (`cut_is_too_large`: a ValueError is a file past its cap, 413)."""
        try:
            return await call
        except (SessionClosedError, SessionBudgetError) as exc:
            raise refusal(session, 409, exc) from exc
        except SessionPathError as exc:
            raise Refused(400, {"detail": str(exc), "error_type": type(exc).__name__}) from exc
        except FileNotFoundError as exc:
            raise Refused(404, {"detail": str(exc), "error_type": type(exc).__name__}) from exc
        except ValueError as exc:
            over = cut_is_too_large or type(exc).__name__ == "SessionLimitError"
            content = {"detail": str(exc), "error_type": type(exc).__name__}
            raise Refused(413 if over else 422, content) from exc
        except TrialboxError as exc:  # the sandbox failed the call: the session has ended
            refused = refusal(session, 502, exc)
            refused.content["error_category"] = exc.category
            raise refused from exc
        finally:
            last_call[session] = time.time()

    @app.post("/sessions", status_code=201)
    async def open_session(request: OpenSessionRequest) -> Any:
        if request.task is not None and not task_paths:
            raise HTTPException(
                422, "this server takes task_id (dataset mode) or its template task, not task paths"
            )
        size = json_size(request.metadata)
        if size > max_metadata_bytes:
            raise HTTPException(
                413, f"metadata is {size} bytes of JSON; the limit is {max_metadata_bytes} bytes"
            )
        try:
            session = await engine.open_session(
                task_id=request.task_id, task=request.task, session_id=request.session_id,
                metadata=request.metadata, idle_ttl_sec=request.idle_ttl_sec,
                fast_path=request.fast_path,
            )  # fmt: skip
        except QueueFull as exc:
            return JSONResponse(
                {"detail": str(exc), "retry_after": exc.retry_after}, status_code=429,
                headers={"Retry-After": str(exc.retry_after)},
            )  # fmt: skip
        except DuplicateSession as exc:
            live = engine.session(request.session_id or "")
            content = {"detail": str(exc)}
            if live is not None and live.status in ("ready", "verifying"):
                content = {**document(live), **content}
            return JSONResponse(content, status_code=409)
        except EngineClosed as exc:
            raise HTTPException(503, str(exc)) from exc
        except NotImplementedError as exc:
            raise HTTPException(501, str(exc)) from exc
        except (TaskError, ValueError) as exc:
            raise HTTPException(422, str(exc)) from exc
        except TrialboxError as exc:  # it could not open (a build, the sandbox, a healthcheck)
            content = {"detail": str(exc), "error_category": exc.category}
            failed = engine.session(request.session_id or "")
            if failed is not None:
                content = {**document(failed), **content}
            return JSONResponse(content, status_code=502)
        last_call[session] = time.time()
        return {
            "session_id": session.session_id,
            "status": session.status,
            "workdir": session.workdir,
            "user": session.user,
            "expires_at": expires_at(session),
        }

    @app.get("/sessions/{session_id}")
    async def session_status(session_id: SessionId) -> Any:
        if engine.session_opening(session_id):
            return {"session_id": session_id, "status": "opening"}
        return document(found(session_id))

    @app.post("/sessions/{session_id}/exec")
    async def exec_command(
        session_id: SessionId,
        request: ExecRequest,
        authorization: Annotated[str | None, Header()] = None,
    ) -> Any:
        session = reached(session_id, authorization, "running a command in")
        done = await run(
            session,
            session.exec(
                request.command, argv=request.argv, timeout_sec=request.timeout_sec,
                env=request.env, cwd=request.cwd, user=request.user,
            ),
        )  # fmt: skip
        # Serialized by pydantic-core at once: a megabyte of output costs ~2 ms, not ~7.
        return Response(done.model_dump_json(), media_type="application/json")

    @app.put("/sessions/{session_id}/files", status_code=204)
    async def put_file(
        session_id: SessionId,
        request: Request,
        path: Annotated[str, Query(min_length=1, description="an absolute path")],
        mode: Annotated[str, Query(pattern=_MODE, description="octal, as 644 or 0o755")] = "644",
        authorization: Annotated[str | None, Header()] = None,
    ) -> Response:
        session = reached(session_id, authorization, "writing a file in")
        data = await request.body()
        digits = mode.removeprefix("0o")
        await run(session, session.write_file(path, data, int(digits, 8)), cut_is_too_large=True)
        return Response(status_code=204)

    @app.get("/sessions/{session_id}/files")
    async def get_file(
        session_id: SessionId,
        path: Annotated[str, Query(min_length=1, description="an absolute path")],
        max_bytes: Annotated[int | None, Query(ge=0)] = None,
        authorization: Annotated[str | None, Header()] = None,
    ) -> Response:
        session = reached(session_id, authorization, "reading a file in")
        cap = max_file_bytes if max_bytes is None else min(max_bytes, max_file_bytes)
        data = await run(session, session.read_file(path, max_bytes=cap), cut_is_too_large=True)
        return Response(data, media_type="application/octet-stream")

    @app.post("/sessions/{session_id}/verify")
    async def verify(
        session_id: SessionId, authorization: Annotated[str | None, Header()] = None
    ) -> Any:
        session = reached(session_id, authorization, "verifying")
        result = await run(session, session.verify())
        status = settled_status(session_id, result)
        return {"session_id": session_id, **status.model_dump(mode="json")}

    @app.delete("/sessions/{session_id}")
    async def close(
        session_id: SessionId, authorization: Annotated[str | None, Header()] = None
    ) -> Any:
        session = reached(session_id, authorization, "closing")
        if session.status != "ready":
            raise refusal(
                session, 409, SessionClosedError(f"session {session_id} is {session.status}")
            )
        await run(session, session.close())
        return document(session)


__all__ = ["MAX_FILE_BYTES", "ExecRequest", "OpenSessionRequest", "add_session_routes"]
