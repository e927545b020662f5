"""Terminus without an engine: the answers' lenient parsing, the keystrokes' bytes, the screen
rendered by pyte, and the loop's recovery and confirmation over a fake terminal."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest

from orchestrator.trials.agents import parse_agent
from orchestrator.trials.host_agent import HostModel, HostRun
from orchestrator.trials.terminus import (
    ScreenView,
    TerminusAgent,
    cap_text,
    first_json_object,
    key_bytes,
    keystroke_bytes,
    parse_answer,
)


def test_the_first_json_object_is_found_in_prose_and_fences() -> None:
    text = 'Sure! {not json} here:\n```json\n{"plan": "p", "commands": []}\n``` and {"x": 1}'
    assert first_json_object(text) == {"plan": "p", "commands": []}
    assert first_json_object("no object at all [1, 2]") is None


def test_a_good_answer_is_read_whole() -> None:
    answer = parse_answer(json.dumps({
        "analysis": "a", "plan": "p", "task_complete": False,
        "commands": [{"keystrokes": "ls\n", "duration": 0.5}, {"keystrokes": "C-c"}],
    }))  # fmt: skip
    assert answer.error is None
    assert (answer.analysis, answer.plan, answer.task_complete) == ("a", "p", False)
    assert [(c.keystrokes, c.duration) for c in answer.commands] == [("ls\n", 0.5), ("C-c", 1.0)]
    assert answer.warnings == []


def test_missing_fields_are_defaulted_with_warnings() -> None:
    answer = parse_answer('{"task_complete": "true"}')
    assert answer.error is None and answer.task_complete is True and answer.commands == []
    assert any("analysis" in w for w in answer.warnings)
    bad = parse_answer('{"commands": [{"keystrokes": "x", "duration": "soon"}]}')
    assert bad.error is None and bad.commands[0].duration == 1.0
    assert any("duration" in w for w in bad.warnings)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("just prose", "no JSON object"),
        ('{"commands": "ls"}', "'commands' must be a list"),
        ('{"commands": [{"duration": 1}]}', "command 1 has no string 'keystrokes'"),
        ('{"commands": ["ls"]}', "command 1 has no string 'keystrokes'"),
    ],
)
def test_an_answer_that_cannot_be_used_says_why(text: str, error: str) -> None:
    assert (parse_answer(text).error or "").startswith(error)


def test_tmux_key_names_map_to_bytes() -> None:
    assert keystroke_bytes("C-c") == b"\x03"
    assert keystroke_bytes("C-d") == b"\x04"
    assert keystroke_bytes("^Z") == b"\x1a"
    assert keystroke_bytes("Enter") == b"\r"
    assert keystroke_bytes(" Escape ") == b"\x1b"
    assert keystroke_bytes("Up") == b"\x1b[A"
    assert keystroke_bytes("M-x") == b"\x1bx"
    assert keystroke_bytes("C-[") == b"\x1b"
    assert key_bytes("Tab") == b"\t" and key_bytes("ls") is None
    # Anything else is typed as it is, each newline an Enter.
    assert keystroke_bytes("echo C-c\n") == b"echo C-c\r"
    assert keystroke_bytes(":wq\r\n") == b":wq\r"
    assert keystroke_bytes("") == b""
    assert keystroke_bytes("héllo") == "héllo".encode()


def test_the_screen_is_rendered_by_pyte() -> None:
    view = ScreenView(cols=20, rows=4)
    view.feed(b"$ echo hi\r\nhi\r\n$ ")
    assert view.read() == "$ echo hi\nhi\n$"
    # Colours and cursor moves are rendered, not shown; a clear screen clears it.
    view.feed(b"\x1b[31mred\x1b[0m\r\n\x1b[2J\x1b[Htop\x1b[3;5Hmid")
    assert view.read() == "top\n\n    mid"
    # Lines that scroll off since the last read come first, once.
    view.feed(b"\x1b[2J\x1b[H" + b"".join(b"line %d\r\n" % i for i in range(6)))
    assert view.read().splitlines() == [f"line {i}" for i in range(6)]
    assert view.read().splitlines() == ["line 3", "line 4", "line 5"]
    # UTF-8 split across reads is put back together.
    data = "é".encode()
    view.feed(data[:1])
    view.feed(data[1:])
    assert view.screen_text().endswith("é")


def test_the_output_is_capped_at_its_end() -> None:
    assert cap_text("abc", 5) == "abc"
    assert cap_text("0123456789", 4) == "[... 6 characters cut ...]\n6789"


def test_terminus_is_a_host_agent_spec() -> None:
    agent = parse_agent("terminus")
    assert isinstance(agent, TerminusAgent) and agent.on_host and agent.needs_model


# -- the loop over a fake terminal (a tiny line-echoing shell) and a fake model -------------


class EchoTerminal:
    """Echoes what it is sent (Enter as a new line and a prompt), `^C` on Ctrl-C."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.out: asyncio.Queue[bytes] = asyncio.Queue()
        self.out.put_nowait(b"$ ")
        self.closed = False

    async def send(self, data: bytes) -> None:
        self.sent.append(data)
        self.out.put_nowait(data.replace(b"\x03", b"^C\r\n$ ").replace(b"\r", b"\r\n$ "))

    async def receive(self) -> bytes:
        if self.closed:
            return b""
        return await self.out.get()

    async def close(self) -> None:
        self.closed = True
        self.out.put_nowait(b"")


class FakeSandbox:
    def __init__(self) -> None:
        self.terminal = EchoTerminal()

    async def open_terminal(
        self, user: str = "", cols: int = 160, rows: int = 40, *,
        workdir: str | None = None, env: Mapping[str, str] | None = None,
    ) -> EchoTerminal:  # fmt: skip
        return self.terminal


def scripted(agent: TerminusAgent, answers: list[str], seen: list[list[dict[str, Any]]]) -> None:
    async def complete(client: Any, host: Any, model: Any, messages: list[dict[str, Any]]) -> str:
        seen.append([dict(m) for m in messages])
        return answers[min(len(seen), len(answers)) - 1]

    agent._complete = complete  # type: ignore[method-assign]


def reply(*keys: str, complete: bool = False) -> str:
    commands = [{"keystrokes": k, "duration": 0.01} for k in keys]
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands,
                       "task_complete": complete})  # fmt: skip


async def run_fake(answers: list[str], **options: Any) -> tuple[int, Any, list[Any], Any]:
    sandbox = FakeSandbox()
    agent = TerminusAgent(**options)
    seen: list[list[dict[str, Any]]] = []
    scripted(agent, answers, seen)
    host = HostRun(
        sandbox, instruction="do it", timeout_sec=30,  # type: ignore[arg-type]
        model=HostModel(base_url="http://127.0.0.1:1/v1", api_key="k", name="m", max_turns=8),
    )  # fmt: skip
    code = await agent.run(host)
    return code, agent, seen, sandbox.terminal


async def test_the_loop_recovers_confirms_and_closes_the_terminal() -> None:
    answers = ["no json here", reply("echo hi\n", "C-c"), reply(complete=True),
               reply(complete=True)]  # fmt: skip
    code, agent, seen, terminal = await run_fake(answers)
    assert code == 0 and terminal.closed
    assert len(seen) == 4
    assert "could not be used: no JSON object" in seen[1][-1]["content"]
    assert "echo hi" in seen[2][-1]["content"] and "^C" in seen[2][-1]["content"]
    assert "Are you sure" in seen[3][-1]["content"]
    assert terminal.sent == [b"echo hi\r", b"\x03"]
    doc = agent.document("trial-1")
    assert [s["source"] for s in doc["steps"]] == ["user", "agent", "agent", "agent", "agent"]
    assert doc["steps"][4]["extra"]["terminus"]["confirmed"] is True


async def test_a_true_then_false_needs_confirming_again() -> None:
    answers = [reply(complete=True), reply("ls\n"), reply(complete=True), reply(complete=True)]
    code, _, seen, _ = await run_fake(answers)
    assert code == 0 and len(seen) == 4
    assert "Are you sure" in seen[1][-1]["content"] and "Are you sure" in seen[3][-1]["content"]
    assert "Are you sure" not in seen[2][-1]["content"]


async def test_too_many_malformed_answers_in_a_row_give_up() -> None:
    code, _, seen, terminal = await run_fake(["nope"], max_parse_errors=2)
    assert code == 1 and len(seen) == 3 and terminal.closed


async def test_the_turns_are_bounded() -> None:
    code, agent, seen, _ = await run_fake([reply("ls\n")])
    assert code == 2 and len(seen) == 8 and agent.turns == 8
