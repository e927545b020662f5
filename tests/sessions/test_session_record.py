"""What a session leaves behind of its calls (trials/session_log.py, docs/sessions.md): an
ATIF `agent/trajectory.json` with one step per command, write and read, in order, scrubbed
of every secret the trial knows; per-command counts and timings in result.json; and the
caps of `Limits.session_*`, each refusal naming its limit and how to raise it. Fake backend.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from container_runtime import atif
from orchestrator import Limits, TrialConfig, TrialResult
from orchestrator.backends.fake import FakeBackend
from orchestrator.common.errors import SessionLimitError
from orchestrator.common.limits import MAX_ARG_BYTES
from orchestrator.report import trajectory as report_trajectory
from orchestrator.tasks.task import load_task
from orchestrator.trials.session import Session, open_session
from tests.conftest import write_task

QUICK = Limits(stop_term_grace_sec=0.5, stop_kill_grace_sec=0.5)
SECRET = "sk-fake-secret-4242"
HOST_SECRET = "host-token-9876-abcd"


def config(tmp_path: Path, limits: Limits = QUICK, **changes: Any) -> TrialConfig:
    fields: dict[str, Any] = {"jobs_dir": tmp_path / "jobs", "backend": {"type": "fake"}}
    return TrialConfig(**(fields | {"limits": limits} | changes))


async def opened(
    tmp_path: Path,
    backend: FakeBackend | None = None,
    *,
    trial_config: TrialConfig | None = None,
    environ: dict[str, str] | None = None,
    **task: Any,
) -> Session:
    folder = write_task(tmp_path / "tasks", "task", **task)
    return await open_session(
        load_task(folder), config=trial_config or config(tmp_path),
        backend=backend or FakeBackend(QUICK), job_id="job-r", session_id="s-1",
        idle_ttl_sec=None, environ=environ,
    )  # fmt: skip


def trajectory(result: TrialResult) -> dict[str, Any]:
    doc = json.loads((Path(result.trial_dir) / "logs/agent/trajectory.json").read_text())
    atif.validate_trajectory(doc)
    assert isinstance(doc, dict)
    return doc


def calls(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any], str, dict[str, Any]]]:
    """Each call step: (tool, arguments, observation, extra.session)."""
    found = []
    for step in doc["steps"][1:]:
        [call] = step["tool_calls"]
        [seen] = step["observation"]["results"]
        assert seen["source_call_id"] == call["tool_call_id"]
        assert (step["source"], step["llm_call_count"]) == ("agent", 0)
        found.append(
            (call["function_name"], call["arguments"], seen["content"], step["extra"]["session"])
        )
    return found


def on_disk(result: TrialResult) -> TrialResult:
    return TrialResult.model_validate_json((Path(result.trial_dir) / "result.json").read_text())


# -- the trajectory ------------------------------------------------------------------------------


async def test_the_trajectory_has_a_step_per_call_in_order(tmp_path: Path) -> None:
    session = await opened(tmp_path, instruction="Make /app/a.txt.\n")

    await session.exec("mkdir -p /app && echo made", cwd="/", env={"MODE": "x"})
    await session.write_file("/app/a.txt", b"hello\n", mode=0o600)
    await session.exec(argv=["cat", "/app/a.txt"], timeout_sec=30, user="root")
    assert await session.read_file("/app/a.txt") == b"hello\n"
    await session.exec("exit 3")
    with pytest.raises(FileNotFoundError):
        await session.read_file("/app/none.txt")
    result = await session.verify()

    doc = trajectory(result)
    assert doc["steps"][0] == {
        "step_id": 1, "timestamp": doc["steps"][0]["timestamp"], "source": "user",
        "message": "Make /app/a.txt.\n",
    }  # fmt: skip
    steps = calls(doc)
    said = [
        (tool, args.get("command") or args.get("argv") or args["path"]) for tool, args, *_ in steps
    ]
    assert said == [
        ("exec", "mkdir -p /app && echo made"),
        ("write_file", "/app/a.txt"),
        ("exec", ["cat", "/app/a.txt"]),
        ("read_file", "/app/a.txt"),
        ("exec", "exit 3"),
        ("read_file", "/app/none.txt"),
    ]  # fmt: skip
    made, wrote, cat, read, failed, missing = steps
    assert (made[1]["cwd"], made[1]["env"], made[1]["user"]) == ("/", ["MODE"], "root")
    assert (made[2], made[3]["exit_code"], made[3]["timed_out"]) == ("made\n", 0, False)
    assert wrote[1] == {"path": "/app/a.txt", "size": 6, "mode": "0600"}  # never the bytes
    assert wrote[2] == "wrote 6 bytes" and "hello" not in json.dumps(wrote)
    assert (cat[1]["timeout_sec"], cat[2]) == (30, "hello\n")
    assert read[2] == "read 6 bytes" and read[1]["max_bytes"] == Limits().session_read_cap_bytes
    assert failed[3]["exit_code"] == 3
    assert missing[3]["error"].startswith("FileNotFoundError: /app/none.txt")
    assert all(step[3]["duration_sec"] >= 0 for step in steps)
    assert doc["session_id"] == "s-1" and doc["final_metrics"] == {"total_steps": 7}
    assert doc["extra"]["calls"] == result.session.model_dump(mode="json")  # type: ignore[union-attr]

    shown = report_trajectory.view(report_trajectory.load(Path(result.trial_dir))[0])
    assert shown.problem is None and len(shown.steps) == 7  # what `trialbox view` shows
    assert [c.name for s in shown.steps for c in s.tool_calls][:2] == ["exec", "write_file"]


@pytest.mark.parametrize("end", ["verify", "close", "abort", "expire", "lost"])
async def test_every_end_writes_the_trajectory(tmp_path: Path, end: str) -> None:
    backend = FakeBackend(QUICK)
    session = await opened(tmp_path, backend)
    await session.exec("echo one")

    if end == "verify":
        await session.verify()
    elif end == "close":
        await session.close()
    elif end == "abort":
        await session.abort("the host shut down")
    elif end == "expire":
        session.idle_ttl_sec = 0.1
        session._idle = asyncio.create_task(session._watch_idle())
        await asyncio.sleep(0.4)
        assert session.status == "expired"
    else:
        backend.created[0].remove_now()
        with pytest.raises(Exception, match="from outside"):
            await session.exec("echo two")

    steps = calls(trajectory(session.result))
    assert steps[0][2] == "one\n"
    if end == "lost":  # the call that found the sandbox gone is the last step, with its error
        assert steps[1][1]["command"] == "echo two"
        assert "was removed" in steps[1][3]["error"]  # as the sandbox said it; result: cause
        assert on_disk(session.result).session.failed == 1  # type: ignore[union-attr]
    else:
        assert len(steps) == 1


async def test_a_command_cut_short_by_close_is_a_step_with_its_error(tmp_path: Path) -> None:
    session = await opened(tmp_path)
    running = asyncio.create_task(session.exec("sleep 30"))
    await asyncio.sleep(0.05)
    result = await session.close()
    with pytest.raises(Exception, match="closed while exec ran"):
        await running

    [(tool, args, _, outcome)] = calls(trajectory(result))
    assert (tool, args["command"]) == ("exec", "sleep 30")
    assert "cancelled while it ran" in outcome["error"]


async def test_a_session_that_never_opened_writes_no_trajectory(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="ghost"):
        await opened(tmp_path, task_toml='[agent]\nuser = "ghost"\n')

    folder = tmp_path / "jobs" / "job-r" / "s-1"
    assert not (folder / "logs" / "agent" / "trajectory.json").exists()
    result = TrialResult.model_validate_json((folder / "result.json").read_text())
    assert result.session is not None and result.session.commands == 0


async def test_a_trajectory_the_caller_s_commands_wrote_is_kept_beside(tmp_path: Path) -> None:
    session = await opened(tmp_path)
    await session.write_file("/logs/agent/trajectory.json", b'{"messages": []}\n')
    result = await session.verify()

    agent = Path(result.trial_dir) / "logs" / "agent"
    assert (agent / "trajectory.agent.json").read_text() == '{"messages": []}\n'
    assert [tool for tool, *_ in calls(trajectory(result))] == ["write_file"]


# -- secrets -------------------------------------------------------------------------------------


async def test_secrets_a_command_shows_never_reach_the_trajectory_or_any_file(
    tmp_path: Path,
) -> None:
    # A credential the caller hands a command, and a task env value read from the host.
    session = await opened(
        tmp_path,
        trial_config=config(tmp_path, credentials={"MY_API_KEY": SECRET}),
        environ={"HOST_TOKEN": HOST_SECRET},
        task_toml='[environment.env]\nTOKEN = "${HOST_TOKEN}"\n',
    )
    keyed = await session.exec('echo "key=$K"', env={"K": SECRET})
    tokened = await session.exec('echo "token=$TOKEN"')
    spelled = await session.exec(f"echo {SECRET} >&2")
    await session.write_file(f"/app/{SECRET}.txt", SECRET.encode())
    result = await session.verify()

    assert keyed.stdout == f"key={SECRET}\n"  # the caller is the agent: it gets what ran
    assert tokened.stdout == f"token={HOST_SECRET}\n"
    assert spelled.stdout == f"{SECRET}\n"
    steps = calls(trajectory(result))
    assert [content for _, _, content, _ in steps[:3]] == [
        "key=[redacted]\n", "token=[redacted]\n", "[redacted]\n",
    ]  # fmt: skip
    assert steps[2][1]["command"] == "echo [redacted] >&2"
    assert steps[3][1]["path"] == "/app/[redacted].txt"
    for path in Path(result.trial_dir).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert SECRET.encode() not in data and HOST_SECRET.encode() not in data, path


async def test_output_is_scrubbed_before_it_is_cut_in_the_trajectory(tmp_path: Path) -> None:
    limits = QUICK.model_copy(update={"session_trajectory_output_cap_bytes": 12})
    session = await opened(
        tmp_path, trial_config=config(tmp_path, limits, credentials={"MY_API_KEY": SECRET})
    )
    shown = await session.exec('echo "$K"', env={"K": SECRET})
    long = await session.exec("echo 0123456789abcdef")
    result = await session.close()

    assert (shown.stdout, long.stdout) == (f"{SECRET}\n", "0123456789abcdef\n")
    [(_, _, secret, cut_not), (_, _, cut, cut_yes)] = calls(trajectory(result))
    assert (secret, cut_not["output_cut"]) == ("[redacted]\n", False)  # no piece of it left
    assert (cut, cut_yes["output_cut"], cut_yes["truncated"]) == ("0123456789ab", True, False)
    assert b"sk-fake" not in (Path(result.trial_dir) / "logs/agent/trajectory.json").read_bytes()


# -- timings -------------------------------------------------------------------------------------


async def test_result_json_counts_and_times_the_commands(tmp_path: Path) -> None:
    session = await opened(tmp_path)
    await session.exec("true")
    await session.exec("sleep 0.2")
    await session.exec("sleep 30", timeout_sec=0.1)
    await session.write_file("/app/x", b"12345")
    await session.read_file("/app/x")
    result = await session.verify()

    kept = on_disk(result).session
    assert kept is not None and kept == result.session
    assert (kept.commands, kept.timed_out, kept.writes, kept.reads, kept.failed) == (3, 1, 1, 1, 0)
    assert (kept.bytes_written, kept.bytes_read) == (5, 5)
    assert 0.2 <= kept.longest_command_sec < 5
    assert kept.longest_command_sec + 0.1 <= kept.commands_sec <= result.timings.agent
    assert kept.files_sec >= 0
    assert result.agent.detail == "a session of 5 call(s)"


def test_a_result_written_before_sessions_counted_calls_still_reads() -> None:
    old = {
        "trial_id": "t", "job_id": "j", "task_name": "x", "agent_spec": "session",
        "status": "success", "started_at": "2025-01-01T00:00:00Z", "trial_dir": "/tmp/t",
    }  # fmt: skip
    assert TrialResult.model_validate(old).session is None


# -- caps ----------------------------------------------------------------------------------------


async def test_each_cap_refuses_naming_its_limit_and_the_session_goes_on(tmp_path: Path) -> None:
    limits = QUICK.model_copy(
        update={
            "session_command_cap_bytes": 40,
            "session_output_cap_bytes": 10,
            "session_write_cap_bytes": 16,
            "session_read_cap_bytes": 8,
        }
    )
    session = await opened(tmp_path, trial_config=config(tmp_path, limits))

    raise_it = r"raise it with TrialConfig\(limits=Limits\({}=\.\.\.\)\)"
    with pytest.raises(SessionLimitError, match=r"45 bytes.*session_command_cap_bytes = 40"):
        await session.exec("echo " + "x" * 40)
    with pytest.raises(SessionLimitError, match=raise_it.format("session_command_cap_bytes")):
        await session.exec(argv=["echo", "y" * 40])
    with pytest.raises(SessionLimitError, match=r"17 bytes .*session_write_cap_bytes = 16"):
        await session.write_file("/app/big", b"z" * 17)
    await session.write_file("/app/nine", b"123456789")
    with pytest.raises(SessionLimitError, match=raise_it.format("session_read_cap_bytes")):
        await session.read_file("/app/nine")
    with pytest.raises(SessionLimitError, match=r"session_read_cap_bytes = 8"):
        await session.read_file("/app/nine", max_bytes=1000)  # never past the limit
    with pytest.raises(ValueError, match=r"longer than max_bytes \(4\)"):
        await session.read_file("/app/nine", max_bytes=4)
    cut = await session.exec("echo 0123456789abcdef")
    assert (cut.stdout, cut.truncated) == ("0123456789", True)
    assert session.status == "ready"
    result = await session.close()

    # Refused before the sandbox: not steps. Cut at the sandbox: steps, with their error.
    steps = calls(trajectory(result))
    assert [(tool, "error" in outcome) for tool, _, _, outcome in steps] == [
        ("write_file", False), ("read_file", True), ("read_file", True), ("read_file", True),
        ("exec", False),
    ]  # fmt: skip
    assert steps[-1][3]["truncated"] is True


def test_the_command_cap_stays_within_what_linux_passes() -> None:
    assert Limits(session_command_cap_bytes=MAX_ARG_BYTES).session_command_cap_bytes == 131071
    with pytest.raises(ValidationError, match="session_command_cap_bytes"):
        Limits(session_command_cap_bytes=MAX_ARG_BYTES + 1)
