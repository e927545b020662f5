"""A client of `trialbox serve`'s sessions (docs/sessions.md, "The client"), so a trainer in
another process drives a task's sandbox without writing HTTP by hand.

`TrialboxClient` (async, on httpx) opens sessions; each is a `RemoteSession` with the methods
of the Python `Session`: `exec`, `write_file`, `read_file`, `verify`, `close`, `status`, and
use as an async context manager (closed without verifying unless verified first). The
server's refusals come back as the exceptions the Python API raises: `SessionClosedError` and
`SessionBudgetError` (409), `SessionPathError` (400), `FileNotFoundError` (a missing file),
`ValueError` (413, 422), `NoFreeSlot` (a `QueueFull`, 429, with `retry_after`),
`DuplicateSession` (409 on open), `EngineClosed` (503), `SandboxError` (the sandbox failed a
call and the session ended); anything else is a `TrialboxHTTPError` with the status code.

`SyncTrialboxClient` and `SyncRemoteSession` are the same for code without an event loop (a
private loop runs each call). `SessionDocument` is what `status()` reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict

from orchestrator.common.errors import (
    SandboxError,
    SessionBudgetError,
    SessionClosedError,
    SessionPathError,
    TrialboxError,
)
from orchestrator.service.rollouts import (
    DuplicateSession,
    EngineClosed,
    NoFreeSlot,
    RolloutStatus,
)
from orchestrator.trials.session import SessionExecResult

DEFAULT_TIMEOUT_SEC = 60.0  # a quick call's; opening, exec and verify wait as long as they take
CONNECT_TIMEOUT_SEC = 10.0
_LONG = httpx.Timeout(None, connect=CONNECT_TIMEOUT_SEC)


class TrialboxHTTPError(TrialboxError):
    """An answer of the server the client has no closer exception for (401, 403, 404, ...)."""

    def __init__(self, status_code: int, detail: str, body: Any = None) -> None:
        super().__init__(f"{status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail
        self.body = body


class SessionDocument(BaseModel):
    """What `GET /sessions/{id}` answers: the status (ready, verifying, closed, expired), the
    defaults commands run with, what is left, the task's instruction, and once the session has
    ended its outcome (`result`, the status document of a finished rollout)."""

    model_config = ConfigDict(extra="ignore")

    session_id: str
    status: str
    workdir: str | None = None
    user: str = ""
    expires_at: str | None = None
    remaining_sec: float | None = None
    instruction: str | None = None
    trial_dir: str | None = None
    result: RolloutStatus | None = None


def _raise_for(response: httpx.Response) -> None:
    """The exception the Python API raises for this refusal (nothing for a success)."""
    if response.is_success:
        return
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    detail = body.get("detail") if isinstance(body, dict) else None
    if not isinstance(detail, str):
        detail = response.text if detail is None else str(detail)
    kind = body.get("error_type") if isinstance(body, dict) else None
    code = response.status_code
    if code == 429:
        raise NoFreeSlot(int(response.headers.get("Retry-After", "1")), detail)
    if code == 409 and kind == "SessionBudgetError":
        raise SessionBudgetError(detail)
    if code == 409 and kind is not None:
        raise SessionClosedError(detail)
    if code == 409:
        raise DuplicateSession(detail)
    if code == 400 and kind == "SessionPathError":
        raise SessionPathError(detail)
    if code == 404 and kind == "FileNotFoundError":
        raise FileNotFoundError(detail)
    if code in (413, 422):
        raise ValueError(detail)
    if code == 502 and kind is not None:
        raise SandboxError(detail)
    if code == 503:
        raise EngineClosed(detail)
    raise TrialboxHTTPError(code, detail, body)


class RemoteSession:
    """A session on a `trialbox serve`, as `TrialboxClient.open_session` opened it (or
    `TrialboxClient.session` found it). The same calls as the Python `Session`."""

    def __init__(self, client: TrialboxClient, opened: Mapping[str, Any]) -> None:
        self._client = client
        self.session_id: str = opened["session_id"]
        self.workdir: str | None = opened.get("workdir")
        self.user: str = opened.get("user") or ""
        self.expires_at: str | None = opened.get("expires_at")
        self.last_status: str = opened.get("status", "ready")
        self.result: RolloutStatus | None = None  # once verified or closed

    @property
    def _path(self) -> str:
        return f"/sessions/{self.session_id}"

    async def exec(
        self,
        command: str | None = None,
        *,
        argv: list[str] | None = None,
        timeout_sec: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
    ) -> SessionExecResult:
        """Run `command` with `sh -c`, or `argv` as it is (the Python `Session.exec`)."""
        if (command is None) == (argv is None):
            raise ValueError("exec takes a command or an argv, not both and not neither")
        body: dict[str, Any] = {"command": command} if argv is None else {"argv": argv}
        extra = {"timeout_sec": timeout_sec, "cwd": cwd, "user": user}
        body.update({k: v for k, v in extra.items() if v is not None})
        if env:
            body["env"] = dict(env)
        response = await self._client.request("POST", f"{self._path}/exec", json=body, long=True)
        return SessionExecResult.model_validate_json(response.content)

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write `data` to the absolute `path` in the sandbox, with `mode`."""
        await self._client.request(
            "PUT", f"{self._path}/files", params={"path": path, "mode": f"{mode:o}"},
            content=bytes(data), long=True,
        )  # fmt: skip

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """The bytes of the regular file at the absolute `path` (at most `max_bytes`, and the
        server's cap): `FileNotFoundError` when missing, `ValueError` when longer."""
        params: dict[str, Any] = {"path": path}
        if max_bytes is not None:
            params["max_bytes"] = max_bytes
        response = await self._client.request(
            "GET", f"{self._path}/files", params=params, long=True
        )
        return response.content

    async def verify(self) -> RolloutStatus:
        """Score the sandbox with the task's verifier and end the session: the status
        document of a finished rollout (status, reward, rewards, error and category)."""
        response = await self._client.request("POST", f"{self._path}/verify", long=True)
        self.result = RolloutStatus.model_validate(response.json())
        self.last_status = "closed"
        return self.result

    async def close(self) -> RolloutStatus | None:
        """End the session without verifying (its result `cancelled`). Closing a session that
        has already ended returns its outcome again instead of refusing."""
        try:
            response = await self._client.request("DELETE", self._path, long=True)
        except SessionClosedError:
            return (await self.status()).result
        document = SessionDocument.model_validate(response.json())
        self.last_status, self.result = document.status, document.result
        return self.result

    async def status(self) -> SessionDocument:
        """The session's document as the server has it now (no token needed)."""
        response = await self._client.request("GET", self._path)
        document = SessionDocument.model_validate(response.json())
        self.last_status = document.status
        if document.result is not None:
            self.result = document.result
        return document

    async def __aenter__(self) -> RemoteSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.result is None:
            await self.close()


class TrialboxClient:
    """The sessions of one `trialbox serve` at `base_url`. `token`: the bearer token calls
    send (a tenant's, for sessions whose id starts with its prefix, or the admin's).
    `http`: an httpx client of your own (its base URL is used; it is not closed here)."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        timeout_sec: float = DEFAULT_TIMEOUT_SEC,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._owned = http is None
        self.http = http or httpx.AsyncClient(
            base_url=base_url, timeout=httpx.Timeout(timeout_sec, connect=CONNECT_TIMEOUT_SEC)
        )
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def request(
        self, method: str, path: str, *, long: bool = False, **kwargs: Any
    ) -> httpx.Response:
        """One call; a refusal raised as the Python API's exception. `long`: no read timeout
        (a command, an upload, a verifier run as long as it takes)."""
        if long:
            kwargs["timeout"] = _LONG
        response = await self.http.request(method, path, headers=self._headers, **kwargs)
        _raise_for(response)
        return response

    async def open_session(
        self,
        *,
        task_id: str | None = None,
        task: str | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idle_ttl_sec: float | None = None,
        fast_path: bool = True,
    ) -> RemoteSession:
        """Open a session (returns once its sandbox is ready). `NoFreeSlot` (with
        `retry_after`) when the server's slots are all held; `DuplicateSession` for a live id.
        `fast_path`: commands through a command channel where the sandbox has one."""
        given = {"task_id": task_id, "task": task, "session_id": session_id,
                 "idle_ttl_sec": idle_ttl_sec}  # fmt: skip
        body: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if not fast_path:
            body["fast_path"] = False
        if metadata:
            body["metadata"] = dict(metadata)
        response = await self.request("POST", "/sessions", json=body, long=True)
        return RemoteSession(self, response.json())

    async def session(self, session_id: str) -> RemoteSession:
        """A session opened before (by this process or another), found by its id."""
        response = await self.request("GET", f"/sessions/{session_id}")
        return RemoteSession(self, response.json())

    async def aclose(self) -> None:
        if self._owned:
            await self.http.aclose()

    async def __aenter__(self) -> TrialboxClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class SyncRemoteSession:
    """`RemoteSession` for code without an event loop (made by `SyncTrialboxClient`)."""

    def __init__(self, runner: asyncio.Runner, session: RemoteSession) -> None:
        self._runner = runner
        self.remote = session

    @property
    def session_id(self) -> str:
        return self.remote.session_id

    def exec(self, command: str | None = None, **kwargs: Any) -> SessionExecResult:
        return self._runner.run(self.remote.exec(command, **kwargs))

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._runner.run(self.remote.write_file(path, data, mode))

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        return self._runner.run(self.remote.read_file(path, max_bytes))

    def verify(self) -> RolloutStatus:
        return self._runner.run(self.remote.verify())

    def close(self) -> RolloutStatus | None:
        return self._runner.run(self.remote.close())

    def status(self) -> SessionDocument:
        return self._runner.run(self.remote.status())

    def __enter__(self) -> SyncRemoteSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.remote.result is None:
            self.close()


class SyncTrialboxClient:
    """`TrialboxClient` for code without an event loop: each call runs on a loop of its own
    (so not from inside a running loop; use `TrialboxClient` there). Close it when done."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", **kwargs: Any) -> None:
        self._runner = asyncio.Runner()
        self._base_url, self._kwargs = base_url, kwargs
        self.client: TrialboxClient = self._runner.run(self._make())

    async def _make(self) -> TrialboxClient:
        return TrialboxClient(self._base_url, **self._kwargs)  # made on the runner's loop

    def open_session(self, **kwargs: Any) -> SyncRemoteSession:
        return SyncRemoteSession(self._runner, self._runner.run(self.client.open_session(**kwargs)))

    def session(self, session_id: str) -> SyncRemoteSession:
        return SyncRemoteSession(self._runner, self._runner.run(self.client.session(session_id)))

    def close(self) -> None:
        try:
            self._runner.run(self.client.aclose())
        finally:
            self._runner.close()

    def __enter__(self) -> SyncTrialboxClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = [
    "RemoteSession",
    "SessionDocument",
    "SyncRemoteSession",
    "SyncTrialboxClient",
    "TrialboxClient",
    "TrialboxHTTPError",
]
