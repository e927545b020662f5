"""The model client: chat-completions POSTs over urllib, with retries and the deadline."""

from __future__ import annotations

import ipaddress
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPException
from typing import Any, Dict, List

from container_runtime.shell_agent.console import log
from container_runtime.shell_agent.outcomes import DeadlineReached, ModelError
from container_runtime.shell_agent.settings import Settings
from container_runtime.shell_agent.tool import BASH_TOOL

# One model call may take this long at most (less when the deadline is closer).
REQUEST_TIMEOUT_SEC = 600.0
# 5xx answers and connection errors are retried this often, after 1, 2, 4 ... seconds.
MAX_RETRIES = 3
BACKOFF_BASE_SEC = 1.0
_ERROR_BODY_CHARS = 2000


class ChatClient:
    """POSTs chat-completions requests; retries 5xx and connection errors, never 4xx."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        host = urllib.parse.urlsplit(settings.url).hostname or ""
        # A proxy set for the internet must not swallow a gateway on the loopback.
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(host) else []
        self._opener = urllib.request.build_opener(*handlers)

    def complete(self, messages: List[Dict[str, Any]]) -> Dict[str, Any]:
        """The assistant message of the model's reply to ``messages``."""
        body: Dict[str, Any] = dict(self.settings.sampling)
        if self.settings.model:
            body["model"] = self.settings.model
        body.update(messages=messages, tools=[BASH_TOOL], stream=False)
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        attempt = 0
        while True:
            timeout = REQUEST_TIMEOUT_SEC
            left = self.settings.time_left()
            if left is not None:
                if left <= 0:
                    raise DeadlineReached("the deadline came before the model call")
                timeout = min(timeout, left)
            try:
                return _assistant_message(self._post(data, headers, timeout))
            except _Retryable as exc:
                left = self.settings.time_left()
                if left is not None and left <= 0:
                    raise DeadlineReached(
                        f"the deadline came during the model call ({exc})"
                    ) from None
                if attempt >= MAX_RETRIES:
                    raise ModelError(f"{exc}; gave up after {attempt + 1} attempts") from None
                delay = BACKOFF_BASE_SEC * (2**attempt)
                if left is not None and delay >= left:
                    raise DeadlineReached(f"no time left to retry the model call ({exc})") from None
                attempt += 1
                log(f"model call failed ({exc}); retry {attempt}/{MAX_RETRIES} in {delay:g} s")
                time.sleep(delay)

    def _post(self, data: bytes, headers: Dict[str, str], timeout: float) -> Any:
        request = urllib.request.Request(self.settings.url, data=data, headers=headers)
        try:
            with self._opener.open(request, timeout=timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = _error_body(exc)
            message = f"HTTP {exc.code} from {self.settings.url}: {detail}"
            if exc.code >= 500:
                raise _Retryable(message) from None
            raise ModelError(message) from None
        except urllib.error.URLError as exc:
            raise _Retryable(f"cannot reach {self.settings.url}: {exc.reason}") from None
        except (HTTPException, OSError) as exc:  # timeouts, resets, truncated answers
            raise _Retryable(
                f"no answer from {self.settings.url}: {type(exc).__name__}: {exc}"
            ) from None
        try:
            return json.loads(raw.decode("utf-8"))
        except ValueError:
            raise ModelError(
                f"the answer from {self.settings.url} is not JSON: {raw[:200]!r}"
            ) from None


class _Retryable(Exception):
    """A failure worth another attempt: a 5xx, a refused or dropped connection, a timeout."""


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _error_body(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read().decode("utf-8", errors="replace")
    except Exception:
        return exc.reason if isinstance(exc.reason, str) else str(exc)
    try:
        doc = json.loads(raw)
        if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
            raw = str(doc["error"].get("message") or raw)
    except ValueError:
        pass
    return raw.strip()[:_ERROR_BODY_CHARS] or str(exc.reason)


def _assistant_message(doc: Any) -> Dict[str, Any]:
    """The reply's first choice as a clean assistant message (role, content, tool_calls)."""
    try:
        message = doc["choices"][0]["message"]
        if not isinstance(message, dict):
            raise TypeError(type(message).__name__)
    except (KeyError, IndexError, TypeError):
        error = doc.get("error") if isinstance(doc, dict) else None
        raise ModelError(
            f"the model's answer has no choices[0].message: {json.dumps(doc)[:500]}"
            if error is None
            else f"the model answered with an error: {json.dumps(error)[:500]}"
        ) from None
    clean: Dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        clean["tool_calls"] = calls
    return clean
