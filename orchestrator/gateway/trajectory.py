"""The trial's conversation as an ATIF trajectory, rebuilt from what the gateway recorded.

The gateway sees requests and answers, not the agent's conversation, so the conversation is
reconstructed: each chat-completion request normally repeats the previous request's messages
and the previous answer, then adds what happened since (tool results, a new user message).
Only those new messages become steps, followed by one agent step per exchange for its
answer, with the exchange's token counts, token ids and logprobs as its metrics. Tool
results become the observation of the agent step whose tool call they answer.

When a request does not extend the conversation (the agent restarted, summarised or pruned
its context), it is compared with what came before: the messages it shares with the last
request are skipped as usual, and of the rest only those never seen before become steps, so
no step is duplicated (a tool call or a tool result counts as seen by its tool-call id too,
so a copy the agent shortened is not taken for a new one). The agent step then says where
the context diverged (``extra.gateway.context_diverged_at``). Messages are compared on role,
text, tool calls and tool-call id, so an agent that echoes an answer without its reasoning,
or with ``""`` for a ``null`` content, still continues the conversation.

`trajectory_from_record` turns a `GatewayRecord` into that trajectory.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from container_runtime import atif
from container_runtime.atif_builder import StepBuilder
from orchestrator.gateway.record import Exchange, GatewayRecord

CHAT_COMPLETIONS_PATH = "/chat/completions"


def trajectory_from_record(
    record: GatewayRecord, *, agent_name: str, agent_version: str
) -> dict[str, Any]:
    """An ATIF document (a JSON-ready dict, validated) of the record's chat completions.

    Exchanges that are not chat completions, or that failed or were refused, are left out;
    the root ``extra`` counts them (``skipped_exchanges``) and says why (``skipped``). Raises
    ValueError when no exchange is left, since an ATIF trajectory needs at least one step.
    """
    chats: list[Exchange] = []
    skipped: list[dict[str, Any]] = []
    for exchange in record.exchanges:
        reason = _skip_reason(exchange)
        if reason is None:
            chats.append(exchange)
        else:
            skipped.append(
                {
                    "index": exchange.index,
                    "path": exchange.path,
                    "status_code": exchange.status_code,
                    "reason": reason,
                }
            )
    if not chats:
        raise ValueError(
            f"trial {record.trial_id}: the gateway recorded no successful chat completion "
            f"({len(record.exchanges)} exchanges), so there is no trajectory to build"
        )

    builder = StepBuilder(strict=False)
    previous: list[str] = []  # the conversation as the model last saw it, its answer included
    seen: set[str] = set()  # every message that became a step or an observation, and the
    # tool-call ids of those with one, so an edited copy of a tool call or result is known too
    tools: dict[str, Any] = {}
    for position, exchange in enumerate(chats):
        messages = _messages(exchange)
        keys = [message_key(m) for m in messages]
        shared = _shared_prefix(previous, keys)
        new = list(zip(messages[shared:], keys[shared:], strict=True))
        if shared != len(previous):
            new = [(m, k) for m, k in new if not {k, *_call_ids(m)} & seen]
        label = f"exchange {exchange.index}"
        for message, key in new:
            builder.add(message, label=label, timestamp=exchange.started_at.isoformat())
            seen.update((key, *_call_ids(message)))
        for tool in exchange.request.get("tools") or []:
            if isinstance(tool, dict):
                tools.setdefault(json.dumps(tool, sort_keys=True), tool)

        following = _messages(chats[position + 1]) if position + 1 < len(chats) else []
        echoed = following[len(messages)] if len(following) > len(messages) else None
        choices = _choices(exchange.response)
        chosen = _chosen(choices, echoed)
        answer = _answer(choices[chosen]["message"])
        gateway: dict[str, Any] = {"exchange_index": exchange.index}
        if shared != len(previous):
            gateway["context_diverged_at"] = shared
        if len(choices) > 1:
            gateway["choice"] = chosen
            gateway["choices"] = len(choices)
        if choices[chosen].get("finish_reason") is not None:
            gateway["finish_reason"] = choices[chosen]["finish_reason"]
        model = exchange.response.get("model")
        finished = exchange.started_at + timedelta(seconds=max(exchange.latency_sec, 0.0))
        builder.add(
            answer,
            label=label,
            timestamp=finished.isoformat(),
            metrics=_metrics(exchange, choices[chosen]) or None,
            model_name=model if isinstance(model, str) and model != record.model else None,
            extra={"gateway": gateway},
        )
        answer_key = message_key(answer)
        seen.update((answer_key, *_call_ids(answer)))
        previous = [*keys, answer_key]

    agent: dict[str, Any] = {"name": agent_name, "version": agent_version}
    if record.model is not None:
        agent["model_name"] = record.model
    if tools:
        agent["tool_definitions"] = list(tools.values())
    extra: dict[str, Any] = {
        "trial_id": record.trial_id,
        "exchanges": len(record.exchanges),
        "chat_completions": len(chats),
        "skipped_exchanges": len(skipped),
        "skipped": skipped,
        "gateway_usage": record.usage.model_dump(),
    }
    if record.rollout_id is not None:
        extra["rollout_id"] = record.rollout_id
    if record.stopped_by is not None:
        extra["stopped_by"] = record.stopped_by
    doc = {
        "schema_version": atif.SCHEMA_VERSION,
        "session_id": record.trial_id,
        "agent": agent,
        "steps": builder.steps,
        "final_metrics": _final_metrics(builder.steps),
        "extra": extra,
    }
    return atif.dump_trajectory(atif.validate_trajectory(doc))


def message_key(message: Any) -> str:
    """What identifies a chat message when an agent sends it again: role, text (stripped,
    null as ""), tool calls (id, name, parsed arguments) and the tool-call id it answers."""
    if not isinstance(message, dict):
        return json.dumps(["?", repr(message)])
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            calls.append(call)
            continue
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = arguments.strip()
        calls.append([call.get("id"), function.get("name"), arguments])
    identity = [
        message.get("role"),
        _text(message.get("content")),
        calls,
        message.get("tool_call_id"),
    ]
    return json.dumps(identity, sort_keys=True, default=repr)


def _call_ids(message: dict[str, Any]) -> list[str]:
    """The tool-call ids a message makes (assistant) or answers (tool), as identities."""
    if message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
        return [f"answer:{message['tool_call_id']}"]
    calls = message.get("tool_calls") if message.get("role") == "assistant" else None
    ids = [c.get("id") for c in calls or [] if isinstance(c, dict)]
    return [f"calls:{json.dumps(ids)}"] if ids and all(isinstance(i, str) for i in ids) else []


def _skip_reason(exchange: Exchange) -> str | None:
    path = exchange.path.split("?", 1)[0].rstrip("/")
    if exchange.method.upper() != "POST" or not path.endswith(CHAT_COMPLETIONS_PATH):
        return "not a chat completion"
    if exchange.limit is not None:
        return f"refused by the {exchange.limit} limit"
    if exchange.error is not None:
        return f"failed: {exchange.error}"
    if not 200 <= exchange.status_code < 300:
        return f"failed: status {exchange.status_code}"
    request = exchange.request
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        return "the request has no messages"
    if not _choices(exchange.response):
        return "the response has no choice with a message"
    return None


def _messages(exchange: Exchange) -> list[dict[str, Any]]:
    return [m for m in exchange.request["messages"] if isinstance(m, dict)]


def _choices(response: Any) -> list[dict[str, Any]]:
    """The response's choices that hold a message."""
    choices = response.get("choices") if isinstance(response, dict) else None
    return [
        choice
        for choice in (choices if isinstance(choices, list) else [])
        if isinstance(choice, dict) and isinstance(choice.get("message"), dict)
    ]


def _chosen(choices: list[dict[str, Any]], echoed: dict[str, Any] | None) -> int:
    """Which choice the conversation went on with: the one the next request echoes, else
    the first."""
    if echoed is not None and len(choices) > 1:
        wanted = message_key(echoed)
        for index, choice in enumerate(choices):
            if message_key(_answer(choice["message"])) == wanted:
                return index
    return 0


def _answer(message: dict[str, Any]) -> dict[str, Any]:
    """A response message as the agent would send it back: no null fields, no empty
    ``tool_calls`` or ``annotations``, no streaming ``index`` in tool calls, and the
    reasoning as ``reasoning_content`` (vLLM's newer servers call it ``reasoning``)."""
    answer = {
        key: value
        for key, value in message.items()
        if (value is not None or key == "content")
        and not (key in ("tool_calls", "annotations") and value == [])
    }
    answer["role"] = "assistant"
    if "reasoning_content" not in answer and isinstance(answer.get("reasoning"), str):
        answer["reasoning_content"] = answer.pop("reasoning")
    if isinstance(answer.get("tool_calls"), list):
        answer["tool_calls"] = [
            {k: v for k, v in call.items() if k != "index"} if isinstance(call, dict) else call
            for call in answer["tool_calls"]
        ]
    return answer


def _metrics(exchange: Exchange, choice: dict[str, Any]) -> dict[str, Any]:
    response = exchange.response
    usage = response.get("usage") if isinstance(response.get("usage"), dict) else {}
    metrics: dict[str, Any] = {}
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    if prompt is None and exchange.prompt_tokens:
        prompt = exchange.prompt_tokens
    if completion is None and exchange.completion_tokens:
        completion = exchange.completion_tokens
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    for name, value in (
        ("prompt_tokens", prompt),
        ("completion_tokens", completion),
        ("cached_tokens", cached),
        ("prompt_token_ids", _token_ids(response.get("prompt_token_ids"))),
        ("completion_token_ids", _token_ids(choice.get("token_ids"))),
        ("logprobs", _logprobs(choice.get("logprobs"))),
    ):
        if value is not None:
            metrics[name] = value
    details = usage.get("completion_tokens_details")
    reasoning = _count(details.get("reasoning_tokens")) if isinstance(details, dict) else None
    if reasoning is not None:
        metrics["extra"] = {"reasoning_tokens": reasoning}
    return metrics


def _final_metrics(steps: list[dict[str, Any]]) -> dict[str, Any]:
    final: dict[str, Any] = {"total_steps": len(steps)}
    for field in ("prompt_tokens", "completion_tokens", "cached_tokens"):
        values = [s["metrics"][field] for s in steps if field in s.get("metrics", {})]
        if values:
            final[f"total_{field}"] = sum(values)
    return final


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _token_ids(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(type(v) is int for v in value):
        return value
    return None


def _logprobs(value: Any) -> list[float] | None:
    """The sampled tokens' logprobs of an OpenAI ``logprobs`` object (``content[j].logprob``)."""
    content = value.get("content") if isinstance(value, dict) else None
    if not isinstance(content, list):
        return None
    logprobs = [entry.get("logprob") if isinstance(entry, dict) else None for entry in content]
    numbers = [float(v) for v in logprobs if isinstance(v, int | float) and type(v) is not bool]
    return numbers if len(numbers) == len(logprobs) else None


def _shared_prefix(left: list[str], right: list[str]) -> int:
    shared = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        shared += 1
    return shared


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        return "\n".join(_part_text(part) for part in content).strip()
    return json.dumps(content, sort_keys=True, default=repr)


def _part_text(part: Any) -> str:
    """A text part's text; other parts (images, ...) compare as their JSON."""
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        return part["text"]
    return json.dumps(part, sort_keys=True, default=repr)
