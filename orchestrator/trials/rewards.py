"""Reading what the verifier left: `reward.json` (a flat map) wins over `reward.txt` (a float).

A reward that is missing, empty, non-finite or malformed is a `validation` failure whose
message names the file and the reason, so a task author can fix the verifier at once. The
reward scored is the snapshot the verifier's own exec printed the moment tests/test.sh exited
(`RewardSnapshot`): a process left behind cannot change it, and a collected copy that differs
from it is a warning naming the file and both digests.

`read_rewards` reads a collected copy; `parse_snapshot` the snapshot; `changed_after` compares
them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import aiofiles
import aiofiles.os

from container_runtime import paths
from container_runtime.contract import InvalidRewardError, check_reward
from orchestrator.common.errors import RewardFileError
from orchestrator.sandbox.commands import NOT_A_FILE, REWARD_FILES, SNAPSHOT_CAP


def _parse_json(text: str) -> dict[str, float]:
    where = paths.REWARD_JSON
    if not text.strip():
        raise RewardFileError(where, 'the file is empty; write a JSON map such as {"reward": 1}')
    try:
        data = json.loads(text, parse_constant=lambda c: float(c))
    except ValueError as exc:  # JSONDecodeError, and ints past Python's digit limit
        raise RewardFileError(where, f"not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or not data:
        raise RewardFileError(where, "must be a non-empty flat JSON map of {name: number}")
    try:
        return {name: check_reward(name, value) for name, value in data.items()}
    except InvalidRewardError as exc:
        raise RewardFileError(where, str(exc)) from exc


def _parse_txt(text: str) -> dict[str, float]:
    where = paths.REWARD_TXT
    if not text.strip():
        raise RewardFileError(where, "the file is empty; write one number such as 1")
    try:
        value = float(text.strip())
    except ValueError as exc:
        raise RewardFileError(where, f"not a number: {text.strip()[:80]!r}") from exc
    if not math.isfinite(value):
        raise RewardFileError(where, f"not a finite number: {text.strip()[:80]!r}")
    return {"reward": value}


def _decoded(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RewardFileError(where, "not UTF-8 text") from exc


async def _text(file: Path, where: str) -> str:
    try:
        async with aiofiles.open(file, encoding="utf-8") as handle:
            return await handle.read()
    except UnicodeDecodeError as exc:
        raise RewardFileError(where, "not UTF-8 text") from exc


NO_REWARD = "the verifier wrote neither reward.json nor reward.txt"


async def read_rewards(verifier_dir: Path) -> dict[str, float]:
    """The rewards in a collected copy of /logs/verifier; raises RewardFileError."""
    json_file = verifier_dir / "reward.json"
    if await aiofiles.os.path.isfile(json_file):
        return _parse_json(await _text(json_file, paths.REWARD_JSON))
    txt_file = verifier_dir / "reward.txt"
    if await aiofiles.os.path.isfile(txt_file):
        return _parse_txt(await _text(txt_file, paths.REWARD_TXT))
    raise RewardFileError(paths.VERIFIER_DIR, NO_REWARD)


@dataclass(frozen=True)
class RewardSnapshot:
    """`reward.json` and `reward.txt` as they stood when tests/test.sh exited, printed by the
    verifier's exec itself: each file's bytes (up to one past `SNAPSHOT_CAP`), None when it
    was not there; `odd` names those there as something other than a regular file."""

    files: dict[str, bytes | None]
    odd: frozenset[str] = frozenset()

    def digests(self) -> dict[str, str]:
        """sha256 of each file that was there."""
        return {n: hashlib.sha256(b).hexdigest() for n, b in self.files.items() if b is not None}

    def rewards(self) -> dict[str, float]:
        """The rewards, by the rules of `read_rewards`; raises RewardFileError."""
        for name in REWARD_FILES:
            where = f"{paths.VERIFIER_DIR}/{name}"
            if name in self.odd:
                raise RewardFileError(where, "not a regular file (a symlink, a folder, a FIFO?)")
            data = self.files.get(name)
            if data is None:
                continue
            if len(data) > SNAPSHOT_CAP:
                raise RewardFileError(
                    where, f"larger than {SNAPSHOT_CAP} bytes: a reward file holds a few "
                    "numbers; the verifier wrote something else",
                )  # fmt: skip
            text = _decoded(data, where)
            return _parse_json(text) if name == "reward.json" else _parse_txt(text)
        raise RewardFileError(paths.VERIFIER_DIR, NO_REWARD)

    def as_record(self) -> dict[str, object]:
        """What `<trial>/reward-snapshot.json` keeps: each file's digest, size and text."""
        return {
            name: None if data is None else {
                "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                "text": data[:SNAPSHOT_CAP].decode("utf-8", errors="replace"),
            }
            for name, data in self.files.items()
        }  # fmt: skip


def parse_snapshot(output: str, mark: str) -> RewardSnapshot | None:
    """The snapshot in the verifier exec's output (`sandbox.commands.RunVerifier` prints it: a
    `MARK name` line, the file as `od` hex, per file there; `MARK name other` for one that is
    no regular file; `MARK end` last), or None when it is not there whole (no `od` in
    the image, the exec cut short)."""
    if f"{mark} end" not in output.splitlines():
        return None
    files: dict[str, bytes | None] = dict.fromkeys(REWARD_FILES)
    odd: set[str] = set()
    sections = re.split(rf"^{re.escape(mark)} ", output, flags=re.MULTILINE)[1:]
    for section in sections:
        head, _, body = section.partition("\n")
        name, _, what = head.strip().partition(" ")
        if name not in files:
            continue
        if what == NOT_A_FILE:
            odd.add(name)
            continue
        try:
            files[name] = bytes.fromhex("".join(body.split()))
        except ValueError:
            return None
    return RewardSnapshot(files, frozenset(odd))


def changed_after(snapshot: RewardSnapshot, verifier_dir: Path) -> list[str]:
    """A warning per reward file whose collected copy is not what it held when tests/test.sh
    exited (a process left running changed it): the score stays the snapshot's."""
    warnings = []
    before = snapshot.digests()
    for name in REWARD_FILES:
        file = verifier_dir / name
        try:
            after: str | None = hashlib.sha256(file.read_bytes()).hexdigest()
        except OSError:  # gone, or no regular file
            after = None
        if after != before.get(name):
            was = before.get(name, "absent")
            now = "absent" if after is None else f"sha256 {after}"
            warnings.append(
                f"{paths.VERIFIER_DIR}/{name} changed after tests/test.sh exited (a process "
                f"left running wrote it): scored as it stood at the exit (sha256 {was}), the "
                f"collected copy is {now}"
                if was != "absent" else
                f"{paths.VERIFIER_DIR}/{name} appeared after tests/test.sh exited (a process "
                f"left running wrote it, {now}): not scored"
            )  # fmt: skip
    return warnings


def headline_reward(rewards: dict[str, float]) -> float | None:
    """The one number a summary shows: `reward` if named so, else a lone value."""
    if "reward" in rewards:
        return rewards["reward"]
    if len(rewards) == 1:
        return next(iter(rewards.values()))
    return None
