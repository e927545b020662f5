"""What the agent (or the verifier's own leftovers) did to the sandbox cannot dodge or forge
the score, on the real engine with the default limits: the framework's folders are put back
before the verifier with a warning naming what was found, the reward is what the files held
when tests/test.sh exited, and `--stop-leftovers` / `[verifier] stop_leftovers` kill what a
root agent left running. (A root agent's leftover that writes the reward while test.sh runs,
without the stop, is the strict xfail in tests/orchestrator/test_trial_security.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import TrialConfig, TrialResult, run_trial
from tests.conftest import EXAMPLES, MakeTask

pytestmark = pytest.mark.docker

SCORES_ZERO = "#!/bin/sh\necho 0 > /logs/verifier/reward.txt\n"
STOPPED = "leftover processes were stopped before the verifier"
# A root agent that does not solve the task but leaves a process writing 1 to reward.txt
# (bounded: about 15 s at most).
FORGER = (
    "command:nohup sh -c 'i=0; while [ $i -lt 1500 ]; do mkdir -p /logs/verifier; "
    "echo 1 > /logs/verifier/reward.txt; sleep 0.01; i=$((i + 1)); done' >/dev/null 2>&1 &"
)
# Gives a forger its chance for sure: waits (at most 2 s) for a reward.txt it did not write.
WAITS_FOR_A_FORGER = (
    "#!/bin/sh\ni=0; while [ ! -e /logs/verifier/reward.txt ] && [ $i -lt 100 ]; do "
    "sleep 0.02; i=$((i + 1)); done\necho 0 > /logs/verifier/reward.txt\n"
)


def written(result: TrialResult) -> dict:
    """result.json as the trial wrote it: it exists and agrees with the returned result."""
    on_disk = json.loads((Path(result.trial_dir) / "result.json").read_text())
    assert on_disk["reward"] == result.reward and on_disk["warnings"] == result.warnings
    return on_disk


def found(result: TrialResult, *needles: str) -> str:
    """The one "before the verifier" warning that names all of `needles`."""
    hits = [w for w in result.warnings if w.startswith("before the verifier")]
    match = [w for w in hits if all(n in w for n in needles)]
    assert match, f"no warning naming {needles}: {result.warnings}"
    return match[0]


@pytest.mark.parametrize(
    ("replace", "shown"),
    [("ln -s / /logs", "/logs -> /"), ("echo x > /logs", "-rw-r--r--")],
    ids=["symlink-to-root", "file"],
)
async def test_an_agent_that_replaces_logs_is_scored_with_a_warning(
    config: TrialConfig, make_task: MakeTask, replace: str, shown: str
) -> None:
    """Was `validation` for the symlink (the reward landed outside the collected tree): a
    sample the agent could exclude at will. Now the verifier scores it, as always."""
    task = make_task("replace-logs", test_sh=SCORES_ZERO)
    result = await run_trial(task, f"command:rm -rf /logs; {replace}", config=config)

    assert result.error is None, result.error
    assert (result.status, result.reward) == ("success", 0.0)
    assert "the agent's doing" in found(result, "/logs was no folder", shown)
    assert written(result)["rewards"] == {"reward": 0.0}


async def test_tests_opt_trialbox_and_prewritten_rewards_planted_by_the_agent_are_undone(
    config: TrialConfig, make_task: MakeTask
) -> None:
    task = make_task(
        "plant",
        test_sh="#!/bin/sh\n[ -e /tests/forged ] && echo 1 > /logs/verifier/reward.txt || "
        "echo 0 > /logs/verifier/reward.txt\n",
    )
    # A runtime venv mounted read-only cannot be removed, but the folder above it can be
    # moved aside (the image's own venv, on a remote engine, is removed).
    plant = (
        "command:mkdir -p /tests && touch /tests/forged && "
        "{ rm -rf /opt/trialbox 2>/dev/null || mv /opt/trialbox /opt/trialbox.aside; } && "
        "ln -s /tmp /opt/trialbox && echo 1 > /logs/verifier/reward.txt"
    )
    result = await run_trial(task, plant, config=config)

    assert result.error is None, result.error
    assert result.reward == 0.0
    found(result, "/tests was there before the verifier's upload")
    found(result, "/opt/trialbox was no folder", "-> /tmp")
    found(result, "/logs/verifier was not empty", "reward.txt")
    written(result)


async def test_a_verifier_s_leftover_rewriting_the_reward_cannot_change_the_score(
    config: TrialConfig, make_task: MakeTask
) -> None:
    """test.sh writes 1 and leaves a process that, once the verifier's exec is over (its
    snapshot printed), empties and rewrites reward.txt for a while (bounded: about 3 s). Was
    0 or `validation` at random; now always the 1 test.sh left, whatever was collected.
    The exec's shell is test.sh's grandparent (a `timeout` is between them), which outlives
    the snapshot."""
    test_sh = (
        "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n"
        "set -- $(cat /proc/$PPID/stat); run=$4\n"
        "nohup sh -c 'while kill -0 '$run' 2>/dev/null; do sleep 0.01; done; i=0; "
        "while [ $i -lt 150 ]; do : > /logs/verifier/reward.txt; sleep 0.01; "
        "echo 0 > /logs/verifier/reward.txt; sleep 0.01; i=$((i + 1)); done' "
        ">/dev/null 2>&1 &\n"
    )
    task = make_task("rewriting-leftover", test_sh=test_sh)
    for _ in range(3):
        result = await run_trial(task, "nop", config=config)

        assert result.error is None, result.error
        assert (result.status, result.reward) == ("success", 1.0)
        snapshot = json.loads((Path(result.trial_dir) / "reward-snapshot.json").read_text())
        assert snapshot["reward.txt"]["text"] == "1\n"
        collected = (Path(result.trial_dir) / "logs" / "verifier" / "reward.txt").read_text()
        changed = [w for w in result.warnings if "changed after tests/test.sh exited" in w]
        # The collection races the leftover: whichever copy it got, the warning says so.
        assert bool(changed) == (collected != "1\n"), (collected, result.warnings)


async def test_the_task_key_stops_a_root_agent_s_leftover_that_writes_the_reward(
    config: TrialConfig, make_task: MakeTask
) -> None:
    """The forger of test_lingering_process_cannot_forge_the_reward, with the stop asked:
    it is killed before the verifier, which scores the 0 the agent earned."""
    task = make_task(
        "forger-stopped", test_sh=WAITS_FOR_A_FORGER,
        task_toml="[verifier]\nstop_leftovers = true\n",
    )  # fmt: skip
    result = await run_trial(task, FORGER, config=config)

    assert result.error is None, result.error
    assert result.reward == 0.0
    assert any(STOPPED in w for w in written(result)["warnings"]), result.warnings


async def test_stop_leftovers_in_the_config_stops_a_service_the_agent_was_asked_to_leave(
    config: TrialConfig,
) -> None:
    """The opt-in's price: the service-left-running example, solved, scores 1 without it
    (tests/orchestrator/test_trial_scoring.py) and 0 with it, saying why."""
    stopping = config.model_copy(update={"stop_leftovers": True})
    result = await run_trial(EXAMPLES / "service-left-running", "oracle", config=stopping)

    assert result.error is None, result.error
    assert result.reward == 0.0
    assert any(STOPPED in w and "service" in w for w in written(result)["warnings"])


async def test_an_agent_that_breaks_the_verifier_s_setup_is_the_agent_s_failure(
    config: TrialConfig, make_task: MakeTask
) -> None:
    """A root agent that plants /tests (so the setup must remove it) and turns `rm` into
    `false`: the setup exec fails in a sandbox that runs and was not touched from outside, so
    the sample counts (never infra, never retried)."""
    task = make_task("break-rm", test_sh=SCORES_ZERO)
    agent = "command:mkdir /tests && cp /bin/false /usr/bin/rm"
    result = await run_trial(task, agent, config=config)

    assert result.error is not None
    assert (result.error.category, result.error.phase) == ("agent", "verify")
    assert not result.error.discardable
    assert "exited 1" in result.error.message and "the agent left it" in result.error.message
    assert written(result)["error"]["category"] == "agent"


async def test_the_one_exec_s_staged_folder_is_gone_before_test_sh_and_tests_is_root_s(
    config: TrialConfig, make_task: MakeTask
) -> None:
    """The label waits for the one exec in a folder only root may enter, under a name no
    agent could guess: on a local engine in the sandbox's read-only slot folder, written from
    the host (no upload). When test.sh runs, /tests is root's (0700), nothing is left at the
    root, and the slot's copy is root's (0700) and cannot be written."""
    test_sh = (
        "#!/bin/sh\nset -- /.trialbox-verifier-*\nleft=$1\n"
        "set -- /run/trialbox-gateway/verifier-*\n"
        '[ ! -e "$left" ] && [ "$(stat -c %a:%u /tests)" = "700:0" ] '
        '&& [ "$(stat -c %a:%u "$1")" = "700:0" ] && ! touch "$1/x" 2>/dev/null '
        "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    task = make_task("staged", test_sh=test_sh)
    result = await run_trial(task, "nop", config=config)

    assert result.error is None, result.error
    assert result.reward == 1.0
