"""A stand-in for an OpenAI-compatible inference server (vLLM, SGLang, a hosted API).

No model service is reachable where the tests run, yet the model gateway must be tested against
something that speaks the protocol the way real servers do: SSE chunks with split deltas, tool
call arguments in pieces, a usage chunk, vLLM's token ids and logprobs, error statuses, slow
and hung answers. This server plays a scripted policy so tests decide every answer, and records
every request so tests can check what the upstream saw (its key, the rollout tags).

Tokenization is deliberately trivial and deterministic so tests can predict ids: one token per
whitespace-separated word, its id a stable hash of the word (`token_id`), its logprob derived
from the id (`token_logprob`). See `prompt_token_ids`, `completion_token_ids`, `usage_of`.

Three ways to run it, all bound to 127.0.0.1 on a free port unless told otherwise:
`async with StandIn(policy) as upstream` in the caller's loop; `StandInThread(policy)` with its
own loop in a daemon thread (for tests whose loop is busy, and benchmarks); and
`python -m tests.support.standin --port N --model M --delay-ms D` as a process, which prints its
base URL on the first line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

HOST = "127.0.0.1"
DEFAULT_MODEL = "standin-model"
VOCAB_SIZE = 100_000

# How long stopping lets in-flight handlers finish before cancelling them (aiohttp waits this
# twice at most: once gracefully, once for the cancellation), so stopping ends hung requests
# and half-sent streams well within a second.
SHUTDOWN_GRACE_SEC = 0.2

# Bodies of real agent prompts can be large; aiohttp's default cap is 1 MiB.
MAX_BODY_BYTES = 256 * 1024 * 1024

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}

_PIECE = re.compile(r"\s*\S+\s*")


# --- tokenization -------------------------------------------------------------------------


def token_id(word: str) -> int:
    """The id of one whitespace-free word: a stable hash, the same in every process."""
    digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % VOCAB_SIZE


def token_logprob(tid: int) -> float:
    """A deterministic logprob in (-1, 0] for a token id, so tests can predict it."""
    return -(tid % 1000) / 1000


def pieces(text: str) -> list[str]:
    """The text cut into one piece per word, whitespace kept, so the pieces join to the text.

    These are the "tokens" of the stand-in: each streamed chunk carries one piece, and
    `logprobs.content[i].token` is a piece, as with real tokenizers whose tokens concatenate
    to the output. Whitespace-only text has no pieces.
    """
    return _PIECE.findall(text)


def token_ids(text: str) -> list[int]:
    """One id per whitespace-separated word of the text."""
    return [token_id(word) for word in text.split()]


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def prompt_text(body: dict[str, Any]) -> str:
    """What the stand-in tokenizes as the prompt of a chat request.

    Per message, in order: its role, its text content, and the name and arguments of each of its
    tool calls, joined with newlines; then `assistant`, the generation prompt a chat template
    ends with. So a conversation that sends the answer back as it came is a prefix extension,
    as with real servers: the next prompt's ids start with this prompt's and the answer's
    (`completion_token_ids`). Tool definitions and sampling fields are not counted.
    """
    lines: list[str] = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        lines.append(str(message.get("role", "")))
        lines.append(_text_of(message.get("content")))
        for call in message.get("tool_calls") or []:
            function = (call.get("function") if isinstance(call, dict) else None) or {}
            lines.append(str(function.get("name", "")))
            lines.append(str(function.get("arguments", "")))
    lines.append("assistant")
    return "\n".join(lines)


def prompt_token_ids(body: dict[str, Any]) -> list[int]:
    """The prompt's token ids as the stand-in reports them (`prompt_token_ids`, usage)."""
    return token_ids(prompt_text(body))


# --- policy -------------------------------------------------------------------------------


@dataclass
class Reply:
    """One scripted answer to a chat completion request.

    `tool_calls` are `(function name, arguments as a JSON string)`. A `status` other than 200
    answers `{"error": {...}}` (also to streamed requests, as vLLM does for refused requests).
    `delay_sec` passes before anything is sent, `chunk_delay_sec` between stream chunks;
    `hang` never answers, until the server stops and drops the connection. `finish_reason`
    defaults to "tool_calls" when there are tool calls and "stop" otherwise.
    """

    content: str | None = None
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    status: int = 200
    delay_sec: float = 0.0
    chunk_delay_sec: float = 0.0
    hang: bool = False
    error_message: str | None = None
    finish_reason: str | None = None

    def finish(self) -> str:
        """The finish_reason this reply ends with."""
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


PolicyFn = Callable[[dict[str, Any], int], Reply]
PolicyLike = PolicyFn | Sequence[Reply] | Reply | None


def as_policy(policy: PolicyLike) -> PolicyFn:
    """A callable policy from any accepted form.

    A list is consumed in arrival order and then repeats its last reply, so a test scripts a
    conversation without counting; one `Reply` always answers; None answers "ok".
    """
    if policy is None:
        policy = Reply(content="ok")
    if isinstance(policy, Reply):
        single = policy
        return lambda _body, _index: single
    if callable(policy):
        return policy
    replies = list(policy)
    if not replies:
        raise ValueError("a policy list needs at least one Reply")
    return lambda _body, index: replies[min(index, len(replies) - 1)]


def assistant_turn(body: dict[str, Any]) -> int:
    """How many assistant messages the request's conversation already holds: 0 for its first
    model call. Read from the messages, so every conversation counts on its own."""
    messages = body.get("messages") or []
    return sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


def by_turn(replies: Sequence[Reply], then: Reply) -> PolicyFn:
    """A policy answering reply N to a conversation's N-th model call (`assistant_turn`), and
    `then` once the list is used up, so one stand-in drives many conversations at once."""
    steps = list(replies)

    def policy(body: dict[str, Any], _index: int) -> Reply:
        turn = assistant_turn(body)
        return steps[turn] if turn < len(steps) else then

    return policy


def shell_solver(commands: Sequence[str], final: str) -> PolicyFn:
    """A policy that runs each command through a `bash` tool, then answers `final`."""
    calls = [Reply(tool_calls=[("bash", json.dumps({"command": c}))]) for c in commands]
    return by_turn(calls, Reply(content=final))


# --- scripts (a file of answers) ----------------------------------------------------------


class ScriptError(ValueError):
    """A script file that cannot be played; the message names the file and the entry."""


def _script_call(call: Any, where: str) -> tuple[str, str]:
    """One tool call of a script entry: `{name, arguments}` or the API's
    `{type: function, function: {name, arguments}}`; arguments an object or its JSON text."""
    if not isinstance(call, dict):
        raise ScriptError(f"{where}: a tool call is an object with name and arguments")
    function = call.get("function", call)
    if not isinstance(function, dict):
        raise ScriptError(f"{where}: function must be an object with name and arguments")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ScriptError(f"{where}: name: a non-empty string is required (e.g. bash)")
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as exc:
            raise ScriptError(f"{where}: arguments: not JSON ({exc})") from None
    if not isinstance(arguments, dict):
        raise ScriptError(f"{where}: arguments: an object is required, e.g. {{command: ls}}")
    return name, json.dumps(arguments)


def _script_reply(entry: Any, where: str) -> Reply:
    if isinstance(entry, str):
        return Reply(content=entry)
    if not isinstance(entry, dict):
        raise ScriptError(
            f"{where}: a text reply (a string) or an assistant message (an object with "
            f"content and/or tool_calls) is required, not {type(entry).__name__}"
        )
    unknown = sorted(set(entry) - {"role", "content", "tool_calls"})
    if unknown:
        raise ScriptError(f"{where}: unknown key(s) {unknown}; use content and tool_calls")
    if entry.get("role", "assistant") != "assistant":
        raise ScriptError(f"{where}: role: only assistant messages can be scripted")
    content = entry.get("content")
    if content is not None and not isinstance(content, str):
        raise ScriptError(f"{where}: content: a string is required")
    calls = entry.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ScriptError(f"{where}: tool_calls: a list is required")
    if content is None and not calls:
        raise ScriptError(f"{where}: an answer needs content or tool_calls")
    tool_calls = [_script_call(c, f"{where}, tool call {i}") for i, c in enumerate(calls, 1)]
    return Reply(content=content, tool_calls=tool_calls)


def load_script(path: Path) -> list[Reply]:
    """The answers of a script file (JSON or YAML: a list of text replies or assistant
    messages), checked whole before serving so a mistake is named by file and entry index."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:  # JSON is YAML, but JSON's own parser says where a JSON file breaks
        data = json.loads(raw) if path.suffix == ".json" else yaml.safe_load(raw)
    except (ValueError, yaml.YAMLError) as exc:
        raise ScriptError(f"{path}: not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from None
    if not isinstance(data, list) or not data:
        raise ScriptError(f"{path}: a non-empty list of answers is required")
    return [_script_reply(entry, f"{path}: entry {i}") for i, entry in enumerate(data, 1)]


def script_policy(path: Path) -> PolicyFn:
    """The script's answers by turn; past its end a text reply that says so (no tool call,
    so a tool-calling agent stops there)."""
    replies = load_script(path)
    exhausted = Reply(
        content=f"[stand-in: script exhausted: {path} has {len(replies)} answer(s) and this "
        "conversation asked for one more]"
    )
    return by_turn(replies, exhausted)


def completion_pieces(reply: Reply) -> list[str]:
    """The generated "tokens" of a reply: its content's pieces, then per tool call its name
    and its arguments' pieces (the order the stream sends them in)."""
    out = pieces(reply.content or "")
    for name, arguments in reply.tool_calls:
        out.append(name)
        out.extend(pieces(arguments))
    return out


def completion_token_ids(reply: Reply) -> list[int]:
    """The completion's token ids as the stand-in reports them (`token_ids`, usage)."""
    return [token_id(piece.strip()) for piece in completion_pieces(reply)]


def usage_of(body: dict[str, Any], reply: Reply) -> dict[str, int]:
    """The `usage` object the stand-in answers for this request and reply."""
    prompt = len(prompt_token_ids(body))
    completion = len(completion_token_ids(reply))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _logprob_entries(parts: Sequence[str]) -> list[dict[str, Any]]:
    entries = []
    for piece in parts:
        tid = token_id(piece.strip())
        entries.append(
            {"token": piece, "logprob": token_logprob(tid), "bytes": None, "top_logprobs": []}
        )
    return entries


# --- records ------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    """One request as it arrived: headers lower-cased, body parsed when it is JSON.

    `body` is the parsed JSON, the raw text when it is not JSON, None when empty; `time` is
    wall-clock seconds at arrival (recorded before any delay or hang).
    """

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any
    time: float


# --- the server ---------------------------------------------------------------------------


class StandIn:
    """The stand-in server, in the caller's event loop (`async with StandIn(policy) as up`).

    The policy's `index` counts chat completion requests only (0, 1, ... in arrival order);
    every request, whatever its path, is recorded in `requests`.
    """

    def __init__(
        self, policy: PolicyLike = None, *, model: str = DEFAULT_MODEL, port: int = 0
    ) -> None:
        self.model = model
        self.requests: list[RecordedRequest] = []
        self._policy = as_policy(policy)
        self._wanted_port = port
        self._chat_count = 0
        self._arrival = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port: int = 0

    @property
    def url(self) -> str:
        """The server's root, e.g. http://127.0.0.1:PORT."""
        return f"http://{HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, e.g. http://127.0.0.1:PORT/v1."""
        return f"{self.url}/v1"

    def chat_requests(self) -> list[RecordedRequest]:
        """The recorded chat completion requests, in arrival order."""
        return [r for r in self.requests if r.path == "/v1/chat/completions"]

    async def wait_for_requests(self, count: int, wait_sec: float = 5.0) -> list[RecordedRequest]:
        """Wait until `count` requests have arrived (hung ones included) and return them all.

        Lets a test act once the upstream has a request in hand, without sleeping on a guess.
        """
        async with asyncio.timeout(wait_sec), self._arrival:
            await self._arrival.wait_for(lambda: len(self.requests) >= count)
        return list(self.requests)

    async def start(self) -> StandIn:
        """Listen on 127.0.0.1 (port 0 picks a free one)."""
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_route("*", "/{tail:.*}", self._echo)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_SEC)
        await runner.setup()
        try:
            site = web.TCPSite(runner, HOST, self._wanted_port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        """Stop listening and close every connection, hung and streaming ones included."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> StandIn:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    # handlers

    async def _record(self, request: web.Request) -> Any:
        raw = await request.read()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", errors="replace")
        self.requests.append(
            RecordedRequest(
                method=request.method,
                path=request.path,
                query=request.query_string,
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
                time=time.time(),
            )
        )
        async with self._arrival:
            self._arrival.notify_all()
        return body

    async def _models(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model"}]}
        )

    async def _echo(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        return web.json_response({"path": request.path, "method": request.method, "echo": body})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if not isinstance(body, dict):
            return _error(400, "the body is not a JSON object")
        index = self._chat_count
        self._chat_count += 1
        reply = self._policy(body, index)
        if reply.delay_sec > 0:
            await asyncio.sleep(reply.delay_sec)
        if reply.hang:
            await asyncio.Future()  # until stopping cancels this handler
        if reply.status != 200:
            return _error(reply.status, reply.error_message)
        answer = _Answer(body, reply, index, str(body.get("model") or self.model))
        if body.get("stream"):
            return await answer.stream(request)
        return web.json_response(answer.whole())


def _error(status: int, message: str | None) -> web.Response:
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "error")
    text = message or f"stand-in error {status}"
    return web.json_response(
        {"error": {"message": text, "type": kind, "param": None, "code": status}}, status=status
    )


class _Answer:
    """One chat completion answer, whole or as chunks; token data only when asked."""

    def __init__(self, body: dict[str, Any], reply: Reply, index: int, model: str) -> None:
        self.body = body
        self.reply = reply
        self.model = model
        self.id = f"chatcmpl-standin-{index}"
        self.created = int(time.time())
        self.call_ids = [f"call_standin_{index}_{i}" for i in range(len(reply.tool_calls))]
        self.want_logprobs = bool(body.get("logprobs"))
        self.want_ids = bool(body.get("return_token_ids"))
        stream_options = body.get("stream_options") or {}
        self.want_usage = bool(stream_options.get("include_usage"))

    def whole(self) -> dict[str, Any]:
        """The `chat.completion` object."""
        reply = self.reply
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, (name, args) in zip(self.call_ids, reply.tool_calls, strict=True)
            ]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": reply.finish(),
        }
        parts = completion_pieces(reply)
        if self.want_logprobs:
            choice["logprobs"] = {"content": _logprob_entries(parts)}
        if self.want_ids:
            choice["token_ids"] = completion_token_ids(reply)
        out: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage_of(self.body, reply),
        }
        if self.want_ids:
            out["prompt_token_ids"] = prompt_token_ids(self.body)
        return out

    def _chunk(
        self,
        delta: dict[str, Any],
        parts: Sequence[str] = (),
        finish: str | None = None,
        *,
        carries_tokens: bool = True,
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": finish,
        }
        if carries_tokens and self.want_logprobs:
            choice["logprobs"] = {"content": _logprob_entries(parts)}
        if carries_tokens and self.want_ids:
            choice["token_ids"] = [token_id(p.strip()) for p in parts]
        chunk: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        }
        if self.want_usage:
            chunk["usage"] = None
        return chunk

    def chunks(self) -> list[dict[str, Any]]:
        """The stream, as OpenAI and vLLM send it: a role chunk, one chunk per content piece,
        per tool call a header chunk (index, id, name) then its arguments piece by piece, a
        finish chunk, and the usage chunk when `stream_options.include_usage` asks for it."""
        reply = self.reply
        role_delta = {"role": "assistant", "content": None if reply.content is None else ""}
        first = self._chunk(role_delta, carries_tokens=False)
        if self.want_ids:
            first["prompt_token_ids"] = prompt_token_ids(self.body)
        out = [first]
        content = reply.content or ""
        content_parts = pieces(content)
        if content and not content_parts:  # whitespace only: sent, but no tokens
            out.append(self._chunk({"content": content}))
        out.extend(self._chunk({"content": p}, [p]) for p in content_parts)
        for i, (cid, (name, arguments)) in enumerate(
            zip(self.call_ids, reply.tool_calls, strict=True)
        ):
            header = {
                "index": i,
                "id": cid,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            out.append(self._chunk({"tool_calls": [header]}, [name]))
            for p in pieces(arguments):
                call = {"index": i, "function": {"arguments": p}}
                out.append(self._chunk({"tool_calls": [call]}, [p]))
        out.append(self._chunk({}, finish=reply.finish(), carries_tokens=False))
        if self.want_usage:
            out.append(
                {
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": usage_of(self.body, reply),
                }
            )
        return out

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """Send the chunks as SSE `data:` lines, then `data: [DONE]`."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        lines = [f"data: {json.dumps(c)}\n\n".encode() for c in self.chunks()]
        lines.append(b"data: [DONE]\n\n")
        try:
            for n, line in enumerate(lines):
                if n and self.reply.chunk_delay_sec > 0:
                    await asyncio.sleep(self.reply.chunk_delay_sec)
                await response.write(line)
            await response.write_eof()
        except ConnectionResetError:  # the client left mid-stream
            pass
        return response


# --- in a thread --------------------------------------------------------------------------


class StandInThread:
    """The stand-in with its own event loop in a daemon thread.

    For tests whose own loop is blocked or busy, and for benchmarks that must not share the
    measured loop. Same attributes as `StandIn`; `start()`/`stop()` or `with StandInThread()`.
    """

    def __init__(
        self, policy: PolicyLike = None, *, model: str = DEFAULT_MODEL, port: int = 0
    ) -> None:
        self.server = StandIn(policy, model=model, port=port)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    @property
    def model(self) -> str:
        return self.server.model

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.server.requests

    def chat_requests(self) -> list[RecordedRequest]:
        return self.server.chat_requests()

    def wait_for_requests(self, count: int, wait_sec: float = 5.0) -> list[RecordedRequest]:
        """Block until `count` requests have arrived; return them all."""
        if self._loop is None:
            raise RuntimeError("not started")
        waiting = self.server.wait_for_requests(count, wait_sec)
        return asyncio.run_coroutine_threadsafe(waiting, self._loop).result(wait_sec + 1)

    def start(self, timeout: float = 10.0) -> StandInThread:
        """Start the thread and return once the server listens (or raise why it could not)."""
        if self._thread is not None:
            raise RuntimeError("already started")
        self._thread = threading.Thread(target=self._run, name="standin", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the stand-in did not start")
        if self._failure is not None:
            raise self._failure
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server (closing every connection) and join the thread."""
        thread, loop, event = self._thread, self._loop, self._stop_event
        if thread is None:
            return
        if loop is not None and event is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the loop already ended
                pass
        thread.join(timeout)
        self._thread = None

    def __enter__(self) -> StandInThread:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        try:
            await self.server.start()
        except BaseException as exc:
            self._failure = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stop_event.wait()
        finally:
            await self.server.stop()


# --- as a process -------------------------------------------------------------------------


async def _serve(args: argparse.Namespace, policy: PolicyLike) -> None:
    server = StandIn(policy, model=args.model, port=args.port)
    await server.start()
    print(server.base_url, flush=True)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)
    try:
        await done.wait()
    finally:
        await server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    """Serve one fixed reply, or a script's answers, until SIGINT/SIGTERM; the base URL is
    the first stdout line. A script that cannot be played exits 1 before serving, saying
    where it is wrong."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="before each answer")
    parser.add_argument("--chunk-delay-ms", type=float, default=0.0, help="between chunks")
    answers = parser.add_mutually_exclusive_group()
    answers.add_argument("--content", default="ok", help="the reply to every chat request")
    answers.add_argument(
        "--script",
        type=Path,
        metavar="FILE",
        help="JSON or YAML list of answers: answer N to each conversation's N-th model call",
    )
    args = parser.parse_args(argv)
    delays = {"delay_sec": args.delay_ms / 1000, "chunk_delay_sec": args.chunk_delay_ms / 1000}
    policy: PolicyLike = Reply(content=args.content, **delays)
    if args.script is not None:
        try:
            scripted = script_policy(args.script)
        except ScriptError as exc:
            raise SystemExit(f"stand-in: {exc}") from None

        def policy_of_script(body: dict[str, Any], index: int) -> Reply:
            return replace(scripted(body, index), **delays)

        policy = policy_of_script
    asyncio.run(_serve(args, policy))


if __name__ == "__main__":
    main()
