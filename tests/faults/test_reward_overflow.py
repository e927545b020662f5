"""A reward no float can hold (an int of hundreds of digits) is a `validation` failure naming
the reward file, never an engine error: `check_reward` turns the OverflowError into
InvalidRewardError, and a real trial ends with a result.json and no container."""

from __future__ import annotations

import asyncio
import json
from fractions import Fraction
from pathlib import Path

import pytest

from container_runtime.contract import InvalidRewardError, check_reward
from orchestrator import TrialConfig, run_trial
from orchestrator.common.errors import RewardFileError
from orchestrator.trials.rewards import read_rewards

HUGE = 10**399  # 400 digits; float() raises OverflowError
REWARD_JSON = "/logs/verifier/reward.json"


@pytest.mark.parametrize(
    "value", [HUGE, -HUGE, 10**5000], ids=["400-digits", "negative", "5000-digits"]
)
def test_check_reward_refuses_an_int_a_float_cannot_hold(value: int) -> None:
    with pytest.raises(
        InvalidRewardError, match="must be a finite number a float can hold"
    ) as raised:
        check_reward("reward", value)
    assert "digits" in str(raised.value)
    assert len(str(raised.value)) < 300  # the digits are counted, not printed


def test_check_reward_refuses_a_fraction_a_float_cannot_hold() -> None:
    with pytest.raises(InvalidRewardError, match="must be a finite number a float can hold"):
        check_reward("reward", Fraction(HUGE, 3))


def test_check_reward_still_takes_big_ints_a_float_holds() -> None:
    assert check_reward("reward", 10**300) == 1e300


def test_reward_json_with_a_400_digit_int_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text(json.dumps({"reward": HUGE}))

    with pytest.raises(RewardFileError, match=REWARD_JSON) as raised:
        _read(tmp_path)
    assert "about 400 digits" in str(raised.value)


def test_reward_json_past_the_int_digit_limit_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text('{"reward": ' + "1" * 5000 + "}")

    with pytest.raises(RewardFileError, match=REWARD_JSON):
        _read(tmp_path)


def _read(folder: Path) -> dict[str, float]:
    return asyncio.run(read_rewards(folder))


async def test_a_verifier_writing_a_400_digit_reward_fails_the_trial_as_validation(
    make_task, config: TrialConfig, container_watch
) -> None:
    digits = "1" + "0" * 399
    task = make_task(
        "overflow",
        test_sh=f"#!/bin/sh\necho '{{\"reward\": {digits}}}' > {REWARD_JSON}\n",
    )

    result = await run_trial(task, "nop", config=config, job_id=container_watch.job_id)

    assert result.status == "failure"
    assert result.error is not None
    assert (result.error.category, result.error.type) == ("validation", "RewardFileError")
    assert REWARD_JSON in result.error.message
    assert "float can hold" in result.error.message
    on_disk = json.loads((Path(result.trial_dir) / "result.json").read_text())
    assert on_disk["status"] == "failure"
    assert on_disk["error"]["category"] == "validation"
    assert len(container_watch.created()) == 1
    assert (
        container_watch.client.containers.list(
            ignore_removed=True,
            all=True,
            filters={"label": f"trialbox.job={container_watch.job_id}"},
        )
        == []
    )
