"""Reading what the verifier left: `reward.json` (a flat map) wins over `reward.txt` (a float).

A reward that is missing, empty, non-finite or malformed is a `validation` failure whose
message names the file and the reason, so a task author can fix the verifier at once.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import aiofiles
import aiofiles.os

from container_runtime import paths
from container_runtime.contract import InvalidRewardError, check_reward
from orchestrator.common.errors import RewardFileError


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


def headline_reward(rewards: dict[str, float]) -> float | None:
    """The one number a summary shows: `reward` if named so, else a lone value."""
    if "reward" in rewards:
        return rewards["reward"]
    if len(rewards) == 1:
        return next(iter(rewards.values()))
    return None
