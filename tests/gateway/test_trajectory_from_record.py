"""The gateway's record of a trial, rebuilt as an ATIF trajectory."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from container_runtime.atif import validate_trajectory
from container_runtime.trajectory import messages_from_trajectory
from orchestrator.gateway.record import Exchange, GatewayRecord, Usage
from orchestrator.gateway.trajectory import message_key, trajectory_from_record

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SYSTEM = {"role": "system", "content": "You fix bugs."}
USER = {"role": "user", "content": "Fix the failing test."}
TOOLS = [{"type": "function", "function": {"name": "sh", "parameters": {"type": "object"}}}]


def tool_call(call_id: str, command: str) -> dict[str, Any]:
    arguments = json.dumps({"command": command})
    return {"id": call_id, "type": "function", "function": {"name": "sh", "arguments": arguments}}


A1: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [tool_call("c1", "pytest")],
}
T1 = {"role": "tool", "tool_call_id": "c1", "content": "1 failed"}
A2 = {"role": "assistant", "content": "Patching.", "tool_calls": [tool_call("c2", "sed -i x")]}
T2 = {"role": "tool", "tool_call_id": "c2", "content": ""}
A3 = {"role": "assistant", "content": "Fixed."}


def exchange(
    index: int,
    messages: list[dict[str, Any]],
    *answers: dict[str, Any],
    usage: dict[str, Any] | None = None,
    response: dict[str, Any] | None = None,
    **fields: Any,
) -> Exchange:
    """A successful chat completion answered with ``answers`` (one choice each)."""
    choices = [
        {"index": i, "message": {"refusal": None, "annotations": [], **a}, "finish_reason": "stop"}
        for i, a in enumerate(answers)
    ]
    body = {
        "id": f"chatcmpl-{index}",
        "object": "chat.completion",
        "model": "tiny",
        "choices": choices,
        "usage": {"prompt_tokens": 10 * (index + 1), "completion_tokens": 5, "total_tokens": 0}
        if usage is None
        else usage,
        **(response or {}),
    }
    values: dict[str, Any] = {
        "index": index,
        "method": "POST",
        "path": "/v1/chat/completions",
        "started_at": T0 + timedelta(seconds=10 * index),
        "latency_sec": 1.5,
        "status_code": 200,
        "request": {"model": "tiny", "messages": messages, "tools": TOOLS},
        "response": body,
    }
    values.update(fields)
    return Exchange(**values)


def record(*exchanges: Exchange) -> GatewayRecord:
    return GatewayRecord(
        trial_id="trial-7",
        rollout_id="r-1",
        model="tiny",
        exchanges=list(exchanges),
        usage=Usage(calls=len(exchanges), prompt_tokens=1, completion_tokens=2),
    )


def build(rec: GatewayRecord) -> dict[str, Any]:
    doc = trajectory_from_record(rec, agent_name="mini", agent_version="1.2")
    doc = json.loads(json.dumps(doc))  # what a file would hold
    validate_trajectory(doc)
    return doc


def linear() -> GatewayRecord:
    return record(
        exchange(0, [SYSTEM, USER], A1),
        exchange(1, [SYSTEM, USER, A1, T1], A2),
        exchange(2, [SYSTEM, USER, A1, T1, A2, T2], A3),
    )


def sources(doc: dict[str, Any]) -> list[str]:
    return [step["source"] for step in doc["steps"]]


def test_linear_conversation_gives_one_step_per_message() -> None:
    doc = build(linear())
    conversation = [SYSTEM, USER, A1, T1, A2, T2, A3]
    assert sources(doc) == ["system", "user", "agent", "agent", "agent"]
    assert len(doc["steps"]) == len([m for m in conversation if m["role"] != "tool"])
    assert messages_from_trajectory(doc) == conversation
    assert [s["extra"]["gateway"] for s in doc["steps"][2:]] == [
        {"exchange_index": i, "finish_reason": "stop"} for i in range(3)
    ]


def test_root_metadata() -> None:
    doc = build(linear())
    assert doc["schema_version"] == "ATIF-v1.7"
    assert doc["session_id"] == "trial-7"
    assert doc["agent"] == {
        "name": "mini",
        "version": "1.2",
        "model_name": "tiny",
        "tool_definitions": TOOLS,
    }
    assert doc["final_metrics"] == {
        "total_steps": 5,
        "total_prompt_tokens": 10 + 20 + 30,
        "total_completion_tokens": 15,
    }
    assert doc["extra"] == {
        "trial_id": "trial-7",
        "rollout_id": "r-1",
        "exchanges": 3,
        "chat_completions": 3,
        "skipped_exchanges": 0,
        "skipped": [],
        "gateway_usage": {"calls": 3, "prompt_tokens": 1, "completion_tokens": 2},
    }


def test_tool_calls_and_results_become_tool_calls_and_observation() -> None:
    first_agent = build(linear())["steps"][2]
    assert first_agent["message"] == ""
    assert first_agent["tool_calls"] == [
        {"tool_call_id": "c1", "function_name": "sh", "arguments": {"command": "pytest"}}
    ]
    assert first_agent["observation"] == {
        "results": [{"source_call_id": "c1", "content": "1 failed"}]
    }


def test_timestamps_when_first_seen_and_when_answered() -> None:
    steps = build(linear())["steps"]
    assert steps[1]["timestamp"] == T0.isoformat()
    assert steps[2]["timestamp"] == (T0 + timedelta(seconds=1.5)).isoformat()
    assert steps[4]["timestamp"] == (T0 + timedelta(seconds=21.5)).isoformat()


def test_token_ids_and_logprobs_are_carried_to_metrics() -> None:
    rec = record(
        exchange(
            0,
            [SYSTEM, USER],
            {"role": "assistant", "content": "Hi", "reasoning": "greet"},
            usage={
                "prompt_tokens": 3,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 1},
                "completion_tokens_details": {"reasoning_tokens": 1},
            },
            response={"prompt_token_ids": [101, 102, 103], "model": "tiny-0105"},
        )
    )
    choice = rec.exchanges[0].response["choices"][0]
    choice["token_ids"] = [7, 8]
    choice["logprobs"] = {
        "content": [
            {"token": "H", "logprob": -0.25, "top_logprobs": []},
            {"token": "i", "logprob": 0, "top_logprobs": []},
        ]
    }
    doc = build(rec)
    agent = doc["steps"][2]
    assert agent["metrics"] == {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "cached_tokens": 1,
        "prompt_token_ids": [101, 102, 103],
        "completion_token_ids": [7, 8],
        "logprobs": [-0.25, 0.0],
        "extra": {"reasoning_tokens": 1},
    }
    assert agent["model_name"] == "tiny-0105"  # differs from the agent's default
    assert agent["reasoning_content"] == "greet"
    assert doc["final_metrics"]["total_cached_tokens"] == 1


def test_counts_fall_back_to_the_exchange_when_usage_is_missing() -> None:
    rec = record(
        exchange(0, [USER], A3, usage={}, prompt_tokens=7, completion_tokens=3, streamed=True)
    )
    assert build(rec)["steps"][1]["metrics"] == {"prompt_tokens": 7, "completion_tokens": 3}


def test_an_echo_without_reasoning_or_with_empty_content_still_continues() -> None:
    answer = {**A1, "reasoning_content": "run the tests first"}
    echoed = {"role": "assistant", "content": "", "tool_calls": A1["tool_calls"]}
    doc = build(record(exchange(0, [USER], answer), exchange(1, [USER, echoed, T1], A3)))
    assert sources(doc) == ["user", "agent", "agent"]
    assert "context_diverged_at" not in doc["steps"][2]["extra"]["gateway"]
    assert doc["steps"][1]["reasoning_content"] == "run the tests first"


def test_a_restarted_context_does_not_duplicate_steps() -> None:
    restart = {"role": "assistant", "content": "Starting over."}
    doc = build(
        record(
            exchange(0, [SYSTEM, USER], A1),
            exchange(1, [SYSTEM, USER, A1, T1], A3),
            exchange(2, [SYSTEM, USER], restart),
        )
    )
    assert sources(doc) == ["system", "user", "agent", "agent", "agent"]
    assert doc["steps"][-1]["message"] == "Starting over."
    assert doc["steps"][-1]["extra"]["gateway"]["context_diverged_at"] == 2


def test_a_summarised_context_adds_only_the_new_messages() -> None:
    summary = {"role": "user", "content": "Summary: pytest showed 1 failure."}
    doc = build(
        record(
            exchange(0, [SYSTEM, USER], A1),
            exchange(1, [SYSTEM, USER, A1, T1], A2),
            exchange(2, [SYSTEM, USER, summary], A3),
        )
    )
    assert sources(doc) == ["system", "user", "agent", "agent", "user", "agent"]
    assert doc["steps"][4]["message"] == summary["content"]


def test_a_pruned_tool_result_is_not_taken_for_a_new_one() -> None:
    pruned = {**T1, "content": "[output removed]"}
    go_on = {"role": "user", "content": "Continue."}
    doc = build(
        record(
            exchange(0, [SYSTEM, USER], A1),
            exchange(1, [SYSTEM, USER, A1, T1], A2),
            exchange(2, [SYSTEM, USER, A1, pruned, A2, T2, go_on], A3),
        )
    )
    assert sources(doc) == ["system", "user", "agent", "agent", "user", "agent"]
    assert doc["steps"][2]["observation"]["results"] == [
        {"source_call_id": "c1", "content": "1 failed"}
    ]
    # T2 answered c2 for the first time, so it is new even though the context diverged.
    assert doc["steps"][3]["observation"]["results"] == [{"source_call_id": "c2", "content": ""}]
    assert doc["steps"][-1]["extra"]["gateway"]["context_diverged_at"] == 3


def test_a_retried_request_adds_only_its_answer() -> None:
    bad = {"role": "assistant", "content": "bad"}
    doc = build(record(exchange(0, [USER], bad), exchange(1, [USER], A3)))
    assert [(s["source"], s["message"]) for s in doc["steps"]] == [
        ("user", USER["content"]),
        ("agent", "bad"),
        ("agent", "Fixed."),
    ]


def test_failed_and_other_exchanges_are_skipped_and_counted() -> None:
    rec = record(
        exchange(0, [SYSTEM, USER], A1),
        exchange(1, [SYSTEM, USER, A1, T1], status_code=502, error="upstream answered 502"),
        exchange(2, [], method="GET", path="/v1/models", request=None, response={"data": []}),
        exchange(3, [SYSTEM, USER, A1, T1], status_code=429, limit="calls"),
        exchange(4, [SYSTEM, USER, A1, T1], response={"choices": []}),
        exchange(5, [SYSTEM, USER, A1, T1], A3),
    )
    doc = build(rec)
    assert sources(doc) == ["system", "user", "agent", "agent"]
    assert [s["extra"]["gateway"]["exchange_index"] for s in doc["steps"][2:]] == [0, 5]
    assert "context_diverged_at" not in doc["steps"][3]["extra"]["gateway"]
    assert doc["extra"]["skipped_exchanges"] == 4
    assert [(s["index"], s["reason"]) for s in doc["extra"]["skipped"]] == [
        (1, "failed: upstream answered 502"),
        (2, "not a chat completion"),
        (3, "refused by the calls limit"),
        (4, "the response has no choice with a message"),
    ]
    assert doc["final_metrics"]["total_prompt_tokens"] == 10 + 60


def test_a_record_without_chat_completions_has_no_trajectory() -> None:
    rec = record(exchange(0, [USER], status_code=500, error="boom"))
    with pytest.raises(ValueError, match="no successful chat completion"):
        trajectory_from_record(rec, agent_name="mini", agent_version="1")


def test_the_choice_the_agent_went_on_with_is_the_step() -> None:
    first = {"role": "assistant", "content": "Option A"}
    second = {"role": "assistant", "content": "Option B"}
    doc = build(record(exchange(0, [USER], first, second), exchange(1, [USER, second], A3)))
    assert [s["message"] for s in doc["steps"]] == [USER["content"], "Option B", "Fixed."]
    assert doc["steps"][1]["extra"]["gateway"] == {
        "exchange_index": 0,
        "choice": 1,
        "choices": 2,
        "finish_reason": "stop",
    }


def test_streamed_tool_call_indexes_do_not_break_the_conversation() -> None:
    streamed = {**A1, "tool_calls": [{"index": 0, **A1["tool_calls"][0]}]}
    doc = build(record(exchange(0, [USER], streamed), exchange(1, [USER, A1, T1], A3)))
    assert sources(doc) == ["user", "agent", "agent"]
    assert "extra" not in doc["steps"][1]["tool_calls"][0]


def test_message_key_ignores_what_agents_change_when_echoing() -> None:
    assert message_key(A1) == message_key({**A1, "content": "", "reasoning_content": "x"})
    spelled = {"name": "sh", "arguments": '{"command":"pytest"}'}
    compact = {**A1, "tool_calls": [{**tool_call("c1", ""), "function": spelled}]}
    assert message_key(A1) == message_key(compact)
    assert message_key(A1) != message_key({**A1, "tool_calls": [tool_call("c9", "pytest")]})
    assert message_key(T1) != message_key({**T1, "tool_call_id": "c2"})
