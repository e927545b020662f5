"""Token drift: whether a trial's model calls stayed one prefix-extending token sequence.

End to end, the gateway on its unix socket against the stand-in (whose prompt ids end with
the generation prompt, as a chat template's do, so an answer sent back as it came extends the
prompt): conversations that extend their history, re-render it, or cut it, whole and
streamed, and one without token ids. Then the verdict on hand-made records for the cases a
conversation through the stand-in does not reach. No Docker.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from orchestrator.gateway.drift import token_drift
from orchestrator.gateway.record import Exchange, GatewayRecord
from orchestrator.gateway.server import Gateway
from orchestrator.gateway.slot import Slot
from orchestrator.gateway.stream import ChunkAssembler
from tests.gateway.test_gateway import TRIAL, Agent, model_config
from tests.support.standin import (
    Reply,
    StandIn,
    by_turn,
    completion_token_ids,
    prompt_token_ids,
)

SYSTEM = {"role": "system", "content": "You are a careful engineer with a bash tool."}
TASK = {"role": "user", "content": "Find the largest file under /data and report its size."}
LIST = Reply(
    content="<think> start by listing the folder </think> Let me look.",
    tool_calls=[("bash", json.dumps({"command": "ls -la /data"}))],
)
SIZE = Reply(tool_calls=[("bash", json.dumps({"command": "du -a /data | sort -n | tail -1"}))])
DONE = Reply(content="The largest file is /data/big.bin at 4096 bytes.")
SCRIPT = by_turn([LIST, SIZE], DONE)


@pytest.fixture
async def scripted() -> AsyncIterator[StandIn]:
    async with StandIn(SCRIPT) as server:
        yield server


class Conversation:
    """The agent's side: sends its messages, keeps each answer's message and the bodies."""

    def __init__(self, agent: Agent, *, stream: bool = False) -> None:
        self.agent = agent
        self.stream = stream
        self.messages: list[dict[str, Any]] = [SYSTEM, TASK]
        self.bodies: list[dict[str, Any]] = []

    async def call(self, messages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """One model call with `messages` (else the conversation so far); the answer's
        message, which the conversation then carries, as an agent would send it back."""
        if messages is not None:
            self.messages = messages
        body = {"model": "m", "messages": list(self.messages), "tools": []}
        self.bodies.append(body)
        if self.stream:
            chunks, done = await self.agent.stream(body)
            assert done
            assembler = ChunkAssembler()
            assembler.feed("".join(f"data: {json.dumps(c)}\n" for c in chunks).encode())
            message = assembler.result()["choices"][0]["message"]
        else:
            status, answer = await self.agent.post(body)
            assert status == 200, answer
            message = answer["choices"][0]["message"]
        sent = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            sent["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": c["function"]}
                for c in message["tool_calls"]
            ]
        self.messages = [*self.messages, sent]
        for call in sent.get("tool_calls", []):
            self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
        return sent


async def _slot(gateway: Gateway, upstream: StandIn, **kwargs: Any) -> Slot:
    return await gateway.open_slot(
        trial_id=TRIAL, rollout_id=None, model=model_config(upstream, **kwargs)
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_conversation_that_extends_its_prefix_has_no_drift(
    gateway: Gateway, scripted: StandIn, stream: bool
) -> None:
    slot = await _slot(gateway, scripted, request_token_ids=True)
    agent = Agent(slot)
    try:
        talk = Conversation(agent, stream=stream)
        for _ in range(3):
            await talk.call()
    finally:
        await agent.session.close()
    await gateway.close_slot(slot)

    drift = slot.record.token_drift
    assert drift is not None and drift.kind == "none", drift
    assert (drift.calls, drift.diverged_calls, drift.call) == (3, 0, None)
    assert drift.detail.startswith("all 3 calls: each prompt extends the previous")
    saved = json.loads(slot.record.model_dump_json())  # agent/gateway.json
    assert saved["token_drift"]["kind"] == "none"


async def test_a_re_rendered_history_is_reported_at_the_first_diverging_call(
    gateway: Gateway, scripted: StandIn
) -> None:
    """The agent sends its first answer back without the reasoning (as chat templates that
    drop earlier thinking do): the text reads on, the tokens do not."""
    slot = await _slot(gateway, scripted, request_token_ids=True)
    agent = Agent(slot)
    try:
        talk = Conversation(agent)
        first = await talk.call()
        assert first["content"].startswith("<think>")
        stripped = {**first, "content": "Let me look."}
        await talk.call([SYSTEM, TASK, stripped, *talk.messages[3:]])
        await talk.call()
    finally:
        await agent.session.close()
    await gateway.close_slot(slot)

    drift = slot.record.token_drift
    assert drift is not None and drift.kind == "re-rendered", drift
    before = prompt_token_ids(talk.bodies[0])
    expected = before + completion_token_ids(LIST)
    assert (drift.call, drift.previous_call) == (1, 0)
    assert drift.first_difference == len(before)  # where the answer's tokens start
    assert drift.previous_prompt_tokens == len(before)
    assert drift.previous_tokens == len(expected)
    assert drift.prompt_tokens == len(prompt_token_ids(talk.bodies[1]))
    assert (drift.calls, drift.diverged_calls) == (3, 1)  # the third call extends the second
    assert "call 1's prompt" in drift.detail and "re-rendered" in drift.detail


async def test_a_summarised_context_is_reported_as_truncated(
    gateway: Gateway, scripted: StandIn
) -> None:
    slot = await _slot(gateway, scripted, request_token_ids=True)
    agent = Agent(slot)
    try:
        talk = Conversation(agent)
        await talk.call()
        await talk.call()
        summary = {"role": "user", "content": "Summary: listed /data, ran du. Go on."}
        await talk.call([SYSTEM, summary])
    finally:
        await agent.session.close()
    await gateway.close_slot(slot)

    drift = slot.record.token_drift
    assert drift is not None and drift.kind == "truncated", drift
    assert (drift.call, drift.previous_call) == (2, 1)
    # The system message and the next role token (user) are all the calls still share: the
    # system message's ids, less the generation prompt, plus one.
    assert drift.first_difference == len(prompt_token_ids({"messages": [SYSTEM]}))
    previous = prompt_token_ids(talk.bodies[1]) + completion_token_ids(SIZE)
    assert drift.previous_tokens == len(previous)
    assert drift.prompt_tokens == len(prompt_token_ids(talk.bodies[2])) < len(previous)
    assert "summarised or truncated" in drift.detail


async def test_without_token_ids_drift_is_unknown_and_says_why(
    gateway: Gateway, scripted: StandIn
) -> None:
    slot = await _slot(gateway, scripted)  # request_token_ids off: the stand-in sends none
    agent = Agent(slot)
    try:
        talk = Conversation(agent)
        await talk.call()
        await talk.call()
    finally:
        await agent.session.close()
    await gateway.close_slot(slot)

    drift = slot.record.token_drift
    assert drift is not None and drift.kind == "unknown", drift
    assert (drift.call, drift.calls) == (0, 2)
    assert "no prompt token ids" in drift.detail and "--token-ids" in drift.detail


async def test_a_slot_nobody_called_is_unknown(gateway: Gateway, scripted: StandIn) -> None:
    slot = await _slot(gateway, scripted, request_token_ids=True)
    await gateway.close_slot(slot)

    drift = slot.record.token_drift
    assert drift is not None and drift.kind == "unknown"
    assert drift.calls == 0 and "no chat completion succeeded" in drift.detail


# -- the verdict on hand-made records --------------------------------------------------------


def _exchange(
    index: int,
    prompt: list[int] | None,
    *completions: list[int] | None,
    status: int = 200,
    asked: bool = True,
) -> Exchange:
    choices: list[dict[str, Any]] = []
    for ids in completions or ([1],):
        choice: dict[str, Any] = {"index": len(choices), "message": {"role": "assistant"}}
        if ids is not None:
            choice["token_ids"] = ids
        choices.append(choice)
    response: dict[str, Any] = {"choices": choices}
    if prompt is not None:
        response["prompt_token_ids"] = prompt
    return Exchange(
        index=index, method="POST", path="/v1/chat/completions", started_at=datetime.now(UTC),
        latency_sec=0.1, status_code=status, request={"return_token_ids": asked},
        response=response, error=None if status == 200 else f"upstream answered {status}",
    )  # fmt: skip


def _drift(*exchanges: Exchange) -> Any:
    return token_drift(GatewayRecord(trial_id="t", exchanges=list(exchanges)))


def test_one_call_has_nothing_to_diverge_from() -> None:
    drift = _drift(_exchange(0, [1, 2], [3]))
    assert (drift.kind, drift.calls) == ("none", 1)


def test_failed_calls_are_left_out_of_the_comparison() -> None:
    """A 502 retried with the same prompt: the retry is compared with the call before."""
    drift = _drift(
        _exchange(0, [1, 2], [3]),
        _exchange(1, None, None, status=502),
        _exchange(2, [1, 2, 3, 4], [5]),
    )
    assert (drift.kind, drift.calls) == ("none", 2)


def test_the_same_prompt_again_is_a_context_cut_back() -> None:
    drift = _drift(_exchange(0, [1, 2], [3, 4]), _exchange(1, [1, 2], [5]))
    assert (drift.kind, drift.first_difference, drift.prompt_tokens) == ("truncated", 2, 2)
    assert "cut back" in drift.detail


def test_an_edit_deep_in_a_long_history_is_a_re_render() -> None:
    history = list(range(100))
    edited = [*history[:80], 999, *history[81:], 100, 101, 7]
    drift = _drift(_exchange(0, history, [100, 101]), _exchange(1, edited, [8]))
    assert (drift.kind, drift.first_difference) == ("re-rendered", 80)
    assert (drift.previous_tokens, drift.previous_prompt_tokens) == (102, 100)


def test_a_longer_prompt_that_shares_little_is_a_replaced_context() -> None:
    drift = _drift(_exchange(0, list(range(100)), [1]), _exchange(1, [0, 1, *[7] * 200], [2]))
    assert (drift.kind, drift.first_difference) == ("truncated", 2)
    assert "less than half" in drift.detail


def test_the_choice_the_conversation_went_on_with_counts() -> None:
    drift = _drift(_exchange(0, [1], [2], [3]), _exchange(1, [1, 3, 4], [5]))
    assert drift.kind == "none"


def test_a_divergence_wins_over_calls_without_ids_and_all_divergences_are_counted() -> None:
    drift = _drift(
        _exchange(0, [1], [2]),
        _exchange(1, None, [3], asked=False),
        _exchange(2, [1, 2, 9], [4]),
        _exchange(3, [1, 2, 8, 4, 6], [5]),
        _exchange(4, [1, 2, 8, 4, 6, 5, 9], [7]),
    )
    assert (drift.kind, drift.call, drift.previous_call) == ("re-rendered", 3, 2)
    assert (drift.calls, drift.diverged_calls) == (5, 1)


def test_ids_asked_for_but_not_returned_say_so() -> None:
    drift = _drift(_exchange(0, [1], [2]), _exchange(1, [1, 2, 3], None))
    assert (drift.kind, drift.call) == ("unknown", 1)
    assert "no completion token ids" in drift.detail and "returned none" in drift.detail


def test_a_long_context_finds_the_first_difference_exactly() -> None:
    context = list(range(200_000))
    for at in (0, 1, 77_777, 199_999):
        edited = [*context[:at], -1, *context[at + 1 :], 5]
        drift = _drift(_exchange(0, context[:-1], [context[-1]]), _exchange(1, edited, [6]))
        assert drift.first_difference == at
