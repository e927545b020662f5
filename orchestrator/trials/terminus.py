"""`--agent terminus`: trialbox's own implementation of the Terminus protocol, its loop on the
host, its terminal in the sandbox.

The protocol (Terminal-Bench's reference agent): each model answer is one JSON object,
`analysis` (what the screen shows), `plan` (what comes next), `commands` (a list of
`{"keystrokes": str, "duration": float}`: keys typed into the terminal, then a wait) and
`task_complete` (bool). The model reads the terminal back as a screen, not as command output.

Here the terminal is one long-lived shell on a pseudo-terminal in the sandbox (a
`TerminalSandbox`'s `open_terminal`: on Docker one exec with a TTY), its bytes rendered on the
host by the `pyte` terminal emulator (imported only when such a trial runs), so no tmux and no
Python are needed in the image. Keystrokes are sent as they are (a `\\n` as Enter), except a
keystrokes string that is a tmux key name as a whole (`C-c`, `Enter`, `Escape`, `Up`, `M-x`,
...), which is that key (`keystroke_bytes`). Each command's wait is capped
(`MAX_DURATION_SEC`), and never past the agent's deadline.

The loop: the instruction and the screen go to the model; its answer is parsed leniently
(`parse_answer`: the first JSON object in the text; missing fields defaulted); an answer that
cannot be used gets a corrective user turn saying what was wrong (at most
`MAX_PARSE_ERRORS` in a row, then the agent gives up: exit 1); each command's keys are sent,
its wait waited, then the screen read (what scrolled off since the last read, then the
screen, cut to `output_cap` characters). A first `task_complete: true` gets a confirmation
turn (the screen, and "answer task_complete true again to finish"); only a second true in a
row ends it (exit 0). The turns are bounded by the model's `max_turns` (exit 2 past them).
The terminal is closed (its session's processes killed) however the loop ends.

The steps (the screen after each turn, the keystrokes as tool calls) are kept as ATIF in
`agent/terminus.traj.json`, scrubbed, beside the gateway's `trajectory.json`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from container_runtime import __version__, atif
from orchestrator.common.atomic_write import write_atomic
from orchestrator.common.errors import AgentSpecError, SandboxError
from orchestrator.common.offload import run_blocking
from orchestrator.common.scrub import Scrubber
from orchestrator.sandbox import Sandbox
from orchestrator.sandbox.terminal import Terminal, TerminalSandbox
from orchestrator.trials.host_agent import HostAgent, HostModel, HostRun
from orchestrator.trials.materialize import Materialized
from orchestrator.trials.result import TrialResult

TRAJECTORY_NAME = "terminus.traj.json"
AGENT_NAME = "terminus"
COLS, ROWS = 160, 40
HISTORY_LINES = 2000
DEFAULT_DURATION_SEC = 1.0
MAX_DURATION_SEC = 60.0
MAX_PARSE_ERRORS = 3  # corrective turns in a row before the agent gives up
DEFAULT_MAX_TURNS = 100
OUTPUT_CAP_CHARS = 10_000  # of the terminal's text per turn, to the model
START_SETTLE_SEC = 0.5  # the shell's first prompt, before the first screen is read
MODEL_RETRIES = 3
MODEL_TIMEOUT_SEC = 600.0

# tmux's key names (the ones an agent uses), as the bytes an xterm sends.
_NAMED_KEYS: dict[str, bytes] = {
    "Enter": b"\r", "KPEnter": b"\r", "Tab": b"\t", "BTab": b"\x1b[Z", "Space": b" ",
    "Escape": b"\x1b", "BSpace": b"\x7f", "DC": b"\x1b[3~", "IC": b"\x1b[2~",
    "Up": b"\x1b[A", "Down": b"\x1b[B", "Right": b"\x1b[C", "Left": b"\x1b[D",
    "Home": b"\x1b[H", "End": b"\x1b[F", "PageUp": b"\x1b[5~", "PPage": b"\x1b[5~",
    "PageDown": b"\x1b[6~", "NPage": b"\x1b[6~",
    "F1": b"\x1bOP", "F2": b"\x1bOQ", "F3": b"\x1bOR", "F4": b"\x1bOS", "F5": b"\x1b[15~",
    "F6": b"\x1b[17~", "F7": b"\x1b[18~", "F8": b"\x1b[19~", "F9": b"\x1b[20~",
    "F10": b"\x1b[21~", "F11": b"\x1b[23~", "F12": b"\x1b[24~",
}  # fmt: skip
_CONTROL = re.compile(r"(?:C-|\^)([A-Za-z@\[\\\]^_?])")
_META = re.compile(r"M-(.+)")


def key_bytes(name: str) -> bytes | None:
    """The bytes of one tmux key name (`C-c`, `^D`, `Enter`, `M-x`, `M-Enter`), or None when
    `name` is not one."""
    if name in _NAMED_KEYS:
        return _NAMED_KEYS[name]
    control = _CONTROL.fullmatch(name)
    if control:
        char = control.group(1)
        return b"\x7f" if char == "?" else bytes([ord(char.upper()) & 0x1F])
    meta = _META.fullmatch(name)
    if meta:
        rest = meta.group(1)
        inner = key_bytes(rest) if len(rest) > 1 else rest.encode()
        return None if inner is None else b"\x1b" + inner
    return None


def keystroke_bytes(keystrokes: str) -> bytes:
    """What typing `keystrokes` sends, as tmux's `send-keys` takes one argument: a key name
    as a whole (surrounding whitespace ignored) is that key; anything else is typed as it is,
    each newline an Enter (a carriage return, as a terminal sends it)."""
    named = key_bytes(keystrokes.strip()) if keystrokes.strip() else None
    if named is not None:
        return named
    return keystrokes.replace("\r\n", "\n").replace("\n", "\r").encode("utf-8")


# -- the model's answers -----------------------------------------------------------------------


@dataclass
class Command:
    keystrokes: str
    duration: float = DEFAULT_DURATION_SEC


@dataclass
class Answer:
    """One model answer as the protocol reads it; `error` when it cannot be used."""

    analysis: str = ""
    plan: str = ""
    commands: list[Command] = field(default_factory=list)
    task_complete: bool = False
    error: str | None = None
    warnings: list[str] = field(default_factory=list)


def first_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text` (a bare one, or inside a ```json fence or prose)."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start >= 0:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            pass
        else:
            if isinstance(value, dict):
                return value
        start = text.find("{", start + 1)
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def parse_answer(text: str) -> Answer:
    """`text` read leniently: the first JSON object in it; `analysis`, `plan` default to "",
    `commands` to [], `task_complete` to false, a command's `duration` to 1 s. What cannot
    be used (no object, `commands` not a list, a command without string `keystrokes`) is the
    answer's `error`, said back to the model; what was defaulted is in `warnings`."""
    data = first_json_object(text or "")
    if data is None:
        return Answer(error="no JSON object was found in your answer")
    answer = Answer()
    for name in ("analysis", "plan"):
        value = data.get(name, "")
        if name not in data:
            answer.warnings.append(f"the field {name!r} is missing")
        setattr(answer, name, value if isinstance(value, str) else json.dumps(value))
    complete = _as_bool(data.get("task_complete", False))
    if complete is None:
        answer.warnings.append("'task_complete' is not a boolean; read as false")
    answer.task_complete = bool(complete)
    commands = data.get("commands", [])
    if commands is None:
        commands = []
    if not isinstance(commands, list):
        answer.error = '\'commands\' must be a list of {"keystrokes": ..., "duration": ...}'
        return answer
    if "commands" not in data and not answer.task_complete:
        answer.warnings.append("the field 'commands' is missing")
    for index, item in enumerate(commands, 1):
        if not isinstance(item, dict) or not isinstance(item.get("keystrokes"), str):
            answer.error = f"command {index} has no string 'keystrokes'"
            return answer
        duration = item.get("duration", DEFAULT_DURATION_SEC)
        if isinstance(duration, bool) or not isinstance(duration, int | float) or duration < 0:
            answer.warnings.append(
                f"command {index}: 'duration' is not a non-negative number; "
                f"{DEFAULT_DURATION_SEC:g} s used"
            )
            duration = DEFAULT_DURATION_SEC
        answer.commands.append(Command(item["keystrokes"], float(duration)))
    return answer


# -- the screen --------------------------------------------------------------------------------


class ScreenView:
    """The terminal's bytes rendered with `pyte`: the screen, and the lines that scrolled off
    it since the last `read`."""

    def __init__(self, cols: int = COLS, rows: int = ROWS) -> None:
        import pyte  # lazily: only a terminus trial needs it

        self.screen = pyte.HistoryScreen(cols, rows, history=HISTORY_LINES)
        self._taken = 0  # lines of history already read
        self._scrolled = 0  # lines that scrolled off, in all

        original = self.screen.index

        def index() -> None:  # a line scrolls off the top when the cursor is on the bottom
            margins = self.screen.margins
            bottom = margins.bottom if margins else self.screen.lines - 1
            if self.screen.cursor.y == bottom:
                self._scrolled += 1
            original()

        self.screen.index = index  # type: ignore[method-assign]
        self.stream = pyte.ByteStream(self.screen)

    def feed(self, data: bytes) -> None:
        self.stream.feed(data)

    def screen_text(self) -> str:
        """The visible screen, trailing spaces and blank lines dropped."""
        lines = [line.rstrip() for line in self.screen.display]
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines)

    def _history(self, count: int) -> list[str]:
        top = list(self.screen.history.top)[-count:] if count else []
        cols = self.screen.columns
        return ["".join(line[x].data for x in range(cols)).rstrip() for line in top]

    def read(self) -> str:
        """What scrolled off since the last read (as far as the history keeps), then the
        screen."""
        new = self._scrolled - self._taken
        self._taken = self._scrolled
        scrolled = self._history(min(new, len(self.screen.history.top)))
        screen = self.screen_text()
        return "\n".join([*scrolled, screen]) if scrolled else screen


def cap_text(text: str, cap: int) -> str:
    """`text` cut to its last `cap` characters, the cut said."""
    if len(text) <= cap:
        return text
    return f"[... {len(text) - cap} characters cut ...]\n{text[-cap:]}"


# -- the prompts -------------------------------------------------------------------------------

PROMPT = """You are an AI assistant solving a task in a Linux terminal. You type keystrokes \
into a shell and read its screen back.

Answer with one JSON object and nothing else:
{{
  "analysis": "what the screen shows and what has been done so far",
  "plan": "what you will do next, and why",
  "commands": [
    {{"keystrokes": "ls -la\\n", "duration": 0.1}}
  ],
  "task_complete": false
}}

- "keystrokes" is typed as it is: end a command with \\n to run it. A keystrokes string that \
is exactly a key name sends that key: C-c (interrupt), C-d, C-z, Enter, Escape, Tab, Up, \
Down, Left, Right, BSpace.
- "duration" is how many seconds to wait after the keystrokes before the screen is read \
(0.1 for a quick command, longer for a slow one, at most {max_duration:g}). You may wait \
again with an empty keystrokes string.
- The commands run one after another in the same shell; the screen you get back is what it \
shows after the last one.
- Set "task_complete" to true when the task is done.

Task:
{instruction}

Current terminal screen:
{screen}
"""

CORRECTION = """Your previous answer could not be used: {error}.

Answer with exactly one JSON object with the fields "analysis" (string), "plan" (string), \
"commands" (a list of {{"keystrokes": string, "duration": number}}) and "task_complete" \
(boolean).

Current terminal screen:
{screen}
"""

CONFIRM = """Current terminal screen:
{screen}

Are you sure you want to mark the task as complete? This will end your work: your solution \
will be graded and you cannot change it afterwards. If so, answer with "task_complete": true \
again; otherwise continue with more commands and "task_complete": false."""

OBSERVATION = "{warnings}New terminal output:\n{screen}\n"


# -- the agent ---------------------------------------------------------------------------------


class ModelCallError(RuntimeError):
    """The gateway answered no usable completion."""


class TerminusAgent(HostAgent):
    """The Terminus protocol over a terminal in the sandbox, its model the gateway."""

    needs_model = True

    def __init__(
        self,
        spec: str = AGENT_NAME,
        *,
        cols: int = COLS,
        rows: int = ROWS,
        output_cap: int = OUTPUT_CAP_CHARS,
        max_duration_sec: float = MAX_DURATION_SEC,
        max_parse_errors: int = MAX_PARSE_ERRORS,
    ) -> None:
        super().__init__(spec)
        self.cols, self.rows = cols, rows
        self.output_cap = output_cap
        self.max_duration_sec = max_duration_sec
        self.max_parse_errors = max_parse_errors
        self.steps: list[dict[str, Any]] = []
        self.turns = 0
        self._model_name = ""

    @classmethod
    def from_spec(cls, spec: str) -> TerminusAgent:
        if spec != AGENT_NAME:
            raise AgentSpecError(f"--agent {spec!r}: expected terminus (it takes no options)")
        return cls(spec)

    async def prepare(self, sandbox: Sandbox, trial: Materialized) -> None:
        """Refused before the loop where no terminal can open (a backend without terminals,
        such as the fake): that says nothing about the agent."""
        if not isinstance(sandbox, TerminalSandbox):
            raise AgentSpecError(
                f"--agent {self.spec}: this backend's sandboxes cannot open a terminal; run "
                "terminus on Docker"
            )

    async def run(self, host: HostRun) -> int:
        if host.model is None:
            raise AgentSpecError(f"--agent {self.spec} needs a model")
        sandbox = host.sandbox
        assert isinstance(sandbox, TerminalSandbox)  # checked by `prepare`
        self._model_name = host.model.name
        view = ScreenView(self.cols, self.rows)
        terminal = await sandbox.open_terminal(
            host.user, self.cols, self.rows, workdir=host.workdir, env=host.env
        )
        if terminal is None:
            raise SandboxError(f"--agent {self.spec}: no terminal could start in the sandbox")
        reader = asyncio.create_task(_pump(terminal, view))
        try:
            return await self._loop(host, host.model, terminal, view)
        finally:
            reader.cancel()
            await asyncio.shield(_close(terminal, reader))

    async def _loop(
        self, host: HostRun, model: HostModel, terminal: Terminal, view: ScreenView
    ) -> int:
        import httpx

        self._step("user", host.instruction)
        await asyncio.sleep(min(START_SETTLE_SEC, host.remaining_sec))
        screen = cap_text(view.read(), self.output_cap)
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": PROMPT.format(
                instruction=host.instruction, screen=screen,
                max_duration=self.max_duration_sec)},
        ]  # fmt: skip
        max_turns = model.max_turns or DEFAULT_MAX_TURNS
        errors_in_a_row = 0
        confirming = False
        async with httpx.AsyncClient(trust_env=False) as client:
            while self.turns < max_turns:
                host.check()
                self.turns += 1
                content = await self._complete(client, host, model, messages)
                messages.append({"role": "assistant", "content": content})
                answer = parse_answer(content)
                if answer.error is not None:
                    errors_in_a_row += 1
                    screen = cap_text(view.read(), self.output_cap)
                    self._agent_step(content, answer, [], screen)
                    if errors_in_a_row > self.max_parse_errors:
                        return 1
                    messages.append({"role": "user", "content": CORRECTION.format(
                        error=answer.error, screen=screen)})  # fmt: skip
                    continue
                errors_in_a_row = 0
                for command in answer.commands:
                    await terminal.send(keystroke_bytes(command.keystrokes))
                    wait = min(command.duration, self.max_duration_sec, host.remaining_sec)
                    await asyncio.sleep(max(wait, 0.0))
                screen = cap_text(view.read(), self.output_cap)
                self._agent_step(content, answer, answer.commands, screen, confirming)
                if answer.task_complete:
                    if confirming:
                        return 0
                    confirming = True
                    messages.append({"role": "user", "content": CONFIRM.format(screen=screen)})
                    continue
                confirming = False
                warnings = (
                    "Your previous answer had warnings: " + "; ".join(answer.warnings) + "\n\n"
                    if answer.warnings
                    else ""
                )
                messages.append({"role": "user", "content": OBSERVATION.format(
                    warnings=warnings, screen=screen)})  # fmt: skip
        return 2

    async def _complete(
        self, client: Any, host: HostRun, model: HostModel, messages: list[dict[str, Any]]
    ) -> str:
        """One chat completion from the gateway (retried on its 5xx and transport errors)."""
        import httpx

        body = {"model": model.name, "messages": messages}
        headers = {"Authorization": f"Bearer {model.api_key}"}
        failure = "no answer"
        for attempt in range(MODEL_RETRIES + 1):
            host.check()
            timeout = min(MODEL_TIMEOUT_SEC, max(1.0, host.remaining_sec))
            try:
                answer = await client.post(
                    f"{model.base_url}/chat/completions", json=body, headers=headers,
                    timeout=timeout,
                )  # fmt: skip
            except httpx.HTTPError as exc:
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if answer.status_code == 200:
                    data = answer.json()
                    choice = (data.get("choices") or [{}])[0]
                    content = (choice.get("message") or {}).get("content")
                    return content if isinstance(content, str) else ""
                failure = f"{answer.status_code}: {answer.text[:500]}"
                if answer.status_code < 500 and answer.status_code != 429:
                    break
            if attempt < MODEL_RETRIES:
                await asyncio.sleep(min(2.0**attempt, max(0.0, host.remaining_sec)))
        host.check()
        raise ModelCallError(f"the model call failed: {failure}")

    # -- the record ----------------------------------------------------------------------------

    def _step(self, source: str, message: str, **fields: Any) -> None:
        self.steps.append(
            {"step_id": len(self.steps) + 1, "timestamp": datetime.now(UTC).isoformat(),
             "source": source, "message": message, **fields}
        )  # fmt: skip

    def _agent_step(
        self,
        content: str,
        answer: Answer,
        commands: list[Command],
        screen: str,
        confirming: bool = False,
    ) -> None:
        calls = [
            {"tool_call_id": f"turn-{self.turns}-key-{i}", "function_name": "keystrokes",
             "arguments": {"keystrokes": c.keystrokes, "duration": c.duration}}
            for i, c in enumerate(commands, 1)
        ]  # fmt: skip
        message = (
            content if answer.error else "\n\n".join(filter(None, [answer.analysis, answer.plan]))
        )
        extra: dict[str, Any] = {"task_complete": answer.task_complete, "turn": self.turns}
        if answer.error is not None:
            extra["parse_error"] = answer.error
        if answer.warnings:
            extra["warnings"] = answer.warnings
        if answer.task_complete:
            extra["confirmed"] = confirming
        self._step(
            "agent", message, model_name=self._model_name, llm_call_count=1,
            **({"tool_calls": calls} if calls else {}),
            observation={"results": [{"content": screen}]}, extra={"terminus": extra},
        )  # fmt: skip

    def document(self, trial_id: str) -> dict[str, Any]:
        """The ATIF document of the steps so far, validated."""
        agent: dict[str, Any] = {"name": AGENT_NAME, "version": __version__}
        if self._model_name:
            agent["model_name"] = self._model_name
        doc = {
            "schema_version": atif.SCHEMA_VERSION,
            "session_id": trial_id,
            "agent": agent,
            "steps": self.steps,
            "final_metrics": {"total_steps": len(self.steps)},
            "extra": {"turns": self.turns, "cols": self.cols, "rows": self.rows},
        }
        return atif.dump_trajectory(atif.validate_trajectory(doc))

    async def keep(self, result: TrialResult, agent_dir: Path, scrubber: Scrubber) -> None:
        """The terminal's steps (screens and keystrokes), scrubbed, beside the gateway's."""
        if not self.steps:
            return
        try:
            text = scrubber.text(json.dumps(self.document(result.trial_id), indent=2))
            await run_blocking(agent_dir.mkdir, parents=True, exist_ok=True)
            await write_atomic(agent_dir / TRAJECTORY_NAME, text)
        except Exception as exc:
            result.warnings.append(f"terminus's trajectory was not written: {exc!r}")


async def _pump(terminal: Terminal, view: ScreenView) -> None:
    """The terminal's bytes into the view, until the shell ends."""
    while data := await terminal.receive():
        view.feed(data)


async def _close(terminal: Terminal, reader: asyncio.Task[None]) -> None:
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await reader
    with contextlib.suppress(Exception):
        await terminal.close()


__all__ = [
    "Answer",
    "Command",
    "ScreenView",
    "TerminusAgent",
    "first_json_object",
    "key_bytes",
    "keystroke_bytes",
    "parse_answer",
]
