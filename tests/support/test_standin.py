"""The stand-in upstream behaves like an OpenAI-compatible server, checked with a plain client.

The gateway's tests trust this server to stream, split tool calls, report usage and token data
the way vLLM does; if it drifted, they would pass against a protocol no real server speaks.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO_ROOT
from tests.support.standin import (
    Reply,
    ScriptError,
    StandIn,
    StandInThread,
    completion_token_ids,
    load_script,
    pieces,
    prompt_token_ids,
    script_policy,
    shell_solver,
    token_id,
    token_logprob,
    usage_of,
)

CHAT = {"model": "m1", "messages": [{"role": "user", "content": "say hello to the world"}]}
TOOL_ARGS = json.dumps({"command": "ls -la /tmp && echo done"})


async def post(client: httpx.AsyncClient, base: str, body: dict[str, Any]) -> httpx.Response:
    return await client.post(f"{base}/chat/completions", json=body)


async def stream(client: httpx.AsyncClient, base: str, body: dict[str, Any]) -> list[dict]:
    """The chunks of a streamed answer; checks the SSE framing and the closing [DONE]."""
    chunks: list[dict] = []
    done = False
    async with client.stream("POST", f"{base}/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if not line:
                continue
            assert line.startswith("data: ")
            assert not done, "nothing may follow [DONE]"
            data = line.removeprefix("data: ")
            if data == "[DONE]":
                done = True
            else:
                chunks.append(json.loads(data))
    assert done
    return chunks


def assemble(chunks: list[dict]) -> dict[str, Any]:
    """Reassemble choice 0 the way an OpenAI client does."""
    content: str | None = None
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    ids: list[int] = []
    logprobs: list[dict] = []
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            if delta.get("content") is not None:
                content = (content or "") + delta["content"]
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call["index"], {"name": "", "arguments": ""})
                if "id" in call:
                    slot["id"] = call["id"]
                function = call.get("function") or {}
                slot["name"] += function.get("name") or ""
                slot["arguments"] += function.get("arguments") or ""
            ids.extend(choice.get("token_ids") or [])
            if choice.get("logprobs"):
                logprobs.extend(choice["logprobs"]["content"])
            finish = choice["finish_reason"] or finish
    return {
        "content": content,
        "calls": [calls[i] for i in sorted(calls)],
        "finish": finish,
        "token_ids": ids,
        "logprobs": logprobs,
    }


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as c:
        yield c


def test_tokenization_is_stable_and_joins_back() -> None:
    # Fixed values: a process-salted hash would change these between runs.
    assert token_id("hello") == 91741
    assert token_id("bash") == 367
    assert token_logprob(91741) == -0.741
    text = "  say  hello\nworld "
    assert "".join(pieces(text)) == text
    assert [p.strip() for p in pieces(text)] == ["say", "hello", "world"]
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi there"}]}]}
    # The generation prompt ends it, as a chat template's does.
    assert prompt_token_ids(body) == [token_id(w) for w in ["user", "hi", "there", "assistant"]]


async def test_models_and_bound_to_loopback(client: httpx.AsyncClient) -> None:
    async with StandIn(model="qwen-test") as upstream:
        assert upstream.base_url.startswith("http://127.0.0.1:")
        assert upstream.port > 0
        r = await client.get(f"{upstream.base_url}/models")
        assert r.json() == {"object": "list", "data": [{"id": "qwen-test", "object": "model"}]}


async def test_non_streamed_content(client: httpx.AsyncClient) -> None:
    reply = Reply(content="Hello there, world!")
    async with StandIn([reply]) as upstream:
        r = await post(client, upstream.base_url, CHAT)
    assert r.status_code == 200
    data = r.json()
    assert data["object"] == "chat.completion"
    assert data["model"] == "m1"
    choice = data["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "Hello there, world!"}
    assert choice["finish_reason"] == "stop"
    assert choice["logprobs"] is None
    assert "token_ids" not in choice and "prompt_token_ids" not in data
    assert data["usage"] == usage_of(CHAT, reply)
    assert data["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


async def test_non_streamed_tool_calls(client: httpx.AsyncClient) -> None:
    reply = Reply(tool_calls=[("bash", TOOL_ARGS), ("read", '{"path": "a.txt"}')])
    async with StandIn(reply) as upstream:
        data = (await post(client, upstream.base_url, CHAT)).json()
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] is None
    calls = message["tool_calls"]
    assert [c["function"] for c in calls] == [
        {"name": "bash", "arguments": TOOL_ARGS},
        {"name": "read", "arguments": '{"path": "a.txt"}'},
    ]
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls)
    assert len({c["id"] for c in calls}) == 2
    assert data["usage"]["completion_tokens"] == len(completion_token_ids(reply))


async def test_streamed_content_reassembles(client: httpx.AsyncClient) -> None:
    reply = Reply(content="one two three four")
    async with StandIn(reply) as upstream:
        chunks = await stream(client, upstream.base_url, {**CHAT, "stream": True})
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content_chunks = [c for c in chunks if c["choices"][0]["delta"].get("content")]
    assert len(content_chunks) == 4, "one word per chunk"
    last = chunks[-1]["choices"][0]
    assert last["finish_reason"] == "stop" and last["delta"] == {}
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert all("usage" not in c for c in chunks), "no usage unless asked"
    whole = assemble(chunks)
    assert whole["content"] == "one two three four"
    assert whole["token_ids"] == [] and whole["logprobs"] == []
    assert "prompt_token_ids" not in chunks[0]


async def test_streamed_tool_call_deltas(client: httpx.AsyncClient) -> None:
    reply = Reply(content="Let me look.", tool_calls=[("bash", TOOL_ARGS), ("bash", '{"a": 1}')])
    async with StandIn(reply) as upstream:
        chunks = await stream(client, upstream.base_url, {**CHAT, "stream": True})
    deltas = [call for c in chunks for call in c["choices"][0]["delta"].get("tool_calls") or []]
    first = [d for d in deltas if d["index"] == 0]
    assert first[0]["id"].startswith("call_") and first[0]["type"] == "function"
    assert first[0]["function"] == {"name": "bash", "arguments": ""}
    assert len(first) > 3, "the arguments come in several pieces"
    assert all("id" not in d and "name" not in d["function"] for d in first[1:])
    whole = assemble(chunks)
    assert whole["content"] == "Let me look."
    assert whole["calls"] == [
        {"id": first[0]["id"], "name": "bash", "arguments": TOOL_ARGS},
        {"id": whole["calls"][1]["id"], "name": "bash", "arguments": '{"a": 1}'},
    ]
    assert whole["finish"] == "tool_calls"


async def test_usage_chunk_only_when_asked(client: httpx.AsyncClient) -> None:
    reply = Reply(content="a b c")
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    async with StandIn(reply) as upstream:
        chunks = await stream(client, upstream.base_url, body)
    *rest, last = chunks
    assert last["choices"] == []
    assert last["usage"] == usage_of(body, reply)
    assert all(c["usage"] is None for c in rest)
    assert rest[-1]["choices"][0]["finish_reason"] == "stop"


async def test_token_data_only_when_asked(client: httpx.AsyncClient) -> None:
    reply = Reply(content="the answer is 42", tool_calls=[("bash", TOOL_ARGS)])
    expected_ids = completion_token_ids(reply)
    async with StandIn(reply) as upstream:
        both = (
            await post(
                client, upstream.base_url, {**CHAT, "logprobs": True, "return_token_ids": True}
            )
        ).json()
        only_logprobs = (await post(client, upstream.base_url, {**CHAT, "logprobs": True})).json()
        only_ids = (
            await post(client, upstream.base_url, {**CHAT, "return_token_ids": True})
        ).json()

    assert both["prompt_token_ids"] == prompt_token_ids(CHAT)
    choice = both["choices"][0]
    assert choice["token_ids"] == expected_ids
    entries = choice["logprobs"]["content"]
    assert [token_id(e["token"].strip()) for e in entries] == expected_ids
    assert [e["logprob"] for e in entries] == [token_logprob(t) for t in expected_ids]
    assert all(e["bytes"] is None and e["top_logprobs"] == [] for e in entries)
    assert "".join(e["token"] for e in entries).startswith("the answer is 42bash")
    assert both["usage"]["completion_tokens"] == len(expected_ids)
    assert both["usage"]["prompt_tokens"] == len(both["prompt_token_ids"])

    assert only_logprobs["choices"][0]["logprobs"]["content"] == entries
    assert "token_ids" not in only_logprobs["choices"][0]
    assert "prompt_token_ids" not in only_logprobs

    assert only_ids["choices"][0]["logprobs"] is None
    assert only_ids["choices"][0]["token_ids"] == expected_ids
    assert only_ids["prompt_token_ids"] == prompt_token_ids(CHAT)


async def test_streamed_token_data(client: httpx.AsyncClient) -> None:
    reply = Reply(content="the answer is 42", tool_calls=[("bash", TOOL_ARGS)])
    body = {**CHAT, "stream": True, "logprobs": True, "return_token_ids": True}
    async with StandIn(reply) as upstream:
        chunks = await stream(client, upstream.base_url, body)
        plain = await stream(client, upstream.base_url, {**CHAT, "stream": True})
    assert chunks[0]["prompt_token_ids"] == prompt_token_ids(CHAT)
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    for c in chunks[1:-1]:
        choice = c["choices"][0]
        assert len(choice["token_ids"]) == len(choice["logprobs"]["content"]) == 1
    whole = assemble(chunks)
    assert whole["token_ids"] == completion_token_ids(reply)
    assert [e["logprob"] for e in whole["logprobs"]] == [
        token_logprob(t) for t in whole["token_ids"]
    ]
    assert all("token_ids" not in c["choices"][0] for c in plain)
    assert all(c["choices"][0]["logprobs"] is None for c in plain)


async def test_error_statuses(client: httpx.AsyncClient) -> None:
    replies = [
        Reply(status=429, error_message="slow down"),
        Reply(status=503),
        Reply(status=401),
    ]
    async with StandIn(replies) as upstream:
        r429 = await post(client, upstream.base_url, CHAT)
        r503 = await post(client, upstream.base_url, {**CHAT, "stream": True})
        r401 = await post(client, upstream.base_url, CHAT)
        bad = await client.post(f"{upstream.base_url}/chat/completions", content=b"{not json")
    assert r429.status_code == 429
    assert r429.json()["error"]["message"] == "slow down"
    assert r429.json()["error"]["type"] == "rate_limit_error"
    assert r503.status_code == 503, "a refused stream is a JSON error, not SSE"
    assert r503.headers["content-type"].startswith("application/json")
    assert r503.json()["error"]["type"] == "server_error"
    assert r401.json()["error"]["type"] == "authentication_error"
    assert bad.status_code == 400 and "error" in bad.json()


async def test_delays(client: httpx.AsyncClient) -> None:
    replies = [Reply(content="x", delay_sec=0.3), Reply(content="a b c d", chunk_delay_sec=0.05)]
    async with StandIn(replies) as upstream:
        t0 = time.monotonic()
        await post(client, upstream.base_url, CHAT)
        t1 = time.monotonic()
        chunks = await stream(client, upstream.base_url, {**CHAT, "stream": True})
        t2 = time.monotonic()
    assert t1 - t0 >= 0.3
    # 6 chunks and [DONE]: 6 gaps of 50 ms.
    assert len(chunks) == 6
    assert t2 - t1 >= 0.3


async def test_hang_ends_when_stopped(client: httpx.AsyncClient) -> None:
    upstream = await StandIn(Reply(content="never", hang=True)).start()
    request = asyncio.create_task(post(client, upstream.base_url, CHAT))
    stuck = asyncio.create_task(
        stream(client, upstream.base_url, {**CHAT, "stream": True, "messages": []})
    )
    await upstream.wait_for_requests(2)
    await asyncio.sleep(0.2)
    assert not request.done() and not stuck.done()
    t0 = time.monotonic()
    await upstream.stop()
    with pytest.raises(httpx.TransportError):
        await asyncio.wait_for(request, 1.0)
    with pytest.raises(httpx.TransportError):
        await asyncio.wait_for(stuck, 1.0)
    assert time.monotonic() - t0 < 1.0


async def test_mid_stream_stop_closes_connection(client: httpx.AsyncClient) -> None:
    upstream = await StandIn(Reply(content="a " * 100, chunk_delay_sec=0.1)).start()
    task = asyncio.create_task(stream(client, upstream.base_url, {**CHAT, "stream": True}))
    await asyncio.sleep(0.3)
    t0 = time.monotonic()
    await upstream.stop()
    with pytest.raises(httpx.TransportError):
        await asyncio.wait_for(task, 1.0)
    assert time.monotonic() - t0 < 1.0


async def test_records_requests(client: httpx.AsyncClient) -> None:
    body = {**CHAT, "user": "rollout-7"}
    headers = {"Authorization": "Bearer sk-upstream", "X-Trialbox-Rollout": "rollout-7"}
    async with StandIn() as upstream:
        before = time.time()
        await client.post(f"{upstream.base_url}/chat/completions", json=body, headers=headers)
        await client.get(f"{upstream.base_url}/models?x=1")
    first, second = upstream.requests
    assert (first.method, first.path) == ("POST", "/v1/chat/completions")
    assert first.headers["authorization"] == "Bearer sk-upstream"
    assert first.headers["x-trialbox-rollout"] == "rollout-7"
    assert first.body == body and first.body["user"] == "rollout-7"
    assert before <= first.time <= second.time
    assert (second.method, second.path, second.query, second.body) == (
        "GET",
        "/v1/models",
        "x=1",
        None,
    )
    assert upstream.chat_requests() == [first]


async def test_pass_through_echo(client: httpx.AsyncClient) -> None:
    async with StandIn() as upstream:
        responses = await client.post(f"{upstream.base_url}/responses", json={"input": "hi"})
        messages = await client.post(f"{upstream.url}/v1/messages", json={"max_tokens": 5})
        get_chat = await client.get(f"{upstream.base_url}/chat/completions")
    assert responses.json() == {"path": "/v1/responses", "method": "POST", "echo": {"input": "hi"}}
    assert messages.json()["echo"] == {"max_tokens": 5}
    assert get_chat.json() == {"path": "/v1/chat/completions", "method": "GET", "echo": None}
    assert [r.path for r in upstream.requests] == [
        "/v1/responses",
        "/v1/messages",
        "/v1/chat/completions",
    ]


async def test_policy_forms(client: httpx.AsyncClient) -> None:
    seen: list[tuple[str, int]] = []

    def policy(body: dict[str, Any], index: int) -> Reply:
        seen.append((body["messages"][0]["content"], index))
        return Reply(content=f"reply {index}")

    async with StandIn(policy) as upstream:
        for word in ["a", "b"]:
            body = {"messages": [{"role": "user", "content": word}]}
            r = await post(client, upstream.base_url, body)
            assert r.json()["model"] == "standin-model", "the server's model when none is sent"
    assert seen == [("a", 0), ("b", 1)]

    async with StandIn([Reply(content="first"), Reply(content="then")]) as upstream:
        answers = [
            (await post(client, upstream.base_url, CHAT)).json()["choices"][0]["message"]
            for _ in range(4)
        ]
    assert [a["content"] for a in answers] == ["first", "then", "then", "then"]


async def test_shell_solver_drives_a_tool_loop(client: httpx.AsyncClient) -> None:
    commands = ["ls -la", "cat answer.txt"]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "solve it"}]
    ran: list[str] = []
    async with StandIn(shell_solver(commands, "All done.")) as upstream:
        for _ in range(5):
            body = {"model": "m", "messages": messages, "tools": []}
            message = (await post(client, upstream.base_url, body)).json()["choices"][0]["message"]
            messages.append(message)
            if not message.get("tool_calls"):
                break
            for call in message["tool_calls"]:
                assert call["function"]["name"] == "bash"
                ran.append(json.loads(call["function"]["arguments"])["command"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
        # A fresh conversation starts over: the step comes from the messages, not the count.
        fresh = await post(client, upstream.base_url, {"messages": messages[:1]})
    assert ran == commands
    assert messages[-1]["content"] == "All done."
    assert fresh.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == (
        json.dumps({"command": "ls -la"})
    )


def test_thread_variant() -> None:
    with StandInThread([Reply(content="from a thread"), Reply(hang=True)]) as upstream:
        assert upstream.base_url.startswith("http://127.0.0.1:")
        with httpx.Client(timeout=10) as c:
            r = c.post(f"{upstream.base_url}/chat/completions", json=CHAT)
            assert r.json()["choices"][0]["message"]["content"] == "from a thread"
            assert upstream.requests[0].body == CHAT
            assert c.get(f"{upstream.base_url}/models").json()["data"][0]["id"] == "standin-model"
    # stopped; a new one with a hung request stops within a second
    upstream = StandInThread(Reply(hang=True)).start()
    errors: list[BaseException] = []

    def hung() -> None:
        try:
            httpx.post(f"{upstream.base_url}/chat/completions", json=CHAT, timeout=10)
        except httpx.TransportError as exc:
            errors.append(exc)

    t = threading.Thread(target=hung)
    t.start()
    upstream.wait_for_requests(1)
    t0 = time.monotonic()
    upstream.stop()
    t.join(2)
    assert not t.is_alive() and errors
    assert time.monotonic() - t0 < 1.0


async def test_thread_variant_from_a_busy_loop() -> None:
    """The thread's server answers while this loop only blocks, as a busy test loop would."""
    with StandInThread(Reply(content="hi")) as upstream:
        # Blocking on purpose: this loop is stuck, the thread's loop still answers.
        r = httpx.post(f"{upstream.base_url}/chat/completions", json=CHAT, timeout=10)  # noqa: ASYNC210
    assert r.json()["choices"][0]["message"]["content"] == "hi"


def test_as_a_process() -> None:
    command = [
        sys.executable,
        "-m",
        "tests.support.standin",
        "--model",
        "bench",
        "--delay-ms",
        "50",
    ]
    with subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            base_url = proc.stdout.readline().strip()
            assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
            assert httpx.get(f"{base_url}/models").json()["data"][0]["id"] == "bench"
            t0 = time.monotonic()
            r = httpx.post(f"{base_url}/chat/completions", json=CHAT, timeout=10)
            assert time.monotonic() - t0 >= 0.05
            assert r.json()["choices"][0]["message"]["content"] == "ok"
            proc.terminate()
            assert proc.wait(5) == 0, "SIGTERM stops it cleanly"
        finally:
            if proc.poll() is None:
                proc.kill()


SCRIPT_YAML = """\
- content: Let me look.
  tool_calls:
    - name: bash
      arguments: {command: ls -la}
- tool_calls:
    - type: function
      function: {name: bash, arguments: '{"command": "cat answer.txt"}'}
- All done.
"""


async def test_a_script_is_played_per_conversation(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    """Answer N to each conversation's N-th model call, streamed or not; a fresh conversation
    starts over; past the end, a text reply with no tool call names the script."""
    script = tmp_path / "solve.yaml"
    script.write_text(SCRIPT_YAML)
    first: dict[str, Any] = {"role": "user", "content": "solve it"}
    messages: list[dict[str, Any]] = [first]
    answers: list[dict[str, Any]] = []
    async with StandIn(script_policy(script)) as upstream:
        for turn in range(4):
            body = {"model": "m", "messages": messages, "stream": turn == 1}
            if turn == 1:  # the same answer as SSE chunks, tool call arguments in pieces
                whole = assemble(await stream(client, upstream.base_url, body))
                message = {
                    "role": "assistant",
                    "content": whole["content"],
                    "tool_calls": [
                        {"id": c["id"], "type": "function",
                         "function": {"name": c["name"], "arguments": c["arguments"]}}
                        for c in whole["calls"]
                    ],
                }  # fmt: skip
            else:
                message = (await post(client, upstream.base_url, body)).json()["choices"][0][
                    "message"
                ]
            answers.append(message)
            messages.append(message)
            for call in message.get("tool_calls") or []:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
        fresh = (await post(client, upstream.base_url, {"messages": [first]})).json()
    calls = [
        [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in a["tool_calls"]]
        for a in answers[:2]
    ]
    assert calls == [[("bash", {"command": "ls -la"})], [("bash", {"command": "cat answer.txt"})]]
    assert answers[0]["content"] == "Let me look."
    assert answers[2] == {"role": "assistant", "content": "All done."}
    assert "tool_calls" not in answers[3]
    assert "script exhausted" in answers[3]["content"] and str(script) in answers[3]["content"]
    assert fresh["choices"][0]["message"]["content"] == "Let me look."


def test_a_json_script_reads_as_the_yaml_one(tmp_path: Path) -> None:
    yaml_file, json_file = tmp_path / "a.yaml", tmp_path / "a.json"
    yaml_file.write_text(SCRIPT_YAML)
    json_file.write_text(
        json.dumps(
            [
                {"role": "assistant", "content": "Let me look.",
                 "tool_calls": [{"name": "bash", "arguments": {"command": "ls -la"}}]},
                {"tool_calls": [{"function": {"name": "bash",
                                              "arguments": '{"command": "cat answer.txt"}'}}]},
                "All done.",
            ]
        )
    )  # fmt: skip
    assert load_script(json_file) == load_script(yaml_file)
    assert [r.finish() for r in load_script(json_file)] == ["tool_calls", "tool_calls", "stop"]


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ('["fine", 7]', "entry 2", "a text reply (a string) or an assistant message"),
        ('["fine", {"contents": "x"}]', "entry 2", "unknown key(s) ['contents']"),
        ('[{"role": "user", "content": "x"}]', "entry 1", "only assistant messages"),
        ('[{"tool_calls": []}]', "entry 1", "needs content or tool_calls"),
        ('["a", {"tool_calls": [{"arguments": {}}]}]', "entry 2, tool call 1", "name:"),
        ('[{"tool_calls": [{"name": "b", "arguments": "{"}]}]', "entry 1, tool call 1", "not JSON"),
        ('[{"tool_calls": [{"name": "b", "arguments": [1]}]}]', "entry 1, tool call 1", "object"),
        ("[]", "", "a non-empty list of answers"),
        ('{"answers": []}', "", "a non-empty list of answers"),
        ('["a", ', "", "not valid json"),
    ],
)
def test_a_broken_script_is_named_by_file_and_entry(
    tmp_path: Path, text: str, where: str, what: str
) -> None:
    script = tmp_path / "broken.json"
    script.write_text(text)
    with pytest.raises(ScriptError) as caught:
        load_script(script)
    message = str(caught.value)
    assert message.startswith(f"{script}: {where}")
    assert what in message


def test_a_missing_script_is_named(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match=r"nowhere\.yaml: cannot be read"):
        load_script(tmp_path / "nowhere.yaml")
