"""Bad numbers from the agent's side of the gateway (issue 18, item 8): NaN, Infinity and
1e999 in a chat body, and known sampling values out of range, are a 400 in OpenAI's shape
naming the field (`param`), and nothing goes upstream. Keys the gateway does not know are the
agent's own and still pass. The stand-in upstream on 127.0.0.1; no Docker."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.gateway.sampling import Sampling
from orchestrator.gateway.server import Gateway
from orchestrator.gateway.slot import Slot
from tests.gateway.test_gateway import CHAT_PATH, ROLLOUT, TRIAL, Agent, agent_of, model_config
from tests.support.standin import StandIn

MESSAGES = '"messages": [{"role": "user", "content": "hi"}]'


async def post_raw(agent: Agent, raw: bytes) -> tuple[int, Any]:
    """POST bytes as they are: aiohttp's `json=` would write NaN for us, but not 1e999."""
    async with agent.session.post(
        f"http://gateway{CHAT_PATH}", data=raw,
        headers={**agent.headers(), "Content-Type": "application/json"},
    ) as response:  # fmt: skip
        return response.status, json.loads(await response.read())


async def slot_of(gateway: Gateway, upstream: StandIn, **kwargs: Any) -> Slot:
    model = model_config(upstream, **kwargs)
    return await gateway.open_slot(trial_id=TRIAL, rollout_id=ROLLOUT, model=model)


@pytest.mark.parametrize(
    ("fragment", "param", "shown"),
    [
        ('"temperature": NaN', "temperature", "NaN"),
        ('"top_p": Infinity', "top_p", "Infinity"),
        ('"temperature": 1e999', "temperature", "1e999"),
        ('"presence_penalty": -Infinity', "presence_penalty", "-Infinity"),
        (
            '"tools": [{"type": "function", "function": {"name": "f", "parameters": '
            '{"type": "object", "properties": {"x": {"type": "number", "maximum": 1e400}}}}}]',
            "tools[0].function.parameters.properties.x.maximum",
            "1e400",
        ),
    ],
)
async def test_a_non_finite_number_is_a_400_naming_its_field_and_never_goes_upstream(
    gateway: Gateway, upstream: StandIn, fragment: str, param: str, shown: str
) -> None:
    slot = await slot_of(gateway, upstream, sampling=Sampling(temperature=0.5))
    async with agent_of(slot) as agent:
        status, answer = await post_raw(agent, f"{{{MESSAGES}, {fragment}}}".encode())
    assert status == 400, answer
    error = answer["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"].startswith(f"bad request body: {param}: {shown} is not a JSON number")
    assert upstream.chat_requests() == [], "nothing reaches the upstream, as null or otherwise"
    (exchange,) = slot.record.exchanges
    assert exchange.status_code == 400 and param in (exchange.error or "")


async def test_a_long_body_parsed_off_the_loop_is_held_to_the_same_rule(
    gateway: Gateway, upstream: StandIn
) -> None:
    slot = await slot_of(gateway, upstream)
    long_text = "x" * (2 << 20)  # past the 1 MiB at which the parse leaves the loop
    raw = f'{{"messages": [{{"role": "user", "content": "{long_text}"}}], "top_p": NaN}}'
    async with agent_of(slot) as agent:
        status, answer = await post_raw(agent, raw.encode())
    assert status == 400 and answer["error"]["param"] == "top_p"
    assert upstream.chat_requests() == []


@pytest.mark.parametrize(
    ("extra", "param"),
    [({"temperature": 2.5}, "temperature"), ({"n": -3}, "n"), ({"top_k": -5}, "top_k"),
     ({"logit_bias": {"50256": 500}}, "logit_bias"), ({"min_p": 2}, "min_p")],
)  # fmt: skip
async def test_an_agents_known_sampling_value_out_of_range_is_a_400_naming_it(
    gateway: Gateway, upstream: StandIn, extra: dict[str, Any], param: str
) -> None:
    slot = await slot_of(gateway, upstream)
    body = {"messages": [{"role": "user", "content": "hi"}], **extra}
    async with agent_of(slot) as agent:
        status, answer = await agent.post(body)
    assert status == 400, answer
    assert answer["error"]["param"] == param and param in answer["error"]["message"]
    assert upstream.chat_requests() == []


async def test_keys_the_gateway_does_not_know_and_good_values_pass_unchanged(
    gateway: Gateway, upstream: StandIn
) -> None:
    """The agent's own request: unknown keys (tools, response_format, a server's extension)
    are not sampling defaults and are not the gateway's to refuse; good values merge over
    the trainer's defaults as before."""
    slot = await slot_of(
        gateway, upstream, sampling=Sampling(top_k=20, guided_choice=["a"]),
        extra_sampling_keys=["guided_choice"],
    )  # fmt: skip
    body = {
        "messages": [{"role": "user", "content": "hi"}], "temperature": 0.0, "top_k": 5,
        "response_format": {"type": "json_object"}, "some_extension": 1.5,
    }  # fmt: skip
    async with agent_of(slot) as agent:
        status, _answer = await agent.post(body)
    assert status == 200
    (seen,) = upstream.chat_requests()
    assert {k: seen.body[k] for k in ("temperature", "top_k", "guided_choice")} == {
        "temperature": 0.0,
        "top_k": 5,
        "guided_choice": ["a"],
    }
    assert seen.body["response_format"] == {"type": "json_object"}
    assert seen.body["some_extension"] == 1.5
