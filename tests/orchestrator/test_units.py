"""Pure host-side pieces, no engine: the Dockerfile patch, reward files, config, archives."""

from __future__ import annotations

import asyncio
import io
import tarfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator import RewardFileError, TrialConfig
from orchestrator.backends.docker.dockerfile import (
    final_stage_image,
    final_stage_user,
    map_base_images,
    patch_dockerfile,
)
from orchestrator.common.archive import TRUNCATION_NOTE, extract_stream, tar_of_files
from orchestrator.common.errors import AgentSpecError
from orchestrator.common.scrub import REDACTED, Scrubber
from orchestrator.common.terminal import plain
from orchestrator.trials.agents import (
    CommandAgent,
    NopAgent,
    OracleAgent,
    WorkflowAgent,
    parse_agent,
)
from orchestrator.trials.config import parse_image_map
from orchestrator.trials.rewards import headline_reward, read_rewards

TOOLS = "trialbox-tools:0123456789abcdef0123"
MAP = {"python:3.11-slim-bookworm": "trialbox-base/python3:bookworm"}

# -- the Dockerfile patch ---------------------------------------------------------------------

MULTI_STAGE = """\
FROM --platform=linux/amd64 python:3.11-slim-bookworm AS build
USER builder
RUN echo build
FROM python:3.11-slim-bookworm
USER app:app
WORKDIR /app
"""


def test_patch_is_deterministic() -> None:
    first = patch_dockerfile(MULTI_STAGE, TOOLS, MAP)
    assert first == patch_dockerfile(MULTI_STAGE, TOOLS, dict(MAP))
    assert first.startswith(map_base_images(MULTI_STAGE, MAP))
    assert first != patch_dockerfile(MULTI_STAGE, "trialbox-tools:other", MAP)


def test_patch_restores_the_final_stage_user() -> None:
    patched = patch_dockerfile(MULTI_STAGE, TOOLS, MAP)
    block = patched[len(map_base_images(MULTI_STAGE, MAP)) :]
    lines = block.strip().splitlines()
    assert "USER root" in lines
    assert lines[-1] == "USER app:app"  # the final stage's, not the build stage's
    assert lines.index("USER root") < next(i for i, x in enumerate(lines) if "COPY" in x)
    assert f"COPY --from={TOOLS} /uv /opt/trialbox/uv" in lines


def test_patch_without_user_switches_no_user() -> None:
    text = "FROM debian AS build\nUSER app\nFROM python:3.11-slim-bookworm\nRUN true"
    patched = patch_dockerfile(text, TOOLS, {})
    assert final_stage_user(text) is None
    assert "\nUSER " not in patched[len(text) :]
    assert patched.startswith(text + "\n")  # a missing final newline is added, not glued


def test_patch_runs_as_root_when_the_user_is_inherited() -> None:
    text = "FROM python:3.11-slim-bookworm AS base\nUSER nobody\nFROM base\nWORKDIR /tmp\n"
    block = patch_dockerfile(text, TOOLS, {})[len(text) :].splitlines()
    assert "USER root" in block
    assert block.index("USER root") < next(i for i, x in enumerate(block) if "COPY" in x)
    assert block[-1] == "USER nobody"


def test_final_stage_user_reads_continuations() -> None:
    text = "FROM a\nRUN echo \\\n  USER fake\nUSER \\\n  real\n"
    assert final_stage_user(text) == "real"


def test_mapping_touches_only_mapped_from_lines() -> None:
    text = (
        "FROM --platform=linux/amd64 python:3.11-slim-bookworm AS build\n"
        "FROM debian:bookworm AS other\n"
        "RUN echo python:3.11-slim-bookworm\n"
        "from python:3.11-slim-bookworm\n"
        "COPY --from=build /x /x\n"
    )
    mapped = map_base_images(text, MAP)
    assert mapped.splitlines() == [
        "FROM --platform=linux/amd64 trialbox-base/python3:bookworm AS build",
        "FROM debian:bookworm AS other",
        "RUN echo python:3.11-slim-bookworm",
        "from trialbox-base/python3:bookworm",
        "COPY --from=build /x /x",
    ]
    assert map_base_images(text, {}) == text


def test_final_stage_image_follows_stage_names() -> None:
    text = "FROM python:3.11-slim-bookworm AS base\nRUN true\nFROM base AS app\nFROM app\n"
    assert final_stage_image(text) == "python:3.11-slim-bookworm"
    assert final_stage_user(text, {"python:3.11-slim-bookworm": "app"}) == "app"
    assert final_stage_image(text + "USER x\n") is None


# -- reward files -----------------------------------------------------------------------------


def verifier_dir(tmp_path: Path, **files: str | bytes) -> Path:
    folder = tmp_path / "verifier"
    folder.mkdir()
    for name, content in files.items():
        path = folder / name.replace("_", ".")
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return folder


def test_reward_json_wins_over_txt(tmp_path: Path) -> None:
    folder = verifier_dir(tmp_path, reward_json='{"reward": 0.5, "speed": 2}', reward_txt="1")
    assert asyncio.run(read_rewards(folder)) == {"reward": 0.5, "speed": 2.0}


def test_reward_txt_is_one_number(tmp_path: Path) -> None:
    rewards = asyncio.run(read_rewards(verifier_dir(tmp_path, reward_txt=" 0.75\n")))
    assert rewards == {"reward": 0.75}


@pytest.mark.parametrize(
    ("files", "where", "reason"),
    [
        ({"reward_json": '{"reward": true}'}, "reward.json", "must be a number"),
        ({"reward_json": '{"reward": "1"}'}, "reward.json", "must be a number"),
        ({"reward_json": '{"reward": NaN}'}, "reward.json", "finite"),
        ({"reward_json": '{"a": {"b": 1}}'}, "reward.json", "must be a number"),
        ({"reward_json": "[1]"}, "reward.json", "flat JSON map"),
        ({"reward_json": "{}"}, "reward.json", "flat JSON map"),
        ({"reward_json": "  \n"}, "reward.json", "empty"),
        ({"reward_json": "{", "reward_txt": "1"}, "reward.json", "not valid JSON"),
        ({"reward_txt": ""}, "reward.txt", "empty"),
        ({"reward_txt": "inf"}, "reward.txt", "finite"),
        ({"reward_txt": "true"}, "reward.txt", "not a number"),
        ({"reward_txt": b"\xff\xfe"}, "reward.txt", "UTF-8"),
        ({}, "/logs/verifier", "neither reward.json nor reward.txt"),
    ],
)
def test_unusable_rewards_name_the_file(
    tmp_path: Path, files: dict[str, str | bytes], where: str, reason: str
) -> None:
    with pytest.raises(RewardFileError) as raised:
        asyncio.run(read_rewards(verifier_dir(tmp_path, **files)))
    assert where in raised.value.path
    assert reason in str(raised.value)
    assert raised.value.category == "validation"


def test_headline_reward() -> None:
    assert headline_reward({"reward": 0.5, "x": 1}) == 0.5
    assert headline_reward({"x": 1.0}) == 1.0
    assert headline_reward({"x": 1.0, "y": 0.0}) is None


# -- config -----------------------------------------------------------------------------------


def test_parse_image_map() -> None:
    assert parse_image_map("a=b, c:1=d/e:2 ,") == {"a": "b", "c:1": "d/e:2"}
    assert parse_image_map(["a=b", ""]) == {"a": "b"}
    assert parse_image_map("") == {}


@pytest.mark.parametrize("entry", ["a", "=b", "a=", " = ", "a=b,c"])
def test_parse_image_map_errors(entry: str) -> None:
    with pytest.raises(ValueError, match="expected FROM_IMAGE=LOCAL_IMAGE"):
        parse_image_map(entry)


def test_trial_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIALBOX_BASE_IMAGE_MAP", "x=y")
    assert TrialConfig().base_image_map == {"x": "y"}
    assert TrialConfig(base_image_map="a=b").base_image_map == {"a": "b"}
    with pytest.raises(ValidationError, match="FROM_IMAGE=LOCAL_IMAGE"):
        TrialConfig(base_image_map=["nope"])
    with pytest.raises(ValidationError):
        TrialConfig(limits={"log_file_cap_bytes": 0})
    with pytest.raises(ValidationError):
        TrialConfig(unknown=1)  # type: ignore[call-arg]  # an unknown field is the point
    assert "hunter22" not in repr(TrialConfig(credentials={"K": "hunter22"}))


# -- agents -----------------------------------------------------------------------------------


def test_parse_agent(tmp_path: Path) -> None:
    assert isinstance(parse_agent("oracle"), OracleAgent)
    assert isinstance(parse_agent("nop"), NopAgent)
    command = parse_agent("command:echo a:b")
    assert isinstance(command, CommandAgent)
    assert command.command() == "echo a:b"
    source = tmp_path / "my_flow.py"
    source.write_text("")
    workflow = parse_agent(f"workflow:{source}:Flow")
    assert isinstance(workflow, WorkflowAgent)
    assert "--workflow my_flow:Flow" in workflow.command()


@pytest.mark.parametrize(
    "spec", ["oracle:x", "bogus", "command:  ", "workflow:nofile.py:X", "workflow:x", ""]
)
def test_bad_agent_specs(spec: str) -> None:
    with pytest.raises(AgentSpecError):
        parse_agent(spec)


@pytest.mark.parametrize(
    ("spec", "hint"),
    [("orcale", "did you mean oracle?"), ("comand:ls -l", "did you mean command:ls -l?"),
     ("sh", None), ("bogus", None)],
)  # fmt: skip
def test_a_mistyped_agent_is_named_with_the_one_it_probably_meant(
    spec: str, hint: str | None
) -> None:
    with pytest.raises(AgentSpecError, match="unknown agent") as caught:
        parse_agent(spec)
    assert (hint in str(caught.value)) if hint else "did you mean" not in str(caught.value)


# -- scrubbing --------------------------------------------------------------------------------


def test_scrubber(tmp_path: Path) -> None:
    scrub = Scrubber(["sk-long-secret", "sk-long", "abc"])
    assert scrub.text("x sk-long-secret y sk-long abc") == f"x {REDACTED} y {REDACTED} abc"
    assert not Scrubber(["ab", ""])
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"\x00sk-long\xff")
    scrub.tree(tmp_path)
    assert (tmp_path / "d" / "f").read_bytes() == b"\x00" + REDACTED.encode() + b"\xff"


# -- archives ---------------------------------------------------------------------------------


def tar_with(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = ""):
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, len(data) if kind == tarfile.REGTYPE else 0, link
    return info, data if kind == tarfile.REGTYPE else None


def chunked(data: bytes, size: int = 7919) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_extract_stream_caps_big_members(tmp_path: Path) -> None:
    big = b"x" * 100_000
    data = tar_with([member("logs/big.txt", big), member("logs/small.txt", b"small")])
    truncated = extract_stream(chunked(data), tmp_path, file_cap=1000)

    assert truncated == ["logs/big.txt"]
    assert (tmp_path / "logs/big.txt").read_bytes() == b"x" * 1000 + TRUNCATION_NOTE % 1000
    assert (tmp_path / "logs/small.txt").read_bytes() == b"small"


def test_extract_stream_skips_links_and_escapes(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    data = tar_with(
        [
            member("logs", kind=tarfile.DIRTYPE),
            member("logs/link", kind=tarfile.SYMTYPE, link="/etc/passwd"),
            member("logs/hard", kind=tarfile.LNKTYPE, link="/etc/passwd"),
            member("/abs.txt", b"absolute"),
            member("../up.txt", b"up"),
            member("logs/../../up2.txt", b"up"),
            member("logs/fifo", kind=tarfile.FIFOTYPE),
            member("logs/ok.txt", b"ok"),
        ]
    )
    assert extract_stream(chunked(data, 512), dest) == []

    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "dest",
        "dest/logs",
        "dest/logs/ok.txt",
    ]
    assert not Path("/abs.txt").exists()


def test_tar_of_files_round_trip(tmp_path: Path) -> None:
    data = tar_of_files({"a/b.txt": b"hello"}, dirs={"a": 0o755, "c": 0o777})
    extract_stream([data], tmp_path)
    assert (tmp_path / "a/b.txt").read_bytes() == b"hello"
    assert (tmp_path / "c").is_dir()
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        modes = {m.name: m.mode for m in archive.getmembers()}
    assert modes == {"a": 0o755, "c": 0o777, "a/b.txt": 0o644}


@pytest.mark.parametrize(
    ("printed", "text"),
    [
        ("\x1b[1;31merror\x1b[0m: no", "error: no"),  # colours (CSI)
        ("\x1b[2K\x1b[1Gdone", "done"),  # a progress bar's line clear and cursor move
        ("\x1b]0;title\x07ok", "ok"),  # a window title (OSC)
        ("\x1b(Bplain", "plain"),
        ("no escapes [1m here", "no escapes [1m here"),
    ],
)
def test_plain_drops_terminal_escapes_and_keeps_the_words(printed: str, text: str) -> None:
    assert plain(printed) == text
