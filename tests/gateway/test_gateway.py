"""The model gateway, end to end on its unix sockets, against the stand-in upstream.

The sandbox's side is a plain aiohttp client on the slot's socket with the slot's token, as
the forwarder inside a sandbox would be; the upstream is `tests.support.standin`, whose
request records show exactly what the gateway sent (key, tags, model, sampling). No Docker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Coroutine
from types import EllipsisType
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.web import ContentCoding

from orchestrator.gateway.server import CLOSE_WITHIN_SEC, Gateway
from orchestrator.gateway.settings import ModelConfig, ModelLimits, Sampling
from orchestrator.gateway.slot import Slot
from tests.support.standin import (
    Reply,
    StandIn,
    completion_pieces,
    completion_token_ids,
    prompt_token_ids,
    token_id,
    token_logprob,
    usage_of,
)

MODEL = "trial-model"
TRIAL = "trial-1"
ROLLOUT = "rollout-7"
HOST_KEY = "sk-host-secret-123"
CHAT_PATH = "/v1/chat/completions"
TOOL_ARGS = json.dumps({"command": "ls -la /tmp && echo done"})
CLIENT_TIMEOUT = aiohttp.ClientTimeout(total=15)


def chat_body(text: str = "say hello to the world", **extra: Any) -> dict[str, Any]:
    return {"model": "agent-picked-model", "messages": [{"role": "user", "content": text}], **extra}


def model_config(upstream: StandIn | str, **kwargs: Any) -> ModelConfig:
    base_url = upstream if isinstance(upstream, str) else upstream.base_url
    kwargs.setdefault("api_key", HOST_KEY)
    return ModelConfig(name=MODEL, base_url=base_url, **kwargs)


def logprob_entries(reply: Reply) -> list[dict[str, Any]]:
    """The logprobs the stand-in gives a reply, computed from its public helpers."""
    return [
        {
            "token": piece,
            "logprob": token_logprob(token_id(piece.strip())),
            "bytes": None,
            "top_logprobs": [],
        }
        for piece in completion_pieces(reply)
    ]


class Agent:
    """The sandbox's side of one slot: an OpenAI-style client on the slot's unix socket."""

    def __init__(self, slot: Slot, token: str | None = None) -> None:
        self.slot = slot
        self.token = slot.token if token is None else token
        connector = aiohttp.UnixConnector(path=str(slot.socket_path))
        self.session = aiohttp.ClientSession(connector=connector, timeout=CLIENT_TIMEOUT)

    def headers(self, authorization: str | EllipsisType | None = ...) -> dict[str, str]:
        """The slot's own Bearer token unless `authorization` says otherwise (None: none)."""
        if isinstance(authorization, EllipsisType):
            authorization = f"Bearer {self.token}"
        return {} if authorization is None else {"Authorization": authorization}

    async def post(
        self,
        body: Any,
        path: str = CHAT_PATH,
        authorization: str | EllipsisType | None = ...,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """POST a JSON body; the status and the JSON answer (its bytes when not JSON)."""
        async with self.session.post(
            f"http://gateway{path}",
            json=body,
            headers={**self.headers(authorization), **(headers or {})},
        ) as response:
            raw = await response.read()
            try:
                return response.status, json.loads(raw)
            except ValueError:  # not JSON, or not even text
                return response.status, raw

    async def get(self, path: str) -> tuple[int, Any]:
        async with self.session.get(f"http://gateway{path}", headers=self.headers()) as response:
            return response.status, await response.json()

    async def stream(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
        """A streamed chat call: its chunks, and whether it closed with `data: [DONE]`.

        Checks the SSE framing on the way: only `data:` lines, nothing after [DONE]."""
        chunks: list[dict[str, Any]] = []
        done = False
        async with self.session.post(
            f"http://gateway{CHAT_PATH}", json={**body, "stream": True}, headers=self.headers()
        ) as response:
            assert response.status == 200, await response.text()
            assert response.headers["Content-Type"].startswith("text/event-stream")
            async for raw in response.content:
                line = raw.decode().strip()
                if not line:
                    continue
                assert line.startswith("data: "), line
                assert not done, "nothing may follow [DONE]"
                data = line.removeprefix("data: ")
                if data == "[DONE]":
                    done = True
                else:
                    chunks.append(json.loads(data))
        return chunks, done

    async def aclose(self) -> None:
        await self.session.close()


@contextlib.asynccontextmanager
async def agent_of(slot: Slot, token: str | None = None) -> AsyncIterator[Agent]:
    agent = Agent(slot, token)
    try:
        yield agent
    finally:
        await agent.aclose()


@contextlib.asynccontextmanager
async def standin(policy: Any) -> AsyncIterator[StandIn]:
    async with StandIn(policy) as server:
        yield server


@contextlib.asynccontextmanager
async def raw_upstream(chat: Any) -> AsyncIterator[str]:
    """A one-route upstream for what the stand-in does not do (compressed answers, raw UTF-8
    split across writes); yields its base URL."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then let go)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- forwarding -------------------------------------------------------------------------------


async def test_chat_is_forwarded_and_answered_unchanged(gateway: Gateway) -> None:
    reply = Reply(content="hello there", tool_calls=[("bash", TOOL_ARGS)])
    async with standin(reply) as up:
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(up))
        async with agent_of(slot) as agent:
            status, answer = await agent.post(chat_body())
    assert status == 200
    (seen,) = up.chat_requests()
    expected = {
        "id": "chatcmpl-standin-0",
        "object": "chat.completion",
        "created": answer["created"],
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "hello there",
                    "tool_calls": [
                        {
                            "id": "call_standin_0_0",
                            "type": "function",
                            "function": {"name": "bash", "arguments": TOOL_ARGS},
                        }
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": usage_of(seen.body, reply),
    }
    assert answer == expected
    (exchange,) = slot.record.exchanges
    assert exchange.response == answer, "the record keeps the answer as the agent got it"
    assert exchange.request == seen.body, "the record keeps the body as it went upstream"
    assert (exchange.method, exchange.path, exchange.status_code) == ("POST", CHAT_PATH, 200)
    assert not exchange.streamed and exchange.error is None and exchange.limit is None
    assert exchange.index == 0 and exchange.latency_sec > 0
    assert (exchange.prompt_tokens, exchange.completion_tokens) == (
        expected["usage"]["prompt_tokens"],
        expected["usage"]["completion_tokens"],
    )
    assert slot.record.trial_id == TRIAL and slot.record.rollout_id == ROLLOUT
    assert slot.record.model == MODEL and slot.record.stopped_by is None


async def test_upstream_sees_the_host_key_and_the_rollout_tag(
    gateway: Gateway, upstream: StandIn
) -> None:
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(upstream))
    async with agent_of(slot) as agent:
        status, _ = await agent.post(chat_body(user="agent-chosen-user"))
    assert status == 200
    (seen,) = upstream.chat_requests()
    assert seen.headers["authorization"] == f"Bearer {HOST_KEY}"
    assert slot.token not in json.dumps(seen.headers), "the slot's token stays in the sandbox"
    assert seen.headers["x-trialbox-rollout"] == ROLLOUT
    assert seen.body["user"] == ROLLOUT, "the rollout tag wins over the agent's own `user`"
    assert HOST_KEY not in slot.record.model_dump_json(), "the key is never recorded"


async def test_the_key_comes_from_the_named_env_variable(
    gateway: Gateway, upstream: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TB_TEST_UPSTREAM_KEY", "sk-from-env-456")
    config = ModelConfig(name=MODEL, base_url=upstream.base_url, api_key_env="TB_TEST_UPSTREAM_KEY")
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=config)
    async with agent_of(slot) as agent:
        assert (await agent.post(chat_body()))[0] == 200
    (seen,) = upstream.chat_requests()
    assert seen.headers["authorization"] == "Bearer sk-from-env-456"


async def test_without_a_host_key_no_authorization_goes_upstream(
    gateway: Gateway, upstream: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyless upstream (a local vLLM) gets no Authorization at all, never the slot's token."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = ModelConfig(name=MODEL, base_url=upstream.base_url)
    assert config.api_key is None
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=None, model=config)
    async with agent_of(slot) as agent:
        assert (await agent.post(chat_body()))[0] == 200
    (seen,) = upstream.chat_requests()
    assert "authorization" not in seen.headers
    assert seen.headers["x-trialbox-rollout"] == TRIAL, "without a rollout the trial id tags"
    assert seen.body["user"] == TRIAL


async def test_the_model_is_forced_and_sampling_defaults_yield_to_the_agent(
    gateway: Gateway, upstream: StandIn
) -> None:
    sampling = Sampling(temperature=0.2, top_p=0.9, max_tokens=64, seed=7)
    slot = await gateway.open_slot(
        trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(upstream, sampling=sampling)
    )
    async with agent_of(slot) as agent:
        assert (await agent.post(chat_body()))[0] == 200
        assert (await agent.post(chat_body(temperature=1.0, max_tokens=5)))[0] == 200
    defaults, overridden = (r.body for r in upstream.chat_requests())
    assert defaults["model"] == overridden["model"] == MODEL
    assert {k: defaults[k] for k in ("temperature", "top_p", "max_tokens", "seed")} == {
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 64,
        "seed": 7,
    }
    assert {k: overridden[k] for k in ("temperature", "top_p", "max_tokens", "seed")} == {
        "temperature": 1.0,
        "top_p": 0.9,
        "max_tokens": 5,
        "seed": 7,
    }
    assert "logprobs" not in defaults and "return_token_ids" not in defaults


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer tb-not-the-token", "Bearer ", "Basic dGI6dGI=", "TOKEN"],
    ids=["missing", "wrong", "empty", "basic", "bare-token"],
)
async def test_a_wrong_or_missing_token_is_refused(
    gateway: Gateway, upstream: StandIn, authorization: str | None
) -> None:
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(upstream))
    if authorization == "TOKEN":
        authorization = slot.token  # the right token without "Bearer "
    async with agent_of(slot) as agent:
        status, answer = await agent.post(chat_body(), authorization=authorization)
        models_status, _ = await agent.post({}, path="/v1/responses", authorization=authorization)
    assert status == 401 and models_status == 401
    assert answer["error"]["type"] == "invalid_request_error"
    assert upstream.requests == [], "nothing is forwarded"
    assert slot.record.exchanges == [] and slot.record.usage.calls == 0


async def test_a_malformed_body_is_refused_without_going_upstream(
    gateway: Gateway, upstream: StandIn
) -> None:
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(upstream))
    async with agent_of(slot) as agent:
        status, answer = await agent.post(["not", "an", "object"])
    assert status == 400 and answer["error"]["type"] == "invalid_request_error"
    assert upstream.requests == []
    (exchange,) = slot.record.exchanges
    assert exchange.status_code == 400 and exchange.error
    assert slot.record.usage.calls == 0


# --- streaming and token data -----------------------------------------------------------------


async def test_a_streamed_call_passes_through_as_sse_and_is_recorded_assembled(
    gateway: Gateway,
) -> None:
    second_args = json.dumps({"path": "/tmp/a b c"})
    reply = Reply(
        content="Let me look around first.",
        tool_calls=[("bash", TOOL_ARGS), ("read_file", second_args)],
    )
    async with standin(reply) as up:
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(up))
        async with agent_of(slot) as agent:
            chunks, done = await agent.stream(chat_body(stream_options={"x_keep": 1}))
    (seen,) = up.chat_requests()
    assert seen.body["stream"] is True
    assert seen.body["stream_options"] == {"x_keep": 1, "include_usage": True}

    # The agent got the stream as the upstream sent it, piece by piece.
    assert done
    pieces_seen = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert "".join(p for p in pieces_seen if p) == reply.content
    assert len(chunks) > 10, "the deltas came one by one, not folded"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == usage_of(seen.body, reply)

    (exchange,) = slot.record.exchanges
    assert exchange.streamed and exchange.status_code == 200 and exchange.error is None
    answer = exchange.response
    assert answer["object"] == "chat.completion" and answer["id"] == "chatcmpl-standin-0"
    assert answer["model"] == MODEL
    (choice,) = answer["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == reply.content
    assert choice["message"]["tool_calls"] == [
        {
            "id": "call_standin_0_0",
            "type": "function",
            "function": {"name": "bash", "arguments": TOOL_ARGS},
        },
        {
            "id": "call_standin_0_1",
            "type": "function",
            "function": {"name": "read_file", "arguments": second_args},
        },
    ]
    assert answer["usage"] == usage_of(seen.body, reply)
    usage = answer["usage"]
    assert (exchange.prompt_tokens, exchange.completion_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    assert slot.record.usage.calls == 1
    assert slot.record.usage.total_tokens == usage["total_tokens"]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_token_ids_and_logprobs_are_asked_for_and_kept(
    gateway: Gateway, streamed: bool
) -> None:
    reply = Reply(content="the answer is here", tool_calls=[("bash", TOOL_ARGS)])
    async with standin(reply) as up:
        config = model_config(up, request_token_ids=True)
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=config)
        async with agent_of(slot) as agent:
            if streamed:
                _, done = await agent.stream(chat_body())
                assert done
            else:
                status, whole = await agent.post(chat_body())
                assert status == 200
    (seen,) = up.chat_requests()
    assert seen.body["logprobs"] is True and seen.body["return_token_ids"] is True
    (exchange,) = slot.record.exchanges
    answer = exchange.response
    if not streamed:
        assert answer == whole
    assert answer["prompt_token_ids"] == prompt_token_ids(seen.body)
    (choice,) = answer["choices"]
    assert choice["token_ids"] == completion_token_ids(reply)
    assert choice["logprobs"] == {"content": logprob_entries(reply)}
    assert exchange.completion_tokens == len(completion_token_ids(reply))
    assert exchange.prompt_tokens == len(prompt_token_ids(seen.body))


async def test_the_agent_may_still_decline_logprobs(gateway: Gateway) -> None:
    """`request_token_ids` adds the asks only where the agent did not say otherwise."""
    async with standin(Reply(content="fine")) as up:
        config = model_config(up, request_token_ids=True)
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=config)
        async with agent_of(slot) as agent:
            assert (await agent.post(chat_body(logprobs=False)))[0] == 200
    (seen,) = up.chat_requests()
    assert seen.body["logprobs"] is False and seen.body["return_token_ids"] is True


async def test_usage_adds_up_over_calls(gateway: Gateway) -> None:
    replies = [
        Reply(content="one two three"),
        Reply(tool_calls=[("bash", TOOL_ARGS)]),
        Reply(content="a much longer answer with quite a few more words in it"),
    ]
    async with standin(replies) as up:
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(up))
        async with agent_of(slot) as agent:
            assert (await agent.post(chat_body("first")))[0] == 200
            _, done = await agent.stream(chat_body("second call, streamed this time"))
            assert done
            assert (await agent.post(chat_body("third and last")))[0] == 200
    bodies = [r.body for r in up.chat_requests()]
    expected = [usage_of(body, reply) for body, reply in zip(bodies, replies, strict=True)]
    usage = slot.record.usage
    assert usage.calls == 3
    assert usage.prompt_tokens == sum(u["prompt_tokens"] for u in expected)
    assert usage.completion_tokens == sum(u["completion_tokens"] for u in expected)
    assert usage.total_tokens == sum(u["total_tokens"] for u in expected)
    assert [e.index for e in slot.record.exchanges] == [0, 1, 2]
    assert [e.streamed for e in slot.record.exchanges] == [False, True, False]


# --- limits -----------------------------------------------------------------------------------


async def expect_refusal(agent: Agent, limit: str) -> None:
    status, answer = await agent.post(chat_body())
    assert status == 403, answer
    assert answer["error"]["code"] == limit
    assert answer["error"]["type"] == "trialbox_limit"


async def test_max_calls_stops_the_next_call(gateway: Gateway, upstream: StandIn) -> None:
    config = model_config(upstream, limits=ModelLimits(max_calls=2))
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=config)
    async with agent_of(slot) as agent:
        assert (await agent.post(chat_body()))[0] == 200
        _, done = await agent.stream(chat_body())
        assert done
        await expect_refusal(agent, "calls")
        await expect_refusal(agent, "calls")
    assert len(upstream.chat_requests()) == 2, "refused calls never go upstream"
    record = slot.record
    assert record.stopped_by == "calls" and record.usage.calls == 2
    refused = record.exchanges[2:]
    assert [(e.status_code, e.limit) for e in refused] == [(403, "calls"), (403, "calls")]


async def test_max_total_tokens_stops_the_next_call(gateway: Gateway, upstream: StandIn) -> None:
    config = model_config(upstream, limits=ModelLimits(max_total_tokens=5))
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=config)
    async with agent_of(slot) as agent:
        assert (await agent.post(chat_body()))[0] == 200, "the first call is under the limit"
        assert slot.record.usage.total_tokens >= 5
        await expect_refusal(agent, "tokens")
    assert len(upstream.chat_requests()) == 1
    assert slot.record.stopped_by == "tokens"
    assert slot.record.exchanges[-1].limit == "tokens"


async def test_the_deadline_stops_calls(gateway: Gateway, upstream: StandIn) -> None:
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(upstream))
    slot.start_clock(0.2)
    await asyncio.sleep(0.3)
    async with agent_of(slot) as agent:
        await expect_refusal(agent, "deadline")
    assert upstream.requests == []
    assert slot.record.stopped_by == "deadline" and slot.record.usage.calls == 0


async def test_the_first_limit_reached_is_the_one_kept(gateway: Gateway, upstream: StandIn) -> None:
    config = model_config(upstream, limits=ModelLimits(max_calls=1))
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=config)
    async with agent_of(slot) as agent:
        assert (await agent.post(chat_body()))[0] == 200
        await expect_refusal(agent, "calls")
        slot.start_clock(0.0)
        await expect_refusal(agent, "deadline")
    assert slot.record.stopped_by == "calls"


async def test_a_closed_slot_refuses(gateway: Gateway, upstream: StandIn) -> None:
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(upstream))
    async with agent_of(slot) as agent:
        assert (await agent.post(chat_body()))[0] == 200
    await gateway.close_slot(slot)
    assert slot.closed and not slot.socket_path.exists()
    async with agent_of(slot) as agent:
        with pytest.raises(aiohttp.ClientConnectionError):
            await agent.post(chat_body())
    assert len(upstream.requests) == 1
    await gateway.close_slot(slot)  # idempotent
    assert slot.folder.exists(), "the folder stays until release_slot"


# --- upstream failures ------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_an_upstream_error_reaches_the_agent_and_is_recorded(
    gateway: Gateway, streamed: bool
) -> None:
    async with standin(Reply(status=500, error_message="the engine fell over")) as up:
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(up))
        async with agent_of(slot) as agent:
            status, answer = await agent.post(chat_body(stream=streamed))
    assert status == 500
    assert answer["error"]["message"] == "the engine fell over"
    (exchange,) = slot.record.exchanges
    assert exchange.status_code == 500 and exchange.error and "500" in exchange.error
    assert exchange.response == answer


async def test_an_unreachable_upstream_is_502(gateway: Gateway) -> None:
    config = model_config(f"http://127.0.0.1:{free_port()}/v1")
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=config)
    async with agent_of(slot) as agent:
        status, answer = await agent.post(chat_body())
        raw_status, _ = await agent.post({"input": "hi"}, path="/v1/responses")
    assert status == 502 and raw_status == 502
    assert answer["error"]["type"] == "upstream_error"
    assert [e.status_code for e in slot.record.exchanges] == [502, 502]
    assert all(e.error for e in slot.record.exchanges)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_hung_upstream_is_504_after_the_upstream_timeout(
    gateway: Gateway, streamed: bool
) -> None:
    async with standin(Reply(hang=True)) as up:
        config = model_config(up, upstream_timeout_sec=0.3)
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=config)
        async with agent_of(slot) as agent:
            started = time.monotonic()
            status, answer = await agent.post(chat_body(stream=streamed))
            waited = time.monotonic() - started
    assert status == 504 and answer["error"]["type"] == "upstream_error"
    assert 0.3 <= waited < 5
    (exchange,) = slot.record.exchanges
    assert exchange.status_code == 504 and "in time" in (exchange.error or "")


async def test_a_stream_that_stalls_past_the_timeout_is_recorded_as_broken(
    gateway: Gateway,
) -> None:
    """The record says the stream broke off and keeps what came (what the agent is told is
    `test_a_stream_cut_upstream_is_cut_for_the_agent_too`, below)."""
    reply = Reply(content="one two three four five six", chunk_delay_sec=0.2)
    async with standin(reply) as up:
        config = model_config(up, upstream_timeout_sec=0.5)
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=config)
        async with agent_of(slot) as agent:
            with contextlib.suppress(aiohttp.ClientPayloadError):
                _chunks, done = await agent.stream(chat_body())
                assert not done, "the agent never sees a complete stream"
    (exchange,) = slot.record.exchanges
    assert exchange.streamed and exchange.error and "broke off" in exchange.error
    content = exchange.response["choices"][0]["message"]["content"]
    assert content and reply.content and reply.content.startswith(content), "what came is kept"


# --- other paths ------------------------------------------------------------------------------


async def test_models_are_answered_without_the_upstream(
    gateway: Gateway, upstream: StandIn
) -> None:
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(upstream))
    async with agent_of(slot) as agent:
        status, answer = await agent.get("/v1/models")
    assert status == 200
    assert [m["id"] for m in answer["data"]] == [MODEL]
    assert upstream.requests == []


async def test_other_paths_pass_through_and_are_recorded_raw(
    gateway: Gateway, upstream: StandIn
) -> None:
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(upstream))
    body = {"model": "agent-picked-model", "input": "hello", "user": "agent"}
    async with agent_of(slot) as agent:
        status, answer = await agent.post(body, path="/v1/responses?trace=1")
    assert status == 200
    assert answer == {"path": "/v1/responses", "method": "POST", "echo": body}, "untouched"
    (seen,) = upstream.requests
    assert (seen.method, seen.path, seen.query) == ("POST", "/v1/responses", "trace=1")
    assert seen.body == body
    assert seen.headers["authorization"] == f"Bearer {HOST_KEY}"
    assert seen.headers["x-trialbox-rollout"] == ROLLOUT
    (exchange,) = slot.record.exchanges
    assert exchange.path == "/v1/responses" and exchange.status_code == 200
    assert isinstance(exchange.request, str) and json.loads(exchange.request) == body
    assert exchange.response == answer
    assert slot.record.usage.calls == 1


# --- slots side by side, and their ends -------------------------------------------------------


def echo_policy(body: dict[str, Any], _index: int) -> Reply:
    return Reply(content=f"echo {body['messages'][-1]['content']}", delay_sec=0.01)


async def test_two_slots_used_concurrently_never_mix(gateway: Gateway) -> None:
    async with standin(echo_policy) as up:
        slots = [
            await gateway.open_slot(
                trial_id=f"trial-{n}", rollout_id=f"ro-{n}", model=model_config(up)
            )
            for n in ("a", "b")
        ]

        async def use(slot: Slot, name: str) -> None:
            async with agent_of(slot) as agent:
                calls: list[Coroutine[Any, Any, object]] = []
                for i in range(8):
                    if i % 2:
                        calls.append(agent.stream(chat_body(f"{name} {i}")))
                    else:
                        calls.append(agent.post(chat_body(f"{name} {i}")))
                await asyncio.gather(*calls)

        await asyncio.gather(use(slots[0], "a"), use(slots[1], "b"))
        # One slot's token is worthless on the other's socket.
        async with agent_of(slots[1], token=slots[0].token) as intruder:
            assert (await intruder.post(chat_body("a sneaks in")))[0] == 401
        async with agent_of(slots[0], token=slots[1].token) as intruder:
            assert (await intruder.post(chat_body("b sneaks in")))[0] == 401

    assert len(up.chat_requests()) == 16
    for seen in up.chat_requests():
        assert seen.headers["x-trialbox-rollout"] == seen.body["user"]
    for slot, name in zip(slots, ("a", "b"), strict=True):
        record = slot.record
        assert len(record.exchanges) == 8 and record.usage.calls == 8
        assert [e.index for e in record.exchanges] == list(range(8))
        texts = set()
        for exchange in record.exchanges:
            text = exchange.request["messages"][-1]["content"]
            assert text.startswith(f"{name} ") and exchange.request["user"] == f"ro-{name}"
            answer = exchange.response["choices"][0]["message"]["content"]
            assert answer == f"echo {text}"
            texts.add(text)
        assert texts == {f"{name} {i}" for i in range(8)}


async def test_close_slot_ends_a_hung_request_promptly(gateway: Gateway) -> None:
    async with standin(Reply(hang=True)) as up:
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(up))
        async with agent_of(slot) as agent:
            call = asyncio.create_task(agent.post(chat_body()))
            await up.wait_for_requests(1)
            started = time.monotonic()
            await gateway.close_slot(slot)
            closing = time.monotonic() - started
            with contextlib.suppress(aiohttp.ClientError):
                await asyncio.wait_for(call, 5)
            ended = time.monotonic() - started
    assert call.done()
    assert closing < 2 * CLOSE_WITHIN_SEC and ended < 2 * CLOSE_WITHIN_SEC
    assert not slot.socket_path.exists()
    assert slot.folder.exists()


async def test_release_slot_removes_the_folder_and_aclose_the_root(upstream: StandIn) -> None:
    gateway = Gateway()
    try:
        first, second = [
            await gateway.open_slot(trial_id=f"t{n}", rollout_id=None, model=model_config(upstream))
            for n in range(2)
        ]
        assert first.folder.parent == second.folder.parent == gateway.root
        assert first.socket_path.is_socket() and second.socket_path.is_socket()
        await gateway.release_slot(first)
        assert not first.folder.exists() and first.closed
        async with agent_of(second) as agent:
            assert (await agent.post(chat_body()))[0] == 200, "the other slot goes on"
    finally:
        await gateway.aclose()
    assert second.closed and not second.socket_path.exists()
    assert not gateway.root.exists()


# --- what these tests found wrong at first: fixed in the gateway since, bar the last (xfail) ---


async def test_max_calls_holds_for_concurrent_calls(gateway: Gateway) -> None:
    """Once only finished calls counted, so six concurrent calls all passed max_calls=2."""
    async with standin(Reply(content="ok", delay_sec=0.1)) as up:
        config = model_config(up, limits=ModelLimits(max_calls=2))
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=config)
        async with agent_of(slot) as agent:
            results = await asyncio.gather(*(agent.post(chat_body(f"c {i}")) for i in range(6)))
        async with agent_of(slot) as agent:
            await expect_refusal(agent, "calls")  # and so it stays once they are done
    assert len(up.chat_requests()) == 2
    assert sorted(status for status, _ in results) == [200, 200, 403, 403, 403, 403]
    assert slot.record.stopped_by == "calls" and slot.record.usage.calls == 2


async def test_failed_calls_in_flight_give_their_place_back(gateway: Gateway) -> None:
    """A call that fails upstream still counts once, and only once: max_calls=2 lets exactly
    two calls through, whatever became of the first."""
    async with standin([Reply(status=500), Reply(content="ok")]) as up:
        config = model_config(up, limits=ModelLimits(max_calls=2))
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=config)
        async with agent_of(slot) as agent:
            assert (await agent.post(chat_body()))[0] == 500
            assert (await agent.post(chat_body()))[0] == 200
            await expect_refusal(agent, "calls")
    assert len(up.chat_requests()) == 2 and slot.record.usage.calls == 2


COMPRESSIBLE = {
    "id": "chatcmpl-gz",
    "object": "chat.completion",
    "model": MODEL,
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "ok " * 200},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 200, "total_tokens": 203},
}


async def compressing_chat(request: web.Request) -> web.Response:
    """Compresses its answer when the client accepts it, as hosted APIs behind a CDN do."""
    await request.read()
    answer = web.json_response(COMPRESSIBLE)
    answer.enable_compression()
    return answer


async def always_compressing_chat(request: web.Request) -> web.Response:
    """Compresses its answer whatever the client asked for."""
    await request.read()
    answer = web.json_response(COMPRESSIBLE)
    answer.enable_compression(force=ContentCoding.gzip)
    return answer


@pytest.mark.parametrize(
    "chat", [compressing_chat, always_compressing_chat], ids=["when-accepted", "always"]
)
async def test_a_compressed_upstream_answer_reaches_the_agent_readable(
    gateway: Gateway, chat: Any
) -> None:
    """Once the gateway sent aiohttp's default Accept-Encoding, kept the answer compressed and
    dropped its Content-Encoding: the agent got bytes it could not read, the record no usage."""
    async with raw_upstream(chat) as base_url:
        slot = await gateway.open_slot(
            trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(base_url)
        )
        async with agent_of(slot) as agent:
            status, answer = await agent.post(chat_body())
    assert status == 200
    assert answer == COMPRESSIBLE
    (exchange,) = slot.record.exchanges
    assert exchange.response == COMPRESSIBLE
    assert slot.record.usage.total_tokens == 203


async def test_a_request_body_over_one_mib_is_forwarded(
    gateway: Gateway, upstream: StandIn
) -> None:
    """Once aiohttp's default cap of 1 MiB answered 413 to long contexts and images."""
    long_prompt = "word " * 300_000  # 1.5 MB
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(upstream))
    async with agent_of(slot) as agent:
        status, answer = await agent.post(chat_body(long_prompt))
    assert status == 200, answer
    (seen,) = upstream.chat_requests()
    assert seen.body["messages"][0]["content"] == long_prompt


SPLIT_TEXT = "héllo wörld ✓"


async def splitting_chat(request: web.Request) -> web.StreamResponse:
    """Streams raw UTF-8 (as vLLM's pydantic JSON does, no \\u escapes), one event written in
    two pieces cut inside the two bytes of "é", as the network may deliver it."""
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    chunk = {
        "id": "chatcmpl-split",
        "object": "chat.completion.chunk",
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": SPLIT_TEXT}, "finish_reason": "stop"}],
    }
    line = f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode()
    cut = line.index("é".encode()) + 1
    await response.write(line[:cut])
    await asyncio.sleep(0.05)
    await response.write(line[cut:])
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def test_a_character_split_across_reads_is_recorded_intact(gateway: Gateway) -> None:
    """Once each read was decoded on its own, and the record's text got U+FFFD."""
    async with raw_upstream(splitting_chat) as base_url:
        slot = await gateway.open_slot(
            trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(base_url)
        )
        async with agent_of(slot) as agent:
            chunks, done = await agent.stream(chat_body())
    assert done and chunks[0]["choices"][0]["delta"]["content"] == SPLIT_TEXT, "agent: intact"
    (exchange,) = slot.record.exchanges
    assert exchange.response["choices"][0]["message"]["content"] == SPLIT_TEXT


async def test_a_stream_cut_upstream_is_cut_for_the_agent_too(gateway: Gateway) -> None:
    """Once the agent's stream was ended cleanly: a 200 that just stopped, cut unnoticed."""
    reply = Reply(content="one two three four five six", chunk_delay_sec=0.2)
    async with standin(reply) as up:
        config = model_config(up, upstream_timeout_sec=0.5)
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=config)
        async with agent_of(slot) as agent:
            try:
                chunks, _done = await agent.stream(chat_body())
            except aiohttp.ClientPayloadError:
                told = True  # the response broke off, as at a proxy whose upstream died
            else:
                told = any("error" in chunk for chunk in chunks)  # or an SSE error event
    assert told


async def test_a_request_cut_by_close_slot_is_recorded_as_cut(gateway: Gateway) -> None:
    """Once recorded with status 0 and no error, as if nothing had gone wrong."""
    async with standin(Reply(hang=True)) as up:
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(up))
        async with agent_of(slot) as agent:
            call = asyncio.create_task(agent.post(chat_body()))
            await up.wait_for_requests(1)
            await gateway.close_slot(slot)
            with contextlib.suppress(aiohttp.ClientError):
                await asyncio.wait_for(call, 5)
    (exchange,) = slot.record.exchanges
    assert exchange.error and exchange.status_code != 200


async def test_passthrough_keeps_the_agents_own_headers(
    gateway: Gateway, upstream: StandIn
) -> None:
    """Once all were dropped, anthropic-version too, which /v1/messages requires. Those the
    gateway owns (the key, the rollout tag) it still sets itself."""
    slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model_config(upstream))
    async with agent_of(slot) as agent:
        status, _ = await agent.post(
            {"model": MODEL, "max_tokens": 8, "messages": []},
            path="/v1/messages",
            headers={"anthropic-version": "2023-06-01", "X-Trialbox-Rollout": "spoofed"},
        )
    assert status == 200
    (seen,) = upstream.requests
    assert seen.headers.get("anthropic-version") == "2023-06-01"
    assert seen.headers["x-trialbox-rollout"] == ROLLOUT
    assert seen.headers["authorization"] == f"Bearer {HOST_KEY}"
    assert slot.token not in json.dumps(seen.headers)


async def test_a_cut_stream_is_not_logged_as_a_server_error(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    reply = Reply(content="one two three four five six", chunk_delay_sec=0.2)
    async with standin(reply) as up:
        config = model_config(up, upstream_timeout_sec=0.5)
        slot = await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=config)
        async with agent_of(slot) as agent:
            with contextlib.suppress(aiohttp.ClientPayloadError):
                await agent.stream(chat_body())
    assert slot.record.exchanges[0].error, "the record says it broke off"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
