"""Assembling a streamed chat completion into the `chat.completion` it stands for.

The gateway passes each SSE line to the sandbox as it arrives and, on the side, folds the
chunks into one answer: content and reasoning concatenated, tool-call deltas merged by
`index`, usage from the usage chunk, and vLLM's token data (`prompt_token_ids`, per-chunk
`token_ids` and logprobs) appended in order, so the record reads like a non-streamed answer.

`ChunkAssembler` does the folding, one per streamed answer.
"""

from __future__ import annotations

import codecs
import json
from typing import Any


class ChunkAssembler:
    """Feed it SSE lines with `feed`; `result()` is the assembled `chat.completion`."""

    def __init__(self) -> None:
        self._pending = ""
        # A multi-byte character may be split across two network reads.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head: dict[str, Any] = {}
        self._choices: dict[int, dict[str, Any]] = {}
        self._usage: dict[str, Any] | None = None
        self._prompt_token_ids: list[int] | None = None
        self.chunks = 0

    def feed(self, data: bytes) -> None:
        """Take raw bytes from the stream; complete lines are parsed, the rest kept."""
        self._pending += self._decoder.decode(data)
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._line(line.strip())

    def _line(self, line: str) -> None:
        if not line.startswith("data:"):
            return
        payload = line[5:].strip()
        if not payload or payload == "[DONE]":
            return
        try:
            chunk = json.loads(payload)
        except json.JSONDecodeError:
            return  # not ours to judge: the sandbox got the line as it was
        if isinstance(chunk, dict):
            self._chunk(chunk)

    def _chunk(self, chunk: dict[str, Any]) -> None:
        self.chunks += 1
        for key in ("id", "created", "model", "system_fingerprint"):
            if key in chunk and key not in self._head:
                self._head[key] = chunk[key]
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        if chunk.get("prompt_token_ids") is not None and self._prompt_token_ids is None:
            self._prompt_token_ids = list(chunk["prompt_token_ids"])
        for choice in chunk.get("choices") or []:
            self._choice(choice)

    def _choice(self, delta_choice: dict[str, Any]) -> None:
        index = delta_choice.get("index", 0)
        choice = self._choices.setdefault(
            index, {"index": index, "message": {"role": "assistant", "content": None}}
        )
        message = choice["message"]
        delta = delta_choice.get("delta") or {}
        for key in ("content", "reasoning_content"):
            if delta.get(key):
                message[key] = (message.get(key) or "") + delta[key]
        for call in delta.get("tool_calls") or []:
            self._tool_call(message, call)
        if delta_choice.get("finish_reason"):
            choice["finish_reason"] = delta_choice["finish_reason"]
        if delta_choice.get("token_ids"):
            choice.setdefault("token_ids", []).extend(delta_choice["token_ids"])
        logprobs = delta_choice.get("logprobs") or {}
        if logprobs.get("content"):
            choice.setdefault("logprobs", {"content": []})["content"].extend(logprobs["content"])

    @staticmethod
    def _tool_call(message: dict[str, Any], delta: dict[str, Any]) -> None:
        calls: list[dict[str, Any]] = message.setdefault("tool_calls", [])
        index = delta.get("index", len(calls))
        while len(calls) <= index:
            calls.append(
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
        call = calls[index]
        if delta.get("id"):
            call["id"] = delta["id"]
        function = delta.get("function") or {}
        if function.get("name"):
            call["function"]["name"] += function["name"]
        if function.get("arguments"):
            call["function"]["arguments"] += function["arguments"]

    def result(self) -> dict[str, Any]:
        """The assembled answer (also when the stream broke off: what came is kept)."""
        if self._pending.strip():
            self._line(self._pending.strip())
            self._pending = ""
        answer: dict[str, Any] = {"object": "chat.completion", **self._head}
        answer["choices"] = [self._choices[i] for i in sorted(self._choices)]
        if self._usage is not None:
            answer["usage"] = self._usage
        if self._prompt_token_ids is not None:
            answer["prompt_token_ids"] = self._prompt_token_ids
        return answer
