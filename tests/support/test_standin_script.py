"""`scripts/standin-model.py`, the way the docs tell a user to try model trials without a model
service: it prints its base URL, answers chat completions with the reply it was given, and
stops on Ctrl-C (SIGINT) with exit 0, leaving no process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

from tests.conftest import REPO_ROOT


def test_the_script_serves_the_reply_and_stops_on_ctrl_c() -> None:
    server = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "scripts" / "standin-model.py"), "--port", "0",
         "--reply", "Paris"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        body = {"model": "m", "messages": [{"role": "user", "content": "capital of France?"}]}
        request = urllib.request.Request(
            f"{base_url}/chat/completions", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=10) as answer:
            reply = json.load(answer)
        assert reply["choices"][0]["message"]["content"] == "Paris"
    finally:
        server.send_signal(signal.SIGINT)
        code = server.wait(timeout=10)
    assert code == 0, server.stderr.read() if server.stderr else ""
