"""Token drift: did a trial's model calls stay one token sequence a trainer can use as is?

For token-in-token-out training, a trajectory's tokens are the last call's prompt token ids
plus its completion's, with every earlier completion inside that prompt where the model
produced it. That holds only when each chat completion's prompt token ids start with the
previous call's prompt and completion token ids (a prefix extension). An agent breaks it by
re-rendering its history (a chat template that drops earlier reasoning, tool-call arguments
serialised again, an edited message) or by cutting it (a summary, a truncated or pruned
context, a fresh start); the text may still read the same.

The successful chat completions of a record are compared in arrival order (the exchanges'
`index`), each with the one before it; failed and refused calls have no tokens and are left
out. Token ids come from what the upstream returned (vLLM's and SGLang's
`prompt_token_ids` and `choices[i].token_ids`, streamed answers assembled the same way), so
the gateway asks for them with `ModelConfig.request_token_ids` (`--token-ids`).

`token_drift(record)` is the verdict, a `record.TokenDrift`.
"""

from __future__ import annotations

from typing import Any

from orchestrator.gateway.record import DriftKind, Exchange, GatewayRecord, TokenDrift

CHAT_COMPLETIONS_PATH = "/chat/completions"
SHORT_PREFIX = 0.5  # sharing less than this part of the previous tokens is a cut context
ASK_FOR_IDS = (
    "the gateway did not ask the upstream for them (--token-ids, or "
    "ModelConfig.request_token_ids, asks vLLM and SGLang for `return_token_ids`)"
)
NOT_RETURNED = (
    "the upstream returned none though they were asked for (`return_token_ids`): it is "
    "not a server that returns token ids (vLLM and SGLang do)"
)


class _Call:
    """One successful chat completion's token ids (None where the answer had none)."""

    def __init__(self, exchange: Exchange) -> None:
        self.index = exchange.index
        response: dict[str, Any] = exchange.response
        self.prompt = _ids(response.get("prompt_token_ids"))
        choices = response.get("choices")
        completions = [
            _ids(choice.get("token_ids")) if isinstance(choice, dict) else None
            for choice in (choices if isinstance(choices, list) else [])
        ]
        self.completions = [ids for ids in completions if ids is not None]
        request = exchange.request if isinstance(exchange.request, dict) else {}
        self.asked = bool(request.get("return_token_ids"))

    def missing(self) -> str | None:
        """What token ids this call lacks, in words, or None."""
        if self.prompt is None:
            lacking = "prompt"
        elif not self.completions:
            lacking = "completion"
        else:
            return None
        why = NOT_RETURNED if self.asked else ASK_FOR_IDS
        return f"call {self.index} has no {lacking} token ids: {why}"


def token_drift(record: GatewayRecord) -> TokenDrift:
    """Whether the record's chat completions extended one token sequence: `none`, the first
    call that did not (`re-rendered` or `truncated`, with where and how many tokens), or
    `unknown` with why (no token ids, no successful call). A divergence seen anywhere wins
    over calls that could not be compared."""
    calls = [_Call(e) for e in sorted(record.exchanges, key=lambda e: e.index) if _succeeded(e)]
    if not calls:
        return TokenDrift(
            kind="unknown",
            detail="no chat completion succeeded, so there are no tokens to compare",
        )
    first: TokenDrift | None = None
    diverged = 0
    missing: tuple[int, str] | None = None
    for position, call in enumerate(calls):
        gap = call.missing()
        if gap is not None and missing is None:
            missing = (call.index, gap)
        if position == 0:
            continue
        previous = calls[position - 1]
        if call.prompt is None or previous.prompt is None or not previous.completions:
            continue
        verdict = _compare(previous, call)
        if verdict is not None:
            diverged += 1
            if first is None:
                first = verdict
    if first is not None:
        first.calls = len(calls)
        first.diverged_calls = diverged
        if diverged > 1:
            first.detail += f" ({diverged} of {len(calls) - 1} calls diverged from their previous)"
        return first
    if missing is not None:
        return TokenDrift(kind="unknown", detail=missing[1], calls=len(calls), call=missing[0])
    detail = (
        "one call: a single prompt and completion, nothing to diverge from"
        if len(calls) == 1
        else f"all {len(calls)} calls: each prompt extends the previous call's prompt and "
        "completion token ids"
    )
    return TokenDrift(kind="none", detail=detail, calls=len(calls))


def _compare(previous: _Call, call: _Call) -> TokenDrift | None:
    """None when `call`'s prompt extends `previous`'s prompt and one of its completions;
    else the divergence, with the completion sharing the longest prefix."""
    assert previous.prompt is not None and call.prompt is not None
    prompt, before = call.prompt, previous.prompt
    best = -1
    expected_len = 0
    for completion in previous.completions:
        expected = before + completion
        shared = _shared_prefix(expected, prompt)
        if shared == len(expected):
            return None
        if shared > best:
            best, expected_len = shared, len(expected)
    shared, m, n, pp = best, expected_len, len(prompt), len(before)
    where = (
        f"call {call.index}'s prompt ({n} tokens) and call {previous.index}'s prompt + "
        f"completion ({m} tokens) differ from token {shared} on"
    )
    kind: DriftKind = "truncated"
    if shared == n:
        why = (
            f"call {call.index}'s prompt ({n} tokens) is only the first {n} of call "
            f"{previous.index}'s prompt + completion ({m} tokens): the context was cut back"
        )
    elif shared >= pp:
        kind = "re-rendered"
        why = (
            f"{where}, inside call {previous.index}'s completion: the answer came back in "
            "other tokens (the history was re-rendered)"
        )
    elif n < m:
        why = f"{where}, and the new prompt is shorter: the context was summarised or truncated"
    elif shared < m * SHORT_PREFIX:
        why = f"{where}, sharing less than half of them: the context was summarised or replaced"
    else:
        kind = "re-rendered"
        why = f"{where}, inside call {previous.index}'s prompt: the history was re-rendered"
    return TokenDrift(
        kind=kind,
        detail=why,
        call=call.index,
        previous_call=previous.index,
        first_difference=shared,
        previous_tokens=m,
        previous_prompt_tokens=pp,
        prompt_tokens=n,
    )


def _succeeded(exchange: Exchange) -> bool:
    """A chat completion that went upstream and came back whole with an answer."""
    path = exchange.path.split("?", 1)[0].rstrip("/")
    return (
        exchange.method.upper() == "POST"
        and path.endswith(CHAT_COMPLETIONS_PATH)
        and exchange.limit is None
        and exchange.error is None
        and 200 <= exchange.status_code < 300
        and isinstance(exchange.response, dict)
    )


def _ids(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(type(v) is int for v in value):
        return value
    return None


def _shared_prefix(left: list[int], right: list[int]) -> int:
    """How many leading tokens the two share."""
    size = min(len(left), len(right))
    if left[:size] == right[:size]:
        return size
    low, high = 0, size  # the first difference lies in [low, high)
    while high - low > 1:  # bisect on slice equality: C-speed on long contexts
        middle = (low + high) // 2
        if left[low:middle] == right[low:middle]:
            low = middle
        else:
            high = middle
    return low
