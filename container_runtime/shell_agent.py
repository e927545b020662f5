"""The built-in shell agent (``python -m container_runtime shell``): one tool, ``bash``.

A minimal tool-calling loop, the reference agent for RL rollouts. It reads
``/logs/agent/container_input.json``, sends the task's instruction to an OpenAI-compatible
chat-completions endpoint together with one function tool, ``bash(command)``, runs each
command the model asks for from the task's working directory (the agent's own cwd), and
answers with the command's merged output and exit code. It stops when a reply has no tool
call, after ``max_turns`` model calls, when its deadline is near, or on SIGTERM (what the
relay sends at the framework timeout). The conversation is saved as
``/logs/agent/trajectory.json`` however the run ends.

Configuration, environment first:

- endpoint: ``OPENAI_BASE_URL`` (``{base}/chat/completions`` is called), else the input's
  ``chat_completions_url`` as given;
- key: ``OPENAI_API_KEY``, else the variable the input's ``credentials_ref`` names; sent as
  ``Authorization: Bearer ...`` and removed from the commands' environment;
- model: ``TRIALBOX_MODEL``, else the input's ``model``;
- per-command timeout: ``TRIALBOX_SHELL_TIMEOUT_SEC`` (default 60 s);
- ``sampling``, ``max_turns`` (default 30) and ``agent_timeout_sec`` from the input.

Exit codes: 0 the model was done, 1 a model (or setup) error, 2 ``max_turns`` reached,
3 the deadline was reached or SIGTERM arrived.
"""

from __future__ import annotations

import ipaddress
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPException
from typing import Any, Dict, List, Optional, Tuple

from container_runtime import paths
from container_runtime.contract import ContainerInput, read_model, write_json
from container_runtime.trajectory import write_trajectory

EXIT_DONE = 0
EXIT_MODEL_ERROR = 1
EXIT_MAX_TURNS = 2
EXIT_DEADLINE = 3

BASE_URL_ENV = "OPENAI_BASE_URL"
API_KEY_ENV = "OPENAI_API_KEY"
MODEL_ENV = "TRIALBOX_MODEL"
COMMAND_TIMEOUT_ENV = "TRIALBOX_SHELL_TIMEOUT_SEC"

DEFAULT_MAX_TURNS = 30
DEFAULT_COMMAND_TIMEOUT_SEC = 60.0
OUTPUT_LIMIT_BYTES = 16 * 1024
# One model call may take this long at most (less when the deadline is closer).
REQUEST_TIMEOUT_SEC = 600.0
# 5xx answers and connection errors are retried this often, after 1, 2, 4 ... seconds.
MAX_RETRIES = 3
BACKOFF_BASE_SEC = 1.0
# The agent stops this long before agent_timeout_sec: 10 % of it, at most 10 s.
DEADLINE_MARGIN_SEC = 10.0
DEADLINE_MARGIN_FRACTION = 0.1
# After a command's shell exits, its output is read this much longer (background processes
# that keep the pipe open are then left to a drain thread).
DRAIN_GRACE_SEC = 0.5
_POLL_SEC = 0.1
_ERROR_BODY_CHARS = 2000

TOOL_NAME = "bash"
BASH_TOOL: Dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "Run a shell command in a new non-interactive shell started in the task's working "
            "directory; returns its combined stdout and stderr and its exit code."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The shell command to run."}
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
}

SYSTEM_PROMPT = """\
You are an agent working on a task in a Linux sandbox. You have one tool, `bash`, which runs \
a shell command and returns its combined stdout and stderr (at most {limit_kib} KiB, the \
middle cut out when longer) and its exit code. Each command runs in a new shell started in \
{workdir}, so `cd` and variables do not carry over between calls; a command is stopped after \
{timeout} s and cannot read input. Start servers in the background with their output \
redirected to a file. When the task is done, reply with a short summary and no tool call; \
that ends your work."""


class ModelError(Exception):
    """The model endpoint failed for good (a 4xx, or retries used up); ends the run."""


class DeadlineReached(Exception):
    """The agent's time (agent_timeout_sec less the margin) is up."""


class Terminated(BaseException):
    """SIGTERM (or SIGINT) arrived; a ``BaseException`` so no handler swallows it."""


# --- settings ---------------------------------------------------------------------------


class Settings:
    """Everything the loop needs, resolved once from the input and the environment."""

    def __init__(
        self,
        *,
        url: str,
        api_key: Optional[str],
        model: Optional[str],
        instruction: str,
        sampling: Dict[str, Any],
        max_turns: int,
        command_timeout_sec: float,
        deadline: Optional[float],
        workdir: str,
        shell: str,
        command_env: Dict[str, str],
    ) -> None:
        self.url = url
        self.api_key = api_key
        self.model = model
        self.instruction = instruction
        self.sampling = sampling
        self.max_turns = max_turns
        self.command_timeout_sec = command_timeout_sec
        self.deadline = deadline
        self.workdir = workdir
        self.shell = shell
        self.command_env = command_env

    @classmethod
    def resolve(
        cls, spec: ContainerInput, started: float, environ: Optional[Dict[str, str]] = None
    ) -> Settings:
        env = dict(os.environ if environ is None else environ)
        base = env.get(BASE_URL_ENV, "").strip()
        if base:
            url = base.rstrip("/") + "/chat/completions"
        elif spec.chat_completions_url:
            url = spec.chat_completions_url
        else:
            raise ValueError(
                f"no model endpoint: set {BASE_URL_ENV} or the input's chat_completions_url"
            )
        key_vars = [API_KEY_ENV] + ([spec.credentials_ref] if spec.credentials_ref else [])
        api_key = next((env[name] for name in key_vars if env.get(name)), None)
        deadline = None
        if spec.agent_timeout_sec is not None:
            margin = min(DEADLINE_MARGIN_SEC, DEADLINE_MARGIN_FRACTION * spec.agent_timeout_sec)
            deadline = started + spec.agent_timeout_sec - margin
        return cls(
            url=url,
            api_key=api_key,
            model=env.get(MODEL_ENV, "").strip() or spec.model,
            instruction=spec.instruction,
            sampling=dict(spec.sampling),
            max_turns=spec.max_turns or DEFAULT_MAX_TURNS,
            command_timeout_sec=_command_timeout(env.get(COMMAND_TIMEOUT_ENV)),
            deadline=deadline,
            workdir=os.getcwd(),
            shell=shutil.which("bash") or shutil.which("sh") or "/bin/sh",
            command_env={k: v for k, v in env.items() if k not in key_vars},
        )

    def time_left(self) -> Optional[float]:
        """Seconds until the deadline, or None when there is none."""
        if self.deadline is None:
            return None
        return self.deadline - time.monotonic()

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT.format(
            limit_kib=OUTPUT_LIMIT_BYTES // 1024,
            workdir=self.workdir,
            timeout=_seconds(self.command_timeout_sec),
        )


def _command_timeout(raw: Optional[str]) -> float:
    if raw is None or not raw.strip():
        return DEFAULT_COMMAND_TIMEOUT_SEC
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{COMMAND_TIMEOUT_ENV}={raw!r}: expected a positive number of seconds")
    return value


def _seconds(value: float) -> str:
    return f"{value:g}"


# --- the model --------------------------------------------------------------------------


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
                _log(f"model call failed ({exc}); retry {attempt}/{MAX_RETRIES} in {delay:g} s")
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


# --- commands ---------------------------------------------------------------------------


class CommandResult:
    """What one command did: its output (the middle cut when long), how it ended, how long."""

    def __init__(
        self,
        head: bytes,
        tail: bytes,
        total_bytes: int,
        returncode: Optional[int],
        timed_out: bool,
        held_open: bool,
        duration_sec: float,
    ) -> None:
        self.head = head
        self.tail = tail
        self.total_bytes = total_bytes
        self.returncode = returncode
        self.timed_out = timed_out
        self.held_open = held_open
        self.duration_sec = duration_sec

    @property
    def cut_bytes(self) -> int:
        """How many bytes of output were dropped between the head and the tail."""
        return self.total_bytes - len(self.head) - len(self.tail)


class _Capture:
    """Keeps the first and the last ``limit / 2`` bytes of a stream, and counts all of it."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_limit:
                del self.tail[: len(self.tail) - self.tail_limit]


def run_command(
    command: str,
    *,
    cwd: str,
    timeout_sec: float,
    shell: str = "/bin/sh",
    env: Optional[Dict[str, str]] = None,
    limit: int = OUTPUT_LIMIT_BYTES,
) -> CommandResult:
    """Run ``shell -c command`` in a new session; kill its process group at the timeout.

    stdout and stderr are merged; memory stays bounded whatever the command prints. An
    exception (SIGTERM's ``Terminated``) kills the group too: no command outlives the agent.
    """
    started = time.monotonic()
    proc = subprocess.Popen(
        [shell, "-c", command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    capture = _Capture(limit)
    timed_out = held_open = False
    try:
        os.set_blocking(fd, False)
        end = started + timeout_sec
        exited_at: Optional[float] = None
        eof = False
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while not (eof and exited_at is not None):
                now = time.monotonic()
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is None and now >= end:
                    timed_out = True
                    _kill_group(proc)
                    exited_at = time.monotonic()
                    continue
                wait = (end if exited_at is None else exited_at + DRAIN_GRACE_SEC) - now
                if wait <= 0:  # the shell is gone but something still holds its output
                    held_open = True
                    break
                if eof:  # the command closed its output but goes on
                    try:
                        proc.wait(timeout=min(wait, _POLL_SEC))
                    except subprocess.TimeoutExpired:
                        pass
                    continue
                if selector.select(timeout=min(wait, _POLL_SEC)):
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if chunk:
                        capture.add(chunk)
                    else:
                        eof = True
    finally:
        if proc.poll() is None:
            _kill_group(proc)
        if held_open:
            _drain_in_background(proc.stdout)
        else:
            proc.stdout.close()
    return CommandResult(
        head=bytes(capture.head),
        tail=bytes(capture.tail),
        total_bytes=capture.total,
        returncode=proc.returncode,
        timed_out=timed_out,
        held_open=held_open,
        duration_sec=time.monotonic() - started,
    )


def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _drain_in_background(stream: Any) -> None:
    """Keep reading (and dropping) a pipe that background processes still write to.

    Closing it would hand them SIGPIPE at their next write. The daemon thread ends at EOF,
    or with the agent.
    """

    def _drain() -> None:
        try:
            fd = stream.fileno()
            os.set_blocking(fd, True)
            while os.read(fd, 65536):
                pass
        except (OSError, ValueError):
            pass
        finally:
            stream.close()

    threading.Thread(target=_drain, name="shell-agent-drain", daemon=True).start()


def describe_result(result: CommandResult, timeout_sec: float, at_deadline: bool) -> str:
    """The tool message's text: the output, then notes on cuts and how the command ended."""
    text = result.head.decode("utf-8", errors="replace")
    if result.cut_bytes:
        text += f"\n[... {result.cut_bytes} bytes cut ...]\n"
    text += result.tail.decode("utf-8", errors="replace")
    if not text:
        text = "[no output]"
    lines = [text.rstrip("\n")]
    if result.cut_bytes:
        lines.append(
            f"[output cut: {result.cut_bytes} of {result.total_bytes} bytes cut from the middle; "
            f"the first {len(result.head)} and the last {len(result.tail)} are shown]"
        )
    if result.timed_out:
        why = (
            "the agent's deadline came"
            if at_deadline
            else f"it timed out after {_seconds(timeout_sec)} s"
        )
        lines.append(f"[the command was killed with its process group: {why}]")
    elif result.returncode is not None and result.returncode < 0:
        try:
            name = signal.Signals(-result.returncode).name
        except ValueError:
            name = f"signal {-result.returncode}"
        lines.append(f"[killed by {name}; exit code: {128 - result.returncode}]")
    else:
        lines.append(f"[exit code: {result.returncode}]")
    if result.held_open:
        lines.append(
            "[background processes still hold this command's output; redirect theirs to a file]"
        )
    return "\n".join(lines)


# --- the loop ---------------------------------------------------------------------------


class ShellAgent:
    """The conversation and the loop; ``messages`` is what the trajectory saves."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client = ChatClient(settings)
        self.messages: List[Dict[str, Any]] = [
            {"role": "system", "content": settings.system_prompt()},
            {"role": "user", "content": settings.instruction},
        ]

    def run(self) -> int:
        """Model calls and tool calls until done; returns the exit code."""
        max_turns = self.settings.max_turns
        for turn in range(1, max_turns + 1):
            asked = time.monotonic()
            reply = self.client.complete(self.messages)
            head = f"turn {turn}/{max_turns}: model {time.monotonic() - asked:.1f}s"
            self.messages.append(reply)
            calls = reply.get("tool_calls") or []
            if not calls:
                _say(f"{head}, done: {_short(reply)}")
                return EXIT_DONE
            notes: List[str] = []
            deadline_hit = False
            try:
                for call in calls:
                    content, note, deadline_hit = self._run_call(call)
                    self.messages.append(
                        {"role": "tool", "tool_call_id": _call_id(call), "content": content}
                    )
                    notes.append(note)
                    if deadline_hit:
                        break
            finally:
                _say(f"{head}, " + ("; ".join(notes) or "no command run"))
            if deadline_hit:
                raise DeadlineReached("the deadline came during a command")
        return EXIT_MAX_TURNS

    def _run_call(self, call: Any) -> Tuple[str, str, bool]:
        """Run one tool call: (tool message text, summary note, whether the deadline hit)."""
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(function, dict) or name != TOOL_NAME:
            return (
                f"[error: unknown tool {name!r}; the only tool is {TOOL_NAME!r}]",
                f"unknown tool {name!r}",
                False,
            )
        args = function.get("arguments") or "{}"
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError as exc:
                return f"[error: the arguments are not valid JSON: {exc}]", "bad arguments", False
        command = args.get("command") if isinstance(args, dict) else None
        if not isinstance(command, str) or not command.strip():
            return "[error: `command` must be a non-empty string]", "bad arguments", False
        timeout = self.settings.command_timeout_sec
        clipped = False
        left = self.settings.time_left()
        if left is not None:
            if left <= 0:
                raise DeadlineReached("the deadline came before a command")
            if left < timeout:
                timeout, clipped = left, True
        result = run_command(
            command,
            cwd=self.settings.workdir,
            timeout_sec=timeout,
            shell=self.settings.shell,
            env=self.settings.command_env,
        )
        deadline_hit = clipped and result.timed_out
        if deadline_hit:
            end = "killed at the deadline"
        elif result.timed_out:
            end = f"killed after {_seconds(timeout)}s timeout"
        else:
            end = f"exit {result.returncode}"
        if result.cut_bytes:
            end += f", {result.cut_bytes} bytes cut"
        note = f"bash {_clip(command)} -> {end} ({result.duration_sec:.1f}s)"
        return describe_result(result, timeout, deadline_hit), note, deadline_hit

    def answer_pending(self, why: str) -> None:
        """Give every tool call of the last reply that has no answer one that says why.

        Keeps the trajectory well-formed (each tool call answered) however the run ended.
        """
        last = len(self.messages) - 1
        while last >= 0 and self.messages[last]["role"] == "tool":
            last -= 1
        if last < 0 or self.messages[last]["role"] != "assistant":
            return
        answered = {m.get("tool_call_id") for m in self.messages[last + 1 :]}
        for call in self.messages[last].get("tool_calls") or []:
            call_id = _call_id(call)
            if call_id not in answered:
                self.messages.append(
                    {"role": "tool", "tool_call_id": call_id, "content": f"[no result: {why}]"}
                )

    def save(self) -> None:
        """Write the trajectory (ATIF if the writer takes it, else plain messages)."""
        try:
            write_trajectory(self.messages)
            return
        except (TypeError, ValueError) as exc:
            _log(f"trajectory not written as ATIF ({exc}); writing plain messages")
        write_json(paths.trajectory_path(), {"messages": self.messages})


def _call_id(call: Any) -> str:
    call_id = call.get("id") if isinstance(call, dict) else None
    return call_id if isinstance(call_id, str) else ""


def _clip(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= width else flat[: width - 3] + "...")


def _short(reply: Dict[str, Any]) -> str:
    content = reply.get("content")
    return _clip(content) if isinstance(content, str) else "(no content)"


def _say(line: str) -> None:
    print(line, flush=True)


def _log(line: str) -> None:
    print(f"shell agent: {line}", file=sys.stderr, flush=True)


# --- entry point ------------------------------------------------------------------------


def main() -> int:
    """``python -m container_runtime shell``: run the agent once; returns the exit code."""
    started = time.monotonic()
    signals: List[int] = []

    def _on_signal(signum: int, frame: Any) -> None:
        signals.append(signum)
        if len(signals) == 1:  # later signals must not break the clean-up of the first
            raise Terminated(signal.Signals(signum).name)

    previous = {
        signum: signal.signal(signum, _on_signal) for signum in (signal.SIGTERM, signal.SIGINT)
    }
    holder: List[ShellAgent] = []
    try:
        code, why = _start_and_run(started, holder)
    except Terminated as exc:  # arrived outside the loop's own handling
        if holder:
            holder[0].answer_pending(f"the agent received {exc}")
        code, why = EXIT_DEADLINE, f"received {exc}"
    finally:
        signals.append(0)  # from here on a signal is only noted
        if holder:
            try:
                holder[0].save()
            except Exception:
                traceback.print_exc()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    _log(f"stopped ({why}); exit code {code}")
    return code


def _start_and_run(started: float, holder: List[ShellAgent]) -> Tuple[int, str]:
    try:
        spec = read_model(paths.container_input_path(), ContainerInput)
        holder.append(ShellAgent(Settings.resolve(spec, started)))
    except Exception as exc:
        _log(f"cannot start: {type(exc).__name__}: {exc}")
        return EXIT_MODEL_ERROR, "no start"
    return _run_guarded(holder[0])


def _run_guarded(agent: ShellAgent) -> Tuple[int, str]:
    """Run the loop and map how it ended to (exit code, reason); tool calls get answers."""
    try:
        code = agent.run()
    except DeadlineReached as exc:
        agent.answer_pending("the agent's deadline came")
        return EXIT_DEADLINE, f"deadline: {exc}"
    except Terminated as exc:
        agent.answer_pending(f"the agent received {exc}")
        return EXIT_DEADLINE, f"received {exc}"
    except ModelError as exc:
        agent.answer_pending("the model call failed")
        _log(f"model error: {exc}")
        return EXIT_MODEL_ERROR, "model error"
    except Exception as exc:
        traceback.print_exc()
        agent.answer_pending("the agent failed")
        return EXIT_MODEL_ERROR, f"{type(exc).__name__}: {exc}"
    if code == EXIT_MAX_TURNS:
        return code, f"max_turns ({agent.settings.max_turns}) reached"
    return code, "the model is done"
