"""The built-in shell agent against a scripted OpenAI-compatible stand-in (no Docker).

The stand-in is a ``ThreadingHTTPServer`` on 127.0.0.1 that replays canned replies and
records every request; the agent runs as ``python -m container_runtime shell`` in a
subprocess, exactly as in a sandbox, with the contract's roots moved into ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from container_runtime import paths, shell_agent
from container_runtime.contract import ContainerInput, write_model
from container_runtime.shell_agent import ModelError, Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
API_KEY = "sk-shell-test"
MODEL = "scripted-model"
RUN_TIMEOUT_SEC = 60


# --- the scripted model -------------------------------------------------------------------


def tool_reply(*commands: str, first_id: int = 1) -> dict[str, Any]:
    """A chat completion asking for one ``bash`` call per command (ids call_1, call_2...)."""
    calls = [
        {
            "id": f"call_{first_id + i}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})},
        }
        for i, command in enumerate(commands)
    ]
    return _completion({"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls")


def final_reply(text: str) -> dict[str, Any]:
    return _completion({"role": "assistant", "content": text}, "stop")


def _completion(message: dict[str, Any], finish_reason: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class ScriptedModel:
    """Replays ``replies`` in order (a completion, or ``(status, body)`` for an error) and
    records each request's path, headers and JSON body. Past the script it answers 400."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                with model.lock:
                    model.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": body}
                    )
                    reply = model.replies.pop(0) if model.replies else None
                if reply is None:
                    status, doc = 400, {"error": {"message": "the script has no more replies"}}
                elif isinstance(reply, tuple):
                    status, doc = reply
                else:
                    status, doc = 200, reply
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [request["body"] for request in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def scripted() -> Iterator[Any]:
    """``scripted(replies)`` starts a stand-in; every one started is stopped at the end."""
    models: list[ScriptedModel] = []

    def start(replies: list[Any]) -> ScriptedModel:
        models.append(ScriptedModel(replies))
        return models[-1]

    yield start
    for model in models:
        model.close()


# --- running the agent --------------------------------------------------------------------


class Run:
    def __init__(self, tmp_path: Path) -> None:
        self.logs = tmp_path / "logs"
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.procs: list[subprocess.Popen[str]] = []

    def stage(self, **fields: Any) -> None:
        fields.setdefault("trial_id", "trial-shell")
        fields.setdefault("instruction", "Create out.txt containing hi.")
        write_model(self.logs / "agent" / "container_input.json", ContainerInput(**fields))

    def start(self, model: ScriptedModel | None, **env: str) -> subprocess.Popen[str]:
        full = {
            k: v
            for k, v in os.environ.items()
            if not k.lower().endswith("_proxy") and not k.startswith(("OPENAI_", "TRIALBOX_"))
        }
        full[paths.LOGS_DIR_ENV] = str(self.logs)
        full[paths.TESTS_DIR_ENV] = str(self.logs.parent / "tests")
        full["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
        if model is not None:
            full.update(
                OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY=API_KEY, TRIALBOX_MODEL=MODEL
            )
        full.update(env)
        proc = subprocess.Popen(
            [sys.executable, "-m", "container_runtime", "shell"],
            cwd=self.work,
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def run(self, model: ScriptedModel | None, **env: str) -> tuple[int, str, str]:
        proc = self.start(model, **env)
        out, err = proc.communicate(timeout=RUN_TIMEOUT_SEC)
        return proc.returncode, out, err

    def trajectory(self) -> Any:
        return json.loads((self.logs / "agent" / "trajectory.json").read_text())

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=30)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Run]:
    run = Run(tmp_path)
    yield run
    run.stop_all()


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


def wait_for(check: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie left for a non-reaping init is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# --- the happy path ---------------------------------------------------------------------


def test_runs_the_command_then_stops_when_the_model_is_done(agent: Run, scripted: Any) -> None:
    model = scripted([tool_reply("echo hi > out.txt && cat out.txt"), final_reply("Done.")])
    agent.stage(sampling={"temperature": 0.25, "top_p": 0.9, "max_tokens": 256})
    code, out, err = agent.run(model)

    assert code == 0, err
    assert (agent.work / "out.txt").read_text() == "hi\n"
    first, second = model.bodies()
    # What was sent: the endpoint, key, model, sampling, and exactly one tool.
    for request in model.requests:
        assert request["path"] == "/v1/chat/completions"
        assert request["headers"]["Authorization"] == f"Bearer {API_KEY}"
    assert first["model"] == MODEL
    assert (first["temperature"], first["top_p"], first["max_tokens"]) == (0.25, 0.9, 256)
    assert first["stream"] is False
    [tool] = first["tools"]
    assert tool["type"] == "function"
    function = tool["function"]
    assert function["name"] == "bash"
    assert function["parameters"]["type"] == "object"
    assert function["parameters"]["properties"].keys() == {"command"}
    assert function["parameters"]["properties"]["command"]["type"] == "string"
    assert function["parameters"]["required"] == ["command"]
    system, user = first["messages"]
    assert system["role"] == "system" and str(agent.work) in system["content"]
    assert user == {"role": "user", "content": "Create out.txt containing hi."}
    # The second request carries the call and its answer.
    assert second["messages"][:2] == first["messages"]
    assert second["messages"][2]["tool_calls"][0]["id"] == "call_1"
    [answer] = tool_messages(second)
    assert answer["tool_call_id"] == "call_1"
    assert answer["content"].splitlines() == ["hi", "[exit code: 0]"]
    # A line per turn on stdout; the conversation saved.
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("turn 1/30:") and "exit 0" in lines[0]
    assert lines[1].startswith("turn 2/30:") and "Done." in lines[1]
    saved = json.dumps(agent.trajectory())
    assert "Create out.txt containing hi." in saved and "Done." in saved


def test_falls_back_to_the_input_for_endpoint_and_model(agent: Run, scripted: Any) -> None:
    model = scripted([final_reply("Nothing to do.")])
    agent.stage(
        chat_completions_url=model.base_url + "/chat/completions",
        model="from-input",
        credentials_ref="MY_KEY",
    )
    code, _, err = agent.run(None, MY_KEY="sk-from-ref")
    assert code == 0, err
    [request] = model.requests
    assert request["body"]["model"] == "from-input"
    assert request["headers"]["Authorization"] == "Bearer sk-from-ref"


def test_several_calls_in_one_reply_run_in_order(agent: Run, scripted: Any) -> None:
    model = scripted(
        [
            tool_reply("echo one >> order.txt", "echo two >> order.txt; exit 4"),
            final_reply("ok"),
        ]
    )
    agent.stage()
    code, _, err = agent.run(model)
    assert code == 0, err
    assert (agent.work / "order.txt").read_text() == "one\ntwo\n"
    answers = tool_messages(model.bodies()[1])
    assert [m["tool_call_id"] for m in answers] == ["call_1", "call_2"]
    assert answers[0]["content"].endswith("[exit code: 0]")
    assert answers[1]["content"].endswith("[exit code: 4]")


def test_commands_do_not_see_the_key(agent: Run, scripted: Any) -> None:
    model = scripted([tool_reply("echo key=${OPENAI_API_KEY:-none}"), final_reply("ok")])
    agent.stage()
    code, _, err = agent.run(model)
    assert code == 0, err
    assert tool_messages(model.bodies()[1])[0]["content"].startswith("key=none\n")


# --- limits -------------------------------------------------------------------------------


def test_max_turns_stops_with_exit_2(agent: Run, scripted: Any) -> None:
    model = scripted([tool_reply(f"echo {i} >> turns.txt", first_id=i) for i in range(1, 5)])
    agent.stage(max_turns=2)
    code, out, err = agent.run(model)
    assert code == 2, err
    assert len(model.requests) == 2
    assert (agent.work / "turns.txt").read_text() == "1\n2\n"  # the last reply's call ran
    assert len(out.splitlines()) == 2
    assert "max_turns (2)" in err


def test_a_command_past_its_timeout_is_killed_and_reported(agent: Run, scripted: Any) -> None:
    model = scripted([tool_reply("sleep 30 & echo $! > sleeper.pid; wait"), final_reply("gave up")])
    agent.stage()
    started = time.monotonic()
    code, out, err = agent.run(model, TRIALBOX_SHELL_TIMEOUT_SEC="1")
    assert code == 0, err
    assert time.monotonic() - started < 20
    [answer] = tool_messages(model.bodies()[1])
    assert "timed out after 1 s" in answer["content"]
    assert "killed" in answer["content"]
    assert "[exit code" not in answer["content"]
    sleeper = int((agent.work / "sleeper.pid").read_text())
    assert wait_for(lambda: not alive(sleeper), timeout=10), "the command's child survived"
    assert "timeout" in out.splitlines()[0]


def test_long_output_is_cut_with_a_note(agent: Run, scripted: Any) -> None:
    # 40000 'a's, a newline, then END: 40005 bytes, of which 16384 are kept.
    command = "head -c 40000 /dev/zero | tr '\\0' a; echo; echo END"
    model = scripted([tool_reply(command), final_reply("ok")])
    agent.stage()
    code, _, err = agent.run(model)
    assert code == 0, err
    content = tool_messages(model.bodies()[1])[0]["content"]
    cut = 40005 - shell_agent.OUTPUT_LIMIT_BYTES
    assert content.startswith("a" * 8192 + "\n")
    assert f"[... {cut} bytes cut ...]" in content
    assert f"[output cut: {cut} of 40005 bytes cut from the middle" in content
    assert "END\n[output cut" in content  # the tail is kept
    assert content.count("a") < shell_agent.OUTPUT_LIMIT_BYTES
    assert content.endswith("[exit code: 0]")


# --- model errors -------------------------------------------------------------------------


def test_a_4xx_ends_the_run_without_retry(agent: Run, scripted: Any) -> None:
    model = scripted([(403, {"error": {"message": "call limit reached (max_calls=0)"}})])
    agent.stage()
    code, out, err = agent.run(model)
    assert code == 1
    assert len(model.requests) == 1
    assert "HTTP 403" in err and "call limit reached (max_calls=0)" in err
    assert "retry" not in err
    assert out == ""
    assert "Create out.txt" in json.dumps(agent.trajectory())


def test_a_500_is_retried(agent: Run, scripted: Any) -> None:
    model = scripted([(500, {"error": {"message": "upstream hiccup"}}), final_reply("ok")])
    agent.stage()
    code, _, err = agent.run(model)
    assert code == 0, err
    assert len(model.requests) == 2
    assert model.bodies()[0] == model.bodies()[1]
    assert "HTTP 500" in err and "retry 1/3" in err


def test_connection_errors_are_retried_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a port that nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(shell_agent.client, "BACKOFF_BASE_SEC", 0.01)
    spec = ContainerInput(trial_id="t", instruction="x")
    env = {"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"}
    client = shell_agent.ChatClient(Settings.resolve(spec, time.monotonic(), env))
    with pytest.raises(ModelError, match="gave up after 4 attempts"):
        client.complete([{"role": "user", "content": "x"}])
    assert capsys.readouterr().err.count("retry") == shell_agent.MAX_RETRIES


# --- deadline and SIGTERM -----------------------------------------------------------------


def test_the_deadline_stops_it_with_exit_3(agent: Run, scripted: Any) -> None:
    model = scripted([tool_reply("echo started; sleep 30", "echo never > never.txt")])
    agent.stage(agent_timeout_sec=3)
    started = time.monotonic()
    code, out, err = agent.run(model)
    elapsed = time.monotonic() - started
    assert code == 3, err
    assert elapsed < 3 + 10
    assert len(model.requests) == 1
    assert not (agent.work / "never.txt").exists()
    assert "killed at the deadline" in out
    assert "deadline" in err
    saved = json.dumps(agent.trajectory())
    assert "the agent's deadline came" in saved


def test_sigterm_ends_it_cleanly(agent: Run, scripted: Any) -> None:
    model = scripted([tool_reply("echo $$ > shell.pid; sleep 30")])
    agent.stage()
    proc = agent.start(model)
    pid_file = agent.work / "shell.pid"
    assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip()), (
        proc.poll(),
        model.requests,
    )
    shell_pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    assert "received SIGTERM" in err
    assert "Traceback" not in err
    assert wait_for(lambda: not alive(shell_pid), timeout=10), "the command survived"
    assert out.startswith("turn 1/30:")
    assert "Create out.txt" in json.dumps(agent.trajectory())
