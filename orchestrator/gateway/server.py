"""The model gateway: an OpenAI-compatible endpoint per trial, on a unix socket of its own.

Each trial gets a slot: a socket in a folder that only its sandbox mounts, and a random
token. Requests are checked against the slot's limits, tagged with the rollout (a header
and the body's `user` field, so a trainer's router can attribute them), given the upstream's
key (which therefore never enters the sandbox) and forwarded; streamed answers are passed
through as they arrive and assembled on the side. Every exchange is recorded in the slot.

The upstream client is aiohttp's rather than httpx: the gateway sits on every model call of
every agent, and aiohttp's client adds a fraction of httpx's per-request overhead
(`benchmarks/gateway_overhead.py`).

`Gateway` is the server; streams are assembled by `stream.ChunkAssembler`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import shutil
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from orchestrator.common.offload import run_blocking
from orchestrator.gateway.record import Exchange
from orchestrator.gateway.sampling import agent_sampling_problem
from orchestrator.gateway.settings import ModelConfig
from orchestrator.gateway.slot import Slot
from orchestrator.gateway.stream import ChunkAssembler
from orchestrator.gateway.strict_json import NonFiniteNumber, loads_strict

CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
ROLLOUT_HEADER = "X-Trialbox-Rollout"
RAW_CAP = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024  # long contexts and images: aiohttp's default is 1 MiB
# Never forwarded from the agent: the connection's own, and what the gateway sets itself.
_OWN_HEADERS = {
    "host", "authorization", "content-length", "connection", "keep-alive",
    "transfer-encoding", "te", "upgrade", "proxy-authorization", "accept-encoding",
    ROLLOUT_HEADER.lower(),
}  # fmt: skip
CLOSE_WITHIN_SEC = 2.0


def _error(
    status: int, message: str, kind: str, code: str | None = None, param: str | None = None
) -> web.Response:
    """OpenAI's error body; `param` names the request field at fault, as OpenAI's does."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status)


def _large_requests(
    message: Any, payload: Any, protocol: Any, writer: Any, task: Any, **_: Any
) -> web.BaseRequest:
    """Requests of a slot: bodies up to MAX_BODY_BYTES (see `web.Server`'s factory)."""
    loop = asyncio.get_running_loop()
    return web.BaseRequest(
        message, payload, protocol, writer, task, loop, client_max_size=MAX_BODY_BYTES
    )


def _tokens(answer: Any) -> tuple[int, int]:
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


class Gateway:
    """Serves the slots of many trials from one event loop. Use as an async context, or
    call `aclose()`; `open_slot` / `close_slot` per trial."""

    def __init__(self) -> None:
        # Unix socket paths are limited to ~108 bytes: keep the root short.
        self.root = Path(tempfile.mkdtemp(prefix="tbgw-", dir="/tmp"))
        self.root.chmod(0o755)
        self._session: aiohttp.ClientSession | None = None
        self._servers: dict[Slot, tuple[asyncio.AbstractServer, web.Server]] = {}

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
            # Answers come back uncompressed (we ask for identity and decode anything else),
            # so the agent always gets plain bytes and the record can read them.
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    # -- slots ---------------------------------------------------------------------------------

    async def open_slot(
        self,
        *,
        trial_id: str,
        rollout_id: str | None,
        model: ModelConfig,
        folder: Path | None = None,
    ) -> Slot:
        """A new slot listening on its own socket in `folder` (a sandbox's own folder, mounted
        in it already), else in a new folder of the gateway's (mount `slot.folder`)."""
        if folder is None:
            folder = self.root / secrets.token_hex(6)
            folder.mkdir(mode=0o755)
        slot = Slot(folder, trial_id=trial_id, rollout_id=rollout_id, model=model)
        handler = web.Server(
            lambda request: self._handle(slot, request), request_factory=_large_requests
        )
        loop = asyncio.get_running_loop()
        server = await loop.create_unix_server(handler, path=str(slot.socket_path))
        slot.socket_path.chmod(0o666)  # whoever the forwarder in the sandbox runs as
        self._servers[slot] = (server, handler)
        return slot

    @property
    def open_slots(self) -> list[Slot]:
        """The slots being served now."""
        return list(self._servers)

    async def close_slot(self, slot: Slot) -> None:
        """Stop serving the slot: in-flight requests are cut, the socket goes, and the record
        gets its `token_drift`. Idempotent.

        The folder stays until `release_slot`: the engine cannot copy files in or out of a
        container whose mount source has vanished, so it goes after the sandbox."""
        slot.closed = True
        entry = self._servers.pop(slot, None)
        if entry is None:
            return
        server, handler = entry
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(handler.shutdown(0.5), CLOSE_WITHIN_SEC)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), CLOSE_WITHIN_SEC)
        slot.socket_path.unlink(missing_ok=True)
        slot.settle()  # every call is in: whether their token ids drifted

    async def release_slot(self, slot: Slot) -> None:
        """Close the slot and remove its folder (once its sandbox is gone)."""
        await self.close_slot(slot)
        shutil.rmtree(slot.folder, ignore_errors=True)

    async def aclose(self) -> None:
        for slot in list(self._servers):
            await self.close_slot(slot)
        if self._session is not None:
            await self._session.close()
            self._session = None
        shutil.rmtree(self.root, ignore_errors=True)

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- requests ------------------------------------------------------------------------------

    async def _handle(self, slot: Slot, request: web.BaseRequest) -> web.StreamResponse:
        if not slot.authorized(request.headers.get("Authorization")):
            return _error(401, "invalid token for this trial's gateway", "invalid_request_error")
        path = request.path.rstrip("/")
        if request.method == "GET" and path == MODELS_PATH:
            model = {"id": slot.model.name, "object": "model", "owned_by": "trialbox"}
            return web.json_response({"object": "list", "data": [model]})
        exchange = Exchange(
            index=slot.next_index(), method=request.method, path=path,
            started_at=datetime.now(UTC), latency_sec=0.0, status_code=0,
        )  # fmt: skip
        started = time.monotonic()
        try:
            return await self._exchange(slot, request, path, exchange)
        except asyncio.CancelledError:
            exchange.error = exchange.error or "cut off: the trial's slot was closed"
            raise
        finally:
            exchange.latency_sec = time.monotonic() - started
            slot.add(exchange, admitted=exchange.admitted)

    async def _exchange(
        self, slot: Slot, request: web.BaseRequest, path: str, exchange: Exchange
    ) -> web.StreamResponse:
        refused = "closed" if slot.closed else slot.refusal()
        if refused is not None:
            exchange.limit = refused
            exchange.status_code = 403
            why = "the agent's phase is over" if refused == "closed" else slot.describe(refused)
            exchange.error = why
            return _error(403, f"trialbox: {why}", "trialbox_limit", refused)
        slot.admit()  # counted now: calls whose bodies are still arriving cannot overshoot
        exchange.admitted = True
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            exchange.status_code, exchange.error = 413, f"request body too large: {exc.text}"
            return _error(413, exchange.error, "invalid_request_error")
        if request.method == "POST" and path == CHAT_PATH:
            return await self._chat(slot, request, raw, exchange)
        return await self._passthrough(slot, request, path, raw, exchange)

    def _upstream_headers(
        self, slot: Slot, agent_headers: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        headers = {k: v for k, v in (agent_headers or {}).items() if k.lower() not in _OWN_HEADERS}
        headers[ROLLOUT_HEADER] = slot.tag
        headers["Accept-Encoding"] = "identity"
        if slot.model.api_key is not None:
            headers["Authorization"] = f"Bearer {slot.model.api_key.get_secret_value()}"
        return headers

    def _timeout(self, slot: Slot) -> aiohttp.ClientTimeout:
        total = slot.model.upstream_timeout_sec
        remaining = slot.remaining_sec()
        if remaining is not None:
            total = max(1.0, min(total, remaining))
        return aiohttp.ClientTimeout(total=total)

    def _prepared(self, slot: Slot, body: dict[str, Any]) -> dict[str, Any]:
        """The body as it goes upstream: the trial's model, its sampling defaults, the
        rollout tag, and the asks for usage and token data the record needs."""
        model = slot.model
        body = {**model.sampling.as_body(), **body, "model": model.name, "user": slot.tag}
        if body.get("stream"):
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        if model.request_token_ids:
            body.setdefault("logprobs", True)
            body.setdefault("return_token_ids", True)
        return body

    async def _chat(
        self, slot: Slot, request: web.BaseRequest, raw: bytes, exchange: Exchange
    ) -> web.StreamResponse:
        try:
            # A long context is megabytes of JSON: parsed off the loop every trial shares.
            body = (
                await run_blocking(loads_strict, raw or b"{}")
                if len(raw) > 1 << 20
                else loads_strict(raw or b"{}")
            )
            if not isinstance(body, dict):
                raise ValueError("the body is not a JSON object")
        except ValueError as exc:
            param = exc.path or None if isinstance(exc, NonFiniteNumber) else None
            exchange.status_code, exchange.error = 400, f"bad request body: {exc}"
            return _error(400, exchange.error, "invalid_request_error", param=param)
        problem = agent_sampling_problem(body)
        if problem is not None:  # the checks the trainer's own sampling defaults pass
            param, why = problem
            exchange.status_code, exchange.error = 400, f"bad request body: {why}"
            return _error(400, exchange.error, "invalid_request_error", param=param)
        body = self._prepared(slot, body)
        exchange.request = body
        exchange.streamed = bool(body.get("stream"))
        url = f"{slot.model.base_url}/chat/completions"
        try:
            async with self._client().post(
                url, json=body, headers=self._upstream_headers(slot),
                timeout=self._timeout(slot),
            ) as upstream:  # fmt: skip
                if exchange.streamed and upstream.status == 200:
                    return await self._relay_stream(request, upstream, exchange)
                data = await upstream.read()
                exchange.status_code = upstream.status
                self._keep_answer(exchange, data)
                if upstream.status >= 400:
                    exchange.error = f"upstream answered {upstream.status}"
                ctype = upstream.headers.get("Content-Type", "application/json")
                return web.Response(body=data, status=upstream.status, content_type=None,
                                    headers={"Content-Type": ctype})  # fmt: skip
        except (aiohttp.ClientError, TimeoutError) as exc:
            return self._unreachable(exchange, exc)

    async def _relay_stream(
        self, request: web.BaseRequest, upstream: aiohttp.ClientResponse, exchange: Exchange
    ) -> web.StreamResponse:
        out = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await out.prepare(request)
        assembler = ChunkAssembler()
        exchange.status_code = 200
        try:
            async for data in upstream.content.iter_any():
                assembler.feed(data)
                await out.write(data)
            await out.write_eof()
        except (aiohttp.ClientError, TimeoutError, ConnectionResetError) as exc:
            exchange.error = f"the stream broke off: {type(exc).__name__}: {exc}"
            # The agent's stream is cut too, not ended as if it were complete: the connection
            # goes without the chunked terminator, so its client sees a broken stream.
            if request.transport is not None:
                request.transport.abort()
        finally:
            exchange.response = assembler.result()
            exchange.prompt_tokens, exchange.completion_tokens = _tokens(exchange.response)
        return out

    async def _passthrough(
        self, slot: Slot, request: web.BaseRequest, path: str, raw: bytes, exchange: Exchange
    ) -> web.StreamResponse:
        """Other paths (/v1/responses, /v1/messages, ...) go upstream as they are, recorded
        raw: the gateway adds the key and the tag and keeps the limits, nothing more."""
        exchange.request = raw[:RAW_CAP].decode("utf-8", errors="replace")
        suffix = path.removeprefix("/v1")
        url = f"{slot.model.base_url}{suffix}"
        try:
            async with self._client().request(
                request.method, url, data=raw, params=request.query,
                headers=self._upstream_headers(slot, request.headers),
                timeout=self._timeout(slot),
            ) as upstream:  # fmt: skip
                data = await upstream.read()
                exchange.status_code = upstream.status
                self._keep_answer(exchange, data)
                ctype = upstream.headers.get("Content-Type", "application/octet-stream")
                return web.Response(body=data, status=upstream.status,
                                    headers={"Content-Type": ctype})  # fmt: skip
        except (aiohttp.ClientError, TimeoutError) as exc:
            return self._unreachable(exchange, exc)

    @staticmethod
    def _keep_answer(exchange: Exchange, data: bytes) -> None:
        try:
            exchange.response = json.loads(data)
        except ValueError:
            exchange.raw_response = data[:RAW_CAP].decode("utf-8", errors="replace")
            return
        exchange.prompt_tokens, exchange.completion_tokens = _tokens(exchange.response)

    @staticmethod
    def _unreachable(exchange: Exchange, exc: BaseException) -> web.Response:
        timed_out = isinstance(exc, TimeoutError)
        exchange.status_code = 504 if timed_out else 502
        what = "did not answer in time" if timed_out else f"failed: {type(exc).__name__}: {exc}"
        exchange.error = f"the upstream model {what}"
        return _error(exchange.status_code, f"trialbox gateway: {exchange.error}", "upstream_error")
